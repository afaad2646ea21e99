r"""Priors over a model's parameters: ``ModuleEnergy(module, ..., prior=...)``.

A prior is declared once, in terms of the module's parameter names, and bound by the
energy to its flat parameter vector θ ∈ R^P (:meth:`Prior.bind`). The bound prior gives,
per chain (``theta [C, P]``):

* ``energy(theta) -> [C]``: −log p(θ) up to a constant (what the sampler sees);
* ``log_prob(theta) -> [C]``: the normalised log density (tested against
  ``torch.distributions``);
* ``grad(theta) -> [C, P]``: ∇(−log p), in closed form;
* ``hessian_diag(theta, generator, num_probes) -> [C, P]``: diag ∇²(−log p), the curvature
  pSGLD's ``include_gamma`` needs (closed form; Hutchinson for a user density);
* ``sample(generator, shape) -> [*shape, P]``: draws from the prior, every random number
  from ``generator`` (``ModuleEnergy.initial_position("prior")``, prior-predictive checks).

Built in (each parameter may be a float, a ``{name pattern: value}`` map or, for ``loc``, a
state dict — e.g. pretrained weights, to centre the prior there):

=============================  ====================================================
:class:`Normal` (loc, scale)   the default, ``prior_std=σ`` is ``Normal(0, σ)``
:class:`Laplace` (loc, scale)  sparsity-inducing; ∇ is sign(θ−μ)/b, curvature 0
:class:`StudentT` (df, ...)    heavy tails (df = 1 is Cauchy)
:class:`ScaleMixtureNormal`    π N(μ, σ₁²) + (1−π) N(μ, σ₂²), the spike-and-slab-style
                               BNN prior of Blundell et al. (2015)
:class:`LogDensity` (fn)       any user density on the flat vector or the parameter
                               dict; gradient by autograd
=============================  ====================================================

and a ``{name pattern: prior}`` map (first matching pattern wins; a pattern that matches no
parameter is an error) puts different priors on different parameters.
"""

from __future__ import annotations

from .families import (
    Laplace,
    Normal,
    ScaleMixtureNormal,
    StudentT,
    _BoundLaplace,
    _BoundNormal,  # noqa: F401
    _BoundScaleMixture,
    _BoundStudentT,
)
from .hyperpriors import GammaPrecision, HalfCauchy
from .prior import (
    _LOG_2PI,
    BoundPrior,
    Flat,
    LogDensity,
    Prior,
    _BoundComposite,
    _BoundFlat,
    _BoundLogDensity,  # noqa: F401
    _describe,
    _from_state_dict,
    _PatternPriors,
    _take,
    _vector,
    as_prior,
)

# one home for every prior class, whichever file defines it: the fingerprint of a run names
# library classes by module and qualified name, and pickles find them there, so runs written
# when the priors were one module (structmc.priors) still resume and load
for _cls in (
    Prior,
    BoundPrior,
    Flat,
    LogDensity,
    _BoundComposite,
    _BoundFlat,
    _BoundLogDensity,
    _PatternPriors,
    Laplace,
    Normal,
    ScaleMixtureNormal,
    StudentT,
    _BoundLaplace,
    _BoundNormal,
    _BoundScaleMixture,
    _BoundStudentT,
    GammaPrecision,
    HalfCauchy,
):
    _cls.__module__ = __name__
del _cls

__all__ = [
    "Prior",
    "BoundPrior",
    "Normal",
    "Laplace",
    "StudentT",
    "ScaleMixtureNormal",
    "LogDensity",
    "Flat",
    "HalfCauchy",
    "GammaPrecision",
    "as_prior",
]
