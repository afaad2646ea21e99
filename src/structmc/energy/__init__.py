r"""Energies: the negative log posterior as a function of a flat parameter vector.

An energy maps a batch of chains ``theta: [C, P]`` and a minibatch to ``U: [C]`` and its
gradient ``[C, P]``. Convention (docs/conventions.md):

.. math::  \hat U(\theta) = -\frac{N}{n}\sum_{i\in\text{batch}} \log p(y_i\mid x_i,\theta) - \log p(\theta)

``num_data`` is N. The N/n scaling lives here and nowhere else: with ``num_data=N`` the
minibatch energy is an unbiased estimate of the full-data energy; with ``num_data=None`` no
scaling is applied (the batch is treated as the whole data set) — :func:`structmc.sample`
fills ``num_data`` with the length of ``data`` when it is left ``None``.

Minibatches reach an energy as a tuple of tensors with a leading chain dimension
(``[C, n, ...]``), one independent minibatch per chain; for a module the last tensor is the
target and the others are the module's inputs. ``batch=None`` means "no data".

The package, by job: :mod:`~structmc.energy.protocols` (:class:`Energy`,
:class:`HessianDiagEnergy`, :class:`StatefulEnergy`), :mod:`~structmc.energy.bases`
(:class:`EnergyBase`, :class:`WrappedEnergy`), :mod:`~structmc.energy.log_density`
(:class:`LogDensityEnergy`), :mod:`~structmc.energy.module_energy` (:class:`ModuleEnergy`;
its evaluation paths in :mod:`~structmc.energy.paths`), :mod:`~structmc.energy.noisy`
(:class:`NoisyGradientEnergy`) and :mod:`~structmc.energy.functions` (:func:`as_energy`,
:func:`validate_data`, :func:`check_finite_at`, :func:`full_data_value_and_grad`). Every name
is importable from ``structmc.energy``, its home.
"""

from __future__ import annotations

import types

from .._vmap import vmap  # noqa: F401

# the facade (issue 23): what moved to these modules stays importable from structmc.energy
from ..autodiff import hutchinson_diag  # noqa: F401  (its home before structmc.autodiff)
from ..energy_checks import (
    _all_finite,
    _check_batch_layout,
    _check_theta,
    _first_layer,  # noqa: F401
    _refuse_dropout,
    _refuse_meta,
    check_deterministic,
    check_module_data,
    probe,
)
from ..likelihoods import (
    Likelihood,
    _bernoulli,
    _categorical,
    _categorical_chains,  # noqa: F401
    _check_soft_labels,
    _class_indices,
    make_likelihood,
)
from ..module_binding import bind_flat, buffer_chains, chain_buffers, swap_buffers  # noqa: F401
from ..space import ParamSpace  # noqa: F401
from .bases import EnergyBase, WrappedEnergy, _as_num_data, _described
from .functions import as_energy, check_finite_at, full_data_value_and_grad, validate_data
from .log_density import DensityShapeError, LogDensityEnergy, _chain_slice, _check_scalar
from .module_energy import ModuleEnergy, _select_sampled
from .noisy import NoisyGradientEnergy
from .paths import _ModuleEvaluation
from .protocols import (
    Batch,
    DrawSpaceEnergy,
    Energy,
    HessianDiagEnergy,
    StatefulEnergy,
    draw_space_of,
    from_draws_of,
    to_draws_of,
)

__all__ = [
    "Batch",
    "Energy",
    "HessianDiagEnergy",
    "StatefulEnergy",
    "DrawSpaceEnergy",
    "draw_space_of",
    "to_draws_of",
    "from_draws_of",
    "EnergyBase",
    "WrappedEnergy",
    "LogDensityEnergy",
    "DensityShapeError",
    "ModuleEnergy",
    "NoisyGradientEnergy",
    "as_energy",
    "validate_data",
    "check_finite_at",
    "full_data_value_and_grad",
]

# One home for every class and function of the package, whichever file defines it: a run's
# fingerprint names library objects by module and qualified name (structmc.fingerprint), and
# pickles find classes and functions there, so runs written when the energies were one module
# (structmc.energy) still resume and load. A method keeps its name through its class:
# structmc.energy.ModuleEnergy.value, and ModuleEnergy's evaluation paths (defined on its base
# _ModuleEvaluation) are named as the ModuleEnergy methods they were, e.g.
# structmc.energy.ModuleEnergy.forward_draws.
for _obj in (
    Energy,
    HessianDiagEnergy,
    StatefulEnergy,
    EnergyBase,
    WrappedEnergy,
    DensityShapeError,
    LogDensityEnergy,
    _ModuleEvaluation,
    ModuleEnergy,
    NoisyGradientEnergy,
    _described,
    _as_num_data,
    _chain_slice,
    _check_scalar,
    _select_sampled,
    as_energy,
    validate_data,
    check_finite_at,
    full_data_value_and_grad,
):
    _obj.__module__ = __name__
    for _name, _member in vars(_obj).items() if isinstance(_obj, type) else ():
        if isinstance(_member, types.FunctionType):
            _member.__module__ = __name__
            if _obj is _ModuleEvaluation:
                _member.__qualname__ = f"ModuleEnergy.{_name}"
del _obj, _name, _member
