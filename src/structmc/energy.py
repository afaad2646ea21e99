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
"""

from __future__ import annotations

import copy
import fnmatch
import operator
import warnings
from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor, nn
from torch.func import functional_call

from . import fingerprint
from ._vmap import vmap  # torch.func.vmap, immune to tensordict's patches (issue 22 §3)
# the facade (issue 23): what moved to these modules stays importable from structmc.energy
from .autodiff import hutchinson_diag  # noqa: F401  (its home before structmc.autodiff)
from .energy_checks import (_all_finite, _check_batch_layout, _check_theta, _first_layer,  # noqa: F401
                            _refuse_dropout, _refuse_meta, check_deterministic, check_module_data, probe)
from .likelihoods import (Likelihood, _bernoulli, _categorical, _categorical_chains,  # noqa: F401
                          _check_soft_labels, _class_indices, make_likelihood)
from .module_binding import bind_flat, buffer_chains, chain_buffers, swap_buffers
from .space import ParamSpace

Batch = Sequence[Tensor] | None


@runtime_checkable
class Energy(Protocol):
    """What samplers and the run loop need from a target: declared members, never probed.

    Subclass :class:`EnergyBase` for the defaults of everything but ``space``, ``num_data``,
    ``value_and_grad``, ``value`` and ``with_num_data``; an energy defined on top of another
    subclasses :class:`WrappedEnergy`, which forwards what the base defines. Adding an energy
    needs no change to the run loop. The members:

    * ``space``: the :class:`~structmc.space.ParamSpace` of θ (``[C, P]``, P = ``space.dim``).
    * ``num_data`` (the same contract for every energy): N, the number of data points the
      minibatch energy stands for. An energy built from a likelihood applies the N/n scaling
      itself, so that ``value(theta, batch)`` is an unbiased estimate of the full-data energy;
      ``None`` means no scaling (the batch is the whole data set). ``with_num_data(N)`` returns
      a copy with that N (``structmc.sample`` calls it when ``num_data`` is ``None``).
    * ``device``/``dtype``: where the energy computes (``None``: wherever θ lives); the run
      loop moves ``init`` there.
    * ``cv_base``: the energy a control variate evaluates at its centre (the energy itself, or
      the base of a structured energy).
    * ``evaluations_per_call``: model evaluations one call costs per chain (1; M or K for
      structured energies), which the run loop counts.
    * ``requires_data``: whether the energy has a likelihood that needs minibatches
      (``sample`` refuses to run it without ``data``).
    * ``has_buffers``: whether the energy keeps per-chain buffers (a module's BatchNorm
      statistics); when true it also answers ``buffer_chains`` (chains whose buffers are kept,
      or ``None``) and ``chain_buffers(c)``. A control variate then evaluates θ and its centre
      in two calls, and a chain carries the buffers for prediction.
    * ``check(data, init, batch_size, batching, *, num_points)``: refuse, before any compute,
      what the energy cannot run on (``ValueError``/``TypeError`` saying what to change):
      ``data`` (tensors ``(inputs..., targets)`` without the chain dimension: all of them, or
      a Dataset's first items), ``init`` (the initial positions ``[C, P]`` on the energy's
      device), minibatches of ``batch_size`` rows drawn by ``batching`` out of ``num_points``
      data points. ``None`` is not checked. ``Run`` calls it once, before sampling.
    * ``describe()``: a JSON-able dict of what defines the target, data excluded: ``kind``
      (the class name), ``num_data``, settings and fingerprints (hashes from
      :mod:`structmc.fingerprint`) of its parts, ``unfingerprintable`` (what could not be
      hashed) where anything, and ``base`` (the base's ``describe()``) for a wrapper. Resume
      compares it (:func:`structmc.fingerprint.energy_fingerprint`): two energies that
      describe the same are the same target.
    * ``value_and_grad(theta, batch)``, ``value(theta, batch)``: the energy ``[C]`` (and its
      gradient ``[C, P]``), detached. The layout: ``theta`` is ``[C, P]`` and every tensor of
      ``batch`` is ``[C, n, ...]``, chain first: each chain its own minibatch. To evaluate
      several draws on one shared batch ``(x [n, d], y [n])``, expand it:
      ``tuple(t.expand(C, *t.shape) for t in batch)`` (no copy). A batch without the chain
      dimension is refused with this layout in the message.

    Optional, for :func:`~structmc.predictive` and :func:`~structmc.evaluate`:
    ``predictive_energy``, the energy whose model predicts from this energy's draws (it has
    ``likelihood``, ``forward_draws``, ``has_buffers``, ``buffer_chains``, ``chain_buffers``
    and the same ``space``), or ``None`` when there is none. A :class:`ModuleEnergy` and a
    :class:`~structmc.priors.HierarchicalEnergy` are their own; a
    :class:`~structmc.structured.StructuredEnergy` predicts through its base's.
    """

    space: ParamSpace
    num_data: int | None
    evaluations_per_call: int
    requires_data: bool

    @property
    def device(self) -> torch.device | None: ...

    @property
    def dtype(self) -> torch.dtype | None: ...

    @property
    def cv_base(self) -> "Energy": ...

    @property
    def has_buffers(self) -> bool: ...

    def value_and_grad(self, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        """``theta [C, P]`` -> (energy ``[C]``, gradient ``[C, P]``), both detached."""
        ...

    def value(self, theta: Tensor, batch: Batch) -> Tensor:
        """Energy ``[C]`` without gradient."""
        ...

    def with_num_data(self, num_data: int | None) -> "Energy":
        ...

    def check(self, data: Sequence[Tensor] | None = None, init: Tensor | None = None, batch_size: int | None = None,
              batching: str | None = None, *, num_points: int | None = None) -> None:
        ...

    def describe(self) -> dict:
        ...


@runtime_checkable
class HessianDiagEnergy(Protocol):
    """An energy that can estimate its Hessian diagonal on a minibatch (pSGLD's Γ term)."""

    def hessian_diag(self, theta: Tensor, batch: Batch, generator: torch.Generator | None = None,
                     num_probes: int = 1) -> Tensor: ...


@runtime_checkable
class StatefulEnergy(Protocol):
    """An energy that keeps state across iterations (structured SGMCMC's chain history).

    The run loop calls ``start(theta0)`` before the first iteration, ``observe(theta)`` after
    every iteration, and checkpoints ``state_dict()`` / restores ``load_state_dict(state,
    device)``. ``fresh()`` returns a copy with its own (empty) state, so that two runs never
    share mutable state through one energy object.
    """

    def start(self, theta0: Tensor) -> None: ...

    def observe(self, theta: Tensor) -> None: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict, device=None) -> None: ...

    def fresh(self) -> "StatefulEnergy": ...


# ---------------------------------------------------------------------------------------
# The declared members' defaults, and the one way to wrap an energy
# ---------------------------------------------------------------------------------------
class EnergyBase:
    """The defaults of the members an :class:`Energy` declares (see there); subclass it and
    define ``space``, ``num_data``, ``value_and_grad``, ``value`` and ``with_num_data``.

    One model evaluation per call, no likelihood (``requires_data = False``), computes
    wherever θ lives, is its own control-variate base, keeps no per-chain buffers, checks
    nothing, and describes itself by a fingerprint of its class (code included) and
    attributes (``energy_object``)."""

    evaluations_per_call = 1
    requires_data = False
    device = None  # computes wherever θ lives
    dtype = None
    has_buffers = False  # no per-chain buffers: buffer_chains is None, chain_buffers refuses
    buffer_chains = None

    @property
    def cv_base(self) -> "Energy":
        return self

    def chain_buffers(self, chain: int) -> dict[str, Tensor]:
        raise ValueError(f"{type(self).__name__} keeps no per-chain buffers (has_buffers is False)")

    def check(self, data: Sequence[Tensor] | None = None, init: Tensor | None = None, batch_size: int | None = None,
              batching: str | None = None, *, num_points: int | None = None) -> None:
        """Refuse, before any compute, what this energy cannot run on (see :class:`Energy`);
        by default nothing is checked."""

    def describe(self) -> dict:
        """What defines this energy (see :class:`Energy`): its class, code included, and its
        attributes (a wrapper's ``base`` apart), hashed as ``energy_object``."""
        part, unchecked = fingerprint.object_fingerprint(self, f"the energy {type(self).__qualname__}",
                                                         exclude=("base",))
        return _described(self, {"energy_object": part}, unchecked)

    def describe_v1(self) -> dict:
        """This level's parts of the version-1 fingerprint (what structmc 0.1 recorded, still
        compared against checkpoints it wrote: :func:`structmc.fingerprint.legacy_energy_fingerprint`);
        none by default."""
        return {}

    def levels(self) -> list:
        """This energy, then the energies it wraps, outermost first."""
        return [self]


def _described(energy, parts: dict, unchecked: Sequence[str] = (), base: "Energy | None" = None) -> dict:
    """A ``describe()`` dict: kind, ``num_data``, ``parts``, what was not fingerprinted, the base's."""
    out = {"kind": type(energy).__name__, "num_data": energy.num_data, **parts}
    if unchecked:
        out["unfingerprintable"] = list(unchecked)
    if base is not None:
        out["base"] = base.describe()
    return out


class WrappedEnergy(EnergyBase):
    """An energy defined on top of another, ``base``: it forwards, by declaration, what the
    base defines — ``space`` (override the property where the wrapper changes the parameter
    space), ``num_data``, ``device``, ``dtype``, ``requires_data``, ``evaluations_per_call``,
    ``has_buffers``/``buffer_chains``/``chain_buffers``, ``check`` and ``value`` /
    ``value_and_grad`` — and rebuilds itself around ``base.with_num_data(N)`` for
    ``with_num_data`` (through :meth:`with_base`: override it where a copy must not share
    state). ``describe()`` nests the base's under ``base``. ``cv_base`` is the wrapper itself
    (a control variate's centre term is the wrapped energy's), unless a subclass says otherwise.
    """

    def __init__(self, base: Energy):
        self.base = base

    @property
    def space(self) -> ParamSpace:
        return self.base.space

    @property
    def num_data(self) -> int | None:
        return self.base.num_data

    @property
    def device(self) -> torch.device | None:
        return self.base.device

    @property
    def dtype(self) -> torch.dtype | None:
        return self.base.dtype

    @property
    def requires_data(self) -> bool:
        return self.base.requires_data

    @property
    def evaluations_per_call(self) -> int:
        return self.base.evaluations_per_call

    @property
    def has_buffers(self) -> bool:
        return self.base.has_buffers

    @property
    def buffer_chains(self) -> int | None:
        return self.base.buffer_chains

    def chain_buffers(self, chain: int) -> dict[str, Tensor]:
        return self.base.chain_buffers(chain)

    def levels(self) -> list:
        return [self, *self.base.levels()]

    def with_base(self, base: Energy) -> "WrappedEnergy":
        """A copy of this wrapper around ``base`` (a shallow copy by default)."""
        new = copy.copy(self)
        new.base = base
        return new

    def with_num_data(self, num_data) -> "WrappedEnergy":
        return self.with_base(self.base.with_num_data(num_data))

    def check(self, data: Sequence[Tensor] | None = None, init: Tensor | None = None, batch_size: int | None = None,
              batching: str | None = None, *, num_points: int | None = None) -> None:
        """The base's checks."""
        self.base.check(data, init, batch_size, batching, num_points=num_points)

    def describe(self) -> dict:
        """:meth:`EnergyBase.describe` of the wrapper (its own attributes), the base's under ``base``."""
        out = super().describe()
        out["base"] = self.base.describe()
        return out

    def value_and_grad(self, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        return self.base.value_and_grad(theta, batch)

    def value(self, theta: Tensor, batch: Batch) -> Tensor:
        return self.base.value(theta, batch)


def _chain_slice(batch: Batch, c: int) -> Batch:
    return None if batch is None else tuple(t[c] for t in batch)


def _as_num_data(num_data) -> int | None:
    """``num_data`` as a positive int (``None`` stays ``None``); a non-integer N (``100.5``)
    or a bool is an error, never a truncation."""
    if num_data is None:
        return None
    if isinstance(num_data, (bool, str, bytes)):
        raise ValueError(f"num_data must be a positive integer, got {num_data!r}")
    try:
        n = operator.index(num_data)
    except TypeError:
        try:
            f = float(num_data)
        except (TypeError, ValueError):
            raise ValueError(f"num_data must be a positive integer, got {num_data!r}") from None
        if not f.is_integer():
            raise ValueError(f"num_data must be a positive integer (the number of data points), got {num_data!r}")
        n = int(f)
    if n < 1:
        raise ValueError(f"num_data must be positive, got {num_data!r}")
    return int(n)


class DensityShapeError(ValueError):
    """A user log density returned something other than one scalar per chain."""


def _check_scalar(value, what: str, hint: str) -> Tensor:
    if not isinstance(value, Tensor):
        value = torch.as_tensor(value)
    if value.dim() != 0:  # under vmap this is the per-chain shape
        raise DensityShapeError(f"{what} returned a tensor of shape {list(value.shape)} for one chain; it must "
                                f"return a scalar{hint}")
    return value


# ---------------------------------------------------------------------------------------
# Energies from a user log density
# ---------------------------------------------------------------------------------------
class LogDensityEnergy(EnergyBase):
    """Energy of a user log density over a flat vector, in one of two forms.

    * ``LogDensityEnergy(log_prob, dim)``: ``U = -log_prob(theta, batch)``, used as is.
      ``log_prob(theta [P], batch) -> scalar`` must itself be (an unbiased estimate of) the
      full-data log posterior up to a constant: no N/n scaling is added, ``num_data`` is
      only recorded (it weights chunks in :func:`full_data_value_and_grad`).
    * ``LogDensityEnergy(dim=dim, log_likelihood=..., log_prior=...)``: the energy applies
      the N/n scaling like every other energy,
      ``U = -(N/n)·log_likelihood(theta, batch) - log_prior(theta)``, with
      ``log_likelihood(theta [P], batch) -> scalar`` summed over the minibatch and
      ``log_prior(theta [P]) -> scalar``; ``num_data=None`` means no scaling.

    ``batch`` is the chain's minibatch (a tuple of ``[n, ...]`` tensors) or ``None``. Chains
    are evaluated with ``torch.func.vmap``; if the function cannot be vmapped we fall back
    to a loop over chains (with a warning). With ``vectorized=True`` the function itself
    takes ``[C, P]`` and the chain-batched minibatch and returns ``[C]``. ``model`` is an
    optional object the density came from (e.g. a :class:`~structmc.models.PMF`, for its
    predictions).
    """

    predictive_energy = None  # a log density has no model that predicts (see Energy)

    @property
    def requires_data(self) -> bool:
        return self.log_likelihood is not None

    def __init__(self, log_prob: Callable | None = None, dim: int | None = None, *, vectorized: bool = False,
                 num_data: int | None = None, log_likelihood: Callable | None = None,
                 log_prior: Callable | None = None, model=None):
        parts = log_likelihood is not None or log_prior is not None
        if parts == (log_prob is not None):
            raise TypeError("give either log_prob, or log_likelihood and log_prior")
        if parts and not (callable(log_likelihood) and callable(log_prior)):
            raise TypeError("log_likelihood and log_prior must both be callables")
        if not parts and not callable(log_prob):
            raise TypeError("log_prob must be callable")
        if dim is None or isinstance(dim, bool) or int(dim) != dim or int(dim) < 1:
            raise ValueError(f"dim must be a positive integer, got {dim}")
        num_data = _as_num_data(num_data)
        self.log_prob = log_prob
        self.log_likelihood, self.log_prior = log_likelihood, log_prior
        self.space = ParamSpace.flat(int(dim))
        self.vectorized = vectorized
        self.num_data = num_data
        self.model = model
        self._use_vmap = True

    def with_num_data(self, num_data):
        new = copy.copy(self)
        new.num_data = _as_num_data(num_data)
        return new

    def describe(self) -> dict:
        """Kind, ``num_data`` and the functions that define the density (their code, closures
        and globals; see :mod:`structmc.fingerprint`), each with ``vectorized``."""
        parts, unchecked = {}, []
        for key, f in (("log_prob", self.log_prob), ("log_likelihood", self.log_likelihood),
                       ("log_prior", self.log_prior)):
            if f is not None:
                parts[key], missing = fingerprint.value_fingerprint(
                    {"fn": f, "vectorized": bool(self.vectorized)}, f"the {key.replace('_', ' ')} function")
                unchecked += missing
        return _described(self, parts, unchecked)

    def describe_v1(self) -> dict:
        """Version 1: the qualified names of the functions."""
        return {name: getattr(f, "__qualname__", type(f).__name__)
                for name, f in (("log_prob", self.log_prob), ("log_likelihood", self.log_likelihood),
                                ("log_prior", self.log_prior)) if f is not None}

    def _log_density(self, theta: Tensor, batch) -> Tensor:
        """Log density of one chain (or of ``[C, P]`` when vectorized)."""
        if self.vectorized:  # shapes are checked on the [C] result
            if self.log_prob is not None:
                return self.log_prob(theta, batch)
            lp = self.log_prior(theta)
            if batch is None:
                raise ValueError("this energy has a likelihood: pass data=(...) to sample()")
            scale = 1.0 if self.num_data is None else self.num_data / batch[-1].shape[1]
            return lp + scale * self.log_likelihood(theta, batch)
        if self.log_prob is not None:
            return _check_scalar(self.log_prob(theta, batch), "log_prob",
                                 " (the log posterior of that chain's θ [P], summed over the minibatch)")
        lp = _check_scalar(self.log_prior(theta), "log_prior", " (the log prior of that chain's θ [P])")
        if batch is None:
            raise ValueError("this energy has a likelihood: pass data=(...) to sample()")
        n = batch[-1].shape[0]
        scale = 1.0 if self.num_data is None else self.num_data / n
        ll = _check_scalar(self.log_likelihood(theta, batch), "log_likelihood",
                           " (the log-likelihood summed over the minibatch: add .sum())")
        return lp + scale * ll

    def _log_prob_chains(self, theta: Tensor, batch: Batch) -> Tensor:
        if self.vectorized:
            out = self._log_density(theta, batch)
            if not isinstance(out, Tensor) or out.numel() != theta.shape[0]:
                shape = list(out.shape) if isinstance(out, Tensor) else type(out).__name__
                raise DensityShapeError(f"a vectorized log density must return one value per chain "
                                        f"[{theta.shape[0]}], got {shape}")
            return out.reshape(theta.shape[0])
        if theta.shape[0] == 1:
            return self._log_density(theta[0], _chain_slice(batch, 0)).reshape(1)
        if self._use_vmap:
            try:
                if batch is None:
                    return vmap(lambda t: self._log_density(t, None))(theta)
                return vmap(lambda t, *b: self._log_density(t, tuple(b)))(theta, *batch)
            except DensityShapeError:
                raise
            except Exception as err:  # vmap-incompatible user code: correct but slower
                warnings.warn(f"log density could not be vmapped ({err}); evaluating chains in a loop")
                self._use_vmap = False
        return torch.stack([self._log_density(theta[c], _chain_slice(batch, c)) for c in range(theta.shape[0])])

    def value_and_grad(self, theta, batch):
        _check_theta(theta, self.space.dim)
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            energy = -self._log_prob_chains(leaf, batch)
            (grad,) = torch.autograd.grad(energy.sum(), leaf)
        return energy.detach(), grad

    @torch.no_grad()
    def value(self, theta, batch):
        _check_theta(theta, self.space.dim)
        return -self._log_prob_chains(theta, batch)

    def hessian_diag(self, theta: Tensor, batch: Batch, generator=None, num_probes: int = 1) -> Tensor:
        """Hutchinson estimate of diag ∇²U ``[C, P]`` (for pSGLD's Γ term)."""
        _check_theta(theta, self.space.dim)
        return hutchinson_diag(lambda t: -self._log_prob_chains(t, batch), theta, generator, num_probes)


# ---------------------------------------------------------------------------------------
# Energies from an nn.Module
# ---------------------------------------------------------------------------------------
def validate_data(energy: Energy, data) -> None:
    """Check ``data`` against ``energy`` before any compute: ``energy.check(data)`` (a wrapper
    checks through its base; an energy without data checks does nothing). ``data=None`` is not
    checked."""
    if data is not None:
        energy.check(data)


def _select_sampled(module: nn.Module, sample) -> None:
    """Sample only the parameters ``sample`` selects (a name pattern, a list of patterns, or a
    predicate ``(name, parameter) -> bool``); the others get ``requires_grad=False`` and stay
    fixed at their values (no gradient memory, no place in θ)."""
    names = [n for n, _ in module.named_parameters()]
    if callable(sample):
        chosen = {n for n, p in module.named_parameters() if sample(n, p)}
        what = "the predicate"
    else:
        patterns = [sample] if isinstance(sample, str) else list(sample)
        if not patterns or not all(isinstance(p, str) for p in patterns):
            raise TypeError(f"sample must be a name pattern, a list of patterns or a predicate, got {sample!r}")
        unused = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
        if unused:
            raise ValueError(f"sample pattern(s) {unused} select no parameter; the parameters are: "
                             f"{', '.join(names[:40])}{' ...' if len(names) > 40 else ''}")
        chosen = {n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)}
        what = f"sample={sample!r}"
    if not chosen:
        raise ValueError(f"{what} selects no parameter; the parameters are: {', '.join(names[:40])}")
    for n, p in module.named_parameters():
        p.requires_grad_(n in chosen)


class ModuleEnergy(EnergyBase):
    r"""Energy of an ``nn.Module`` with a likelihood and a prior on its parameters.

    ``U(θ) = -(N/n) Σ_batch log p(y|x, θ) − log p(θ)`` (constants dropped).

    The prior is ``prior_std`` — a float or a ``{name pattern: σ}`` map (``{"*.bias": 10,
    "*": 1}``), the zero-mean Normal, 1 by default — or ``prior=``, any prior of
    :mod:`structmc.priors` (``Normal(loc=pretrained_state_dict, scale=0.1)``, ``Laplace``,
    ``StudentT``, ``ScaleMixtureNormal``, a ``{pattern: prior}`` map, or a callable log
    density on the flat vector); not both.

    ``sample`` (a name pattern such as ``"fc.*"``, a list of patterns, or a predicate
    ``(name, parameter) -> bool``) samples only the parameters it selects — e.g. the last
    layer of a pretrained network; the others stay fixed at their current values, on the
    module's device, with ``requires_grad=False`` (no gradient memory). Without it every
    parameter with ``requires_grad=True`` is sampled. ``space``, partitions, Gibbs blocks and
    ``Chain`` names cover the sampled parameters only.
    The module is deep-copied; its parameters become views of one flat buffer so a single
    chain runs the module's own forward with no per-tensor work and the backward pass writes
    straight into one flat gradient. Several chains use ``vmap`` over
    ``torch.func.functional_call``. Modules with buffers (BatchNorm statistics) keep one set
    of buffers per chain and evaluate chains one after another; buffers are not sampled.
    ``chain_evaluation="loop"`` evaluates several chains (or the K copies of a structured
    energy) one after another in the same way, without ``vmap``: vmapped convolutions with one
    weight tensor per chain can be far slower on a GPU (measured on an H100: ResNet-20, K = 2,
    96 ms against about 20 ms a step, see docs/performance.md). The values agree to float
    rounding; the choice is not part of the run's fingerprint.
    The module is evaluated in the train/eval mode it was given in.
    """

    def __init__(
        self,
        module: nn.Module,
        likelihood: str | Likelihood | Callable = "categorical",
        *,
        prior_std: float | Mapping[str, float] | None = None,
        num_data: int | None = None,
        noise_std: float | None = None,
        prior=None,
        sample: str | Sequence[str] | Callable[[str, Tensor], bool] | None = None,
        chain_evaluation: str = "vmap",
    ):
        _refuse_meta(module)
        if chain_evaluation not in ("vmap", "loop"):
            raise ValueError(f"chain_evaluation must be 'vmap' or 'loop', got {chain_evaluation!r}")
        self.module = copy.deepcopy(module)
        for p in self.module.parameters():
            p.grad = None
        if sample is not None:
            _select_sampled(self.module, sample)
        self.sample_spec = sample
        self.space = ParamSpace.from_module(self.module)
        if self.space.dim == 0:
            raise ValueError("the module has no trainable parameters")
        self.likelihood = make_likelihood(likelihood, noise_std)
        self.num_data = _as_num_data(num_data)
        _refuse_dropout(self.module)
        # the first evaluation also checks, on a few rows, that the forward is deterministic
        self._randomness_checked = False
        if prior is not None and prior_std is not None:
            raise ValueError("give prior_std (the zero-mean Normal's σ) or prior=..., not both")
        if prior is None:
            prior_std = 1.0 if prior_std is None else prior_std
            stds = self.space.per_param_vector(prior_std)
            if not bool(torch.all(stds > 0)) or not bool(torch.all(torch.isfinite(stds))):
                raise ValueError("prior_std must be positive and finite")
        self.prior_std = prior_std
        self._has_buffers = any(True for _ in self.module.buffers())
        self.chain_evaluation = chain_evaluation
        self._hot_batch = None  # (batch, its chain-0 inputs, its chain-0 target): views made once
        # per-chain buffer copies (BatchNorm statistics) of the last multi-chain evaluation
        self._buffer_store: dict[str, list[dict[str, Tensor]]] = {}
        ref = next(p for p in self.module.parameters() if p.requires_grad)
        self._set_prior(prior, ref.detach(), stds if prior is None else None)
        self._bind()
        self._initial = self._flat.detach().clone()

    # -- set-up ----------------------------------------------------------------------------
    def _bind(self) -> None:
        """Make the module's parameters views of one flat vector and one flat gradient."""
        self._flat, self._grad = bind_flat(self.module, self.space)

    def to(self, device=None, dtype=None) -> "ModuleEnergy":
        """Move the module (and the flat buffers) in place; returns self."""
        self.module.to(device=device, dtype=dtype)
        self.prior = self.prior.to(device=device, dtype=dtype)
        if self._prior_precision is not None:
            self._prior_precision = self._prior_precision.to(device=device, dtype=dtype)
        self._buffer_store.clear()
        self._bind()
        self._initial = self._initial.to(self._flat)
        return self

    evaluations_per_call = 1
    requires_data = True

    def __getstate__(self):  # copies and pickles do not carry the last run's batch views
        return {**self.__dict__, "_hot_batch": None}

    def __setstate__(self, state):
        # pickle and deepcopy rebuild each parameter as its own tensor: they no longer alias
        # the flat vector and flat gradient, so the one-chain path would copy θ into a buffer
        # the forward never reads and return the prior's gradient alone. Bind them again.
        self.__dict__.update(state)
        self.__dict__.setdefault("chain_evaluation", "vmap")  # pickled before the option existed
        if self._prior_spec is None and not self.prior._fused:  # pickled before the fused forms moved
            self.prior.fuse()  # into the bound Normal (issue 23): the same rounding as when it was written
        self._bind()

    def with_num_data(self, num_data):
        """A copy with N = ``num_data``. The copy owns its module, flat buffers and per-chain
        buffer store, so the two can run at the same time (threads) without sharing state."""
        num_data = _as_num_data(num_data)
        new = copy.copy(self)
        new.num_data = num_data
        new.module = copy.deepcopy(self.module)
        new._buffer_store = {}
        new._bind()
        return new

    @property
    def cv_base(self) -> "ModuleEnergy":
        return self

    @property
    def device(self) -> torch.device:
        return self._flat.device

    @property
    def dtype(self) -> torch.dtype:
        return self._flat.dtype

    def _set_prior(self, prior, like: Tensor, stds: Tensor | None = None) -> None:
        """Bind ``prior`` (``None``: the zero-mean Normal with standard deviations ``stds``, in
        its fused forms: :meth:`structmc.priors._BoundNormal.fuse`)."""
        from .priors.prior import as_prior
        from .priors.families import _BoundNormal

        self._prior_spec = None if prior is None else as_prior(prior)
        if prior is None:
            stds = stds.to(like)
            self.prior = _BoundNormal(torch.zeros_like(stds), stds, fused=True)
        else:
            self.prior = self._prior_spec.bind(self.space, like)
        self._prior_precision = getattr(self.prior, "precision", None)

    def with_prior(self, prior) -> "ModuleEnergy":
        """A copy with another prior (any of :mod:`structmc.priors`); the module, likelihood,
        ``num_data`` and sampled parameters are shared."""
        new = copy.copy(self)
        new._set_prior(prior, self._flat.detach())
        new.prior_std = None
        new._hot_batch = None
        return new

    def initial_position(self, source: str = "module", *, generator: torch.Generator | None = None,
                         num_chains: int | None = None) -> Tensor:
        """``"module"``: the module's parameters at construction, a flat ``[P]`` vector.
        ``"prior"``: a draw from the prior with ``generator`` (``[P]``, or ``[num_chains, P]``
        — one per chain)."""
        if source == "module":
            return self._initial.clone() if num_chains is None else self._initial.expand(num_chains, -1).clone()
        if source == "prior":
            shape = () if num_chains is None else (int(num_chains),)
            return self.prior.sample(generator, shape).to(self._initial)
        raise ValueError(f"initial_position takes 'module' or 'prior', got {source!r}")

    @property
    def prior_precision(self) -> Tensor:
        """1/σ² per parameter ``[P]`` (read-only); a Normal prior's only."""
        if self._prior_precision is None:
            raise ValueError(f"prior_precision is defined for a Normal prior; this energy's prior is "
                             f"{self._prior_spec.describe()['kind']} (see energy.prior: its grad and curvature)")
        return self._prior_precision

    @property
    def prior_spec(self):
        """The prior as given (``prior=`` or :meth:`with_prior`, as a :mod:`structmc.priors`
        prior), or ``None`` for ``prior_std``'s zero-mean Normal (read-only)."""
        return self._prior_spec

    def check_init(self, theta: Tensor) -> None:
        """``ValueError`` (before any compute) when an initial position ``[C, P]`` lies outside
        the prior's support."""
        if self._prior_spec is not None:
            self.prior.check_support(theta, self._coordinate_name)

    def check(self, data: Sequence[Tensor] | None = None, init: Tensor | None = None, batch_size: int | None = None,
              batching: str | None = None, *, num_points: int | None = None) -> None:
        """:meth:`check_data` on ``data`` (its errors carry ``about_data = True``: the run loop
        says when they concern a Dataset's items), then :meth:`check_init` on ``init``."""
        if data is not None:
            try:
                self.check_data(data)
            except (ValueError, TypeError) as err:
                err.about_data = True
                raise
        if init is not None:
            self.check_init(init)

    def describe(self) -> dict:
        """Kind, ``num_data`` and fingerprints (:mod:`structmc.fingerprint`) of the module's
        structure and code (``module``), its buffers and frozen parameters (``module_state``; the
        sampled ones are the chain's state), the likelihood and the prior (every tensor it holds)."""
        module, state, unchecked = fingerprint.module_fingerprint(self.module, {i.name for i in self.space.params})
        parts = {"module": module, "module_state": state}
        for key, obj, label in (("likelihood", self.likelihood, "the likelihood"),
                                ("prior", {"prior_std": self.prior_std, "spec": self._prior_spec, "bound": self.prior},
                                 "the prior")):
            parts[key], missing = fingerprint.value_fingerprint(obj, label)
            unchecked += missing
        return _described(self, parts, unchecked)

    def describe_v1(self) -> dict:
        """Version 1: ``prior_std``, the sum of the prior precision (a Normal prior), the prior's
        own description, and the likelihood's name and noise."""
        try:
            prec = self.prior_precision
        except ValueError:  # not a Normal prior
            prec = None
        prior = {"prior_std": repr(self.prior_std),
                 "precision_sum": float(prec.double().sum()) if isinstance(prec, Tensor) else None}
        if self.prior_spec is not None:
            prior["prior"] = fingerprint.json_text(self.prior_spec.describe())
        return {"prior": prior, "likelihood": {"name": self.likelihood.name, "noise_std": self.likelihood.noise_std}}

    def _coordinate_name(self, j: int) -> str:
        for info in self.space.params:
            if info.offset <= j < info.offset + info.numel:
                return f"parameter {info.name!r} entry {j - info.offset}"
        return f"coordinate {j}"

    def scale(self, batch: Batch) -> float:
        """The likelihood's weight on ``batch``: N/n, or 1 when ``num_data`` is ``None``."""
        if batch is None:
            raise ValueError("a module energy needs data: pass data=(inputs..., targets)")
        n = batch[-1].shape[1]
        return 1.0 if self.num_data is None else self.num_data / n

    def prior_energy(self, theta: Tensor) -> Tensor:
        """−log p(θ) per chain ``[C]`` (constants dropped): ½ Σ θ²/σ² for ``prior_std``'s
        Normal (one fused op when all σ are equal)."""
        return self.prior.energy(theta)

    def _add_prior_grad(self, lik_grad: Tensor, theta: Tensor) -> Tensor:
        """A new tensor ∇(-log-lik) + ∇(−log p) (θ/σ² for ``prior_std``'s Normal, one fused op)."""
        return self.prior.add_grad(lik_grad, theta)

    def _single(self, theta1: Tensor, inputs: Sequence[Tensor], target: Tensor, scale: float, grad: bool):
        """One chain through the bound module; returns (negative scaled log-lik, grad)."""
        if theta1.data_ptr() != self._flat.data_ptr():
            self._flat.copy_(theta1)
        if not grad:
            with torch.no_grad():
                return -scale * self.likelihood.log_lik(self.module(*inputs), target), None
        self._grad.zero_()
        if torch.is_grad_enabled():  # the usual case: skip the context manager's cost
            nll = -scale * self.likelihood.log_lik(self.module(*inputs), target)
            nll.backward()
        else:
            with torch.enable_grad():
                nll = -scale * self.likelihood.log_lik(self.module(*inputs), target)
                nll.backward()
        return nll.detach(), self._grad

    def _swap_buffers(self, c: int, n_chains: int, save: bool) -> None:
        swap_buffers(self.module, self._buffer_store, c, n_chains, save)

    def _looped(self, theta, batch, scale, grad):
        """Chains one after another through the bound module, each with its own buffers."""
        C = theta.shape[0]
        nll = theta.new_empty(C)
        g = torch.empty_like(theta) if grad else None
        for c in range(C):
            self._swap_buffers(c, C, save=False)
            nll_c, g_c = self._single(theta[c], [t[c] for t in batch[:-1]], batch[-1][c], scale, grad)
            nll[c] = nll_c
            if grad:
                g[c] = g_c
            self._swap_buffers(c, C, save=True)
        return nll, g

    def _vmapped(self, theta, batch, scale, grad):
        module, space, lik = self.module, self.space, self.likelihood

        def chain_forward(params, *inputs):
            return functional_call(module, params, inputs)

        def log_lik(params):  # the forward vmapped, the likelihood batched where it can be
            out = vmap(chain_forward)(params, *batch[:-1])
            if lik.log_lik_chains is not None and isinstance(out, Tensor):
                return lik.log_lik_chains(out, batch[-1])
            return vmap(lik.log_lik)(out, batch[-1])

        theta = theta.detach()
        if not grad:
            with torch.no_grad():
                return -scale * log_lik(space.unflatten(theta)), None
        C = theta.shape[0]
        with torch.enable_grad():
            # one leaf per parameter tensor: the gradient of a view of one flat [C, P] leaf is
            # scattered into a zero [C, P] tensor per parameter and summed (C·P fills and adds
            # per parameter tensor, 0.7 ms of an 8-copy structured step); cat is one copy
            leaves = [theta[:, i.slice].detach().requires_grad_() for i in space.params]
            params = {i.name: leaf.reshape(C, *i.shape) for i, leaf in zip(space.params, leaves)}
            nll = -scale * log_lik(params)
            grads = torch.autograd.grad(nll.sum(), leaves)
        return nll.detach(), torch.cat(grads, dim=1)

    def _evaluate(self, theta: Tensor, batch: Batch, grad: bool):
        _check_theta(theta, self.space.dim)
        hot = self._hot_batch
        if hot is None or hot[0] is not batch:  # checked once per batch object (a run's stream reuses it)
            _check_batch_layout(theta.shape[0], batch)
        scale = self.scale(batch)
        if theta.requires_grad:
            theta = theta.detach()
        if not self._randomness_checked:
            self._check_deterministic(tuple(t[0] for t in batch[:-1]))
        if theta.shape[0] == 1:  # the hot path: no per-chain bookkeeping
            hot = self._hot_batch
            if hot is None or hot[0] is not batch:  # a run's stream hands over the same views each step
                hot = self._hot_batch = (batch, [t[0] for t in batch[:-1]], batch[-1][0])
            nll, g = self._single(theta[0], hot[1], hot[2], scale, grad)
            nll = nll.reshape(1)
            g = None if g is None else g.unsqueeze(0)
        elif self._has_buffers or self.chain_evaluation == "loop":
            nll, g = self._looped(theta, batch, scale, grad)
        else:
            nll, g = self._vmapped(theta, batch, scale, grad)
        energy = nll + self.prior_energy(theta)
        return energy, (None if g is None else self._add_prior_grad(g, theta))

    # -- checks -----------------------------------------------------------------------------
    def _probe(self, inputs: Sequence[Tensor], rows: int = 4) -> Tensor:
        """The module's output on the first ``rows`` rows of ``inputs`` (no chain dimension), at
        the current parameters, buffers copied, no gradient (:func:`structmc.energy_checks.probe`)."""
        return probe(self, inputs, rows)

    def _check_deterministic(self, inputs: Sequence[Tensor]) -> None:
        """Refuse a module whose forward draws random numbers (checked once, at the first
        evaluation, and by :meth:`check_data`; :func:`structmc.energy_checks.check_deterministic`)."""
        check_deterministic(self, inputs)

    def check_data(self, data: Sequence[Tensor]) -> None:
        """Check ``data = (inputs..., target)`` (no chain dimension) against the module and the
        likelihood before any compute; raises ``ValueError`` saying what to convert.

        Feature dtypes against the parameters'; one forward on ≤ 4 rows (input width vs the
        first layer); the output and target against the likelihood
        (:meth:`~structmc.likelihoods.Likelihood.check_output`, ``check_target``: categorical
        labels integer in [0, K) or soft labels, Bernoulli labels in {0, 1}, a target size per
        row matching the output's); no NaN/Inf in floating data; a deterministic forward
        (:func:`structmc.energy_checks.check_module_data`).
        """
        check_module_data(self, data)

    def _check_target(self, out: Tensor, target: Tensor, rows: int) -> None:
        self.likelihood.check_target(out, target, rows)

    def value_and_grad(self, theta, batch):
        return self._evaluate(theta, batch, grad=True)

    def value(self, theta, batch):
        return self._evaluate(theta, batch, grad=False)[0]

    def hessian_diag(self, theta: Tensor, batch: Batch, generator=None, num_probes: int = 1) -> Tensor:
        """diag ∇²U ``[C, P]``: Hutchinson for the likelihood (through ``functional_call``, with
        copies of the buffers so running statistics are not updated twice) plus the exact prior
        term 1/σ². Used by pSGLD's Γ term."""
        _check_theta(theta, self.space.dim)
        scale = self.scale(batch)
        module, space, lik = self.module, self.space, self.likelihood
        buffers = {k: v.detach().clone() for k, v in module.named_buffers()}

        def chain_log_lik(flat, *b):
            out = functional_call(module, {**space.unflatten(flat), **buffers}, tuple(b[:-1]))
            return lik.log_lik(out, b[-1])

        if buffers:
            nll = lambda t: -scale * torch.stack([chain_log_lik(t[c], *(x[c] for x in batch)) for c in range(t.shape[0])])
        else:
            nll = lambda t: -scale * vmap(chain_log_lik)(t, *batch)
        prior = self.prior.hessian_diag(theta, generator, num_probes)  # first: it may draw from generator
        return hutchinson_diag(nll, theta, generator, num_probes) + prior

    def reference_value_and_grad(self, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        """Readable per-chain ``functional_call`` + autograd path, used to test the fast ones."""
        _check_theta(theta, self.space.dim)
        scale = self.scale(batch)
        values, grads = [], []
        for c in range(theta.shape[0]):
            leaf = theta[c].detach().clone().requires_grad_(True)
            with torch.enable_grad():
                out = functional_call(self.module, self.space.unflatten(leaf), tuple(t[c] for t in batch[:-1]))
                log_prior = -self.prior.energy(leaf.unsqueeze(0))[0]
                u = -scale * self.likelihood.log_lik(out, batch[-1][c]) - log_prior
                (g,) = torch.autograd.grad(u, leaf)
            values.append(u.detach())
            grads.append(g)
        return torch.stack(values), torch.stack(grads)

    @property
    def has_buffers(self) -> bool:
        """Whether the module has buffers (e.g. BatchNorm running statistics), kept per chain."""
        return self._has_buffers

    @property
    def buffer_chains(self) -> int | None:
        """Number of chains whose buffers are kept (the last multi-chain evaluation), or
        ``None`` when the module's own buffers are the only ones (no multi-chain run yet)."""
        return buffer_chains(self._buffer_store)

    def chain_buffers(self, chain: int) -> dict[str, Tensor]:
        """Buffers (e.g. BatchNorm running statistics) of one chain of the last multi-chain run
        (the module's own buffers when there was none)."""
        return chain_buffers(self.module, self._buffer_store, chain)

    # -- prediction ---------------------------------------------------------------------------
    @property
    def predictive_energy(self) -> "ModuleEnergy":
        """The energy whose model predicts from this energy's draws (see :class:`Energy`): itself."""
        return self

    @torch.no_grad()
    def forward_draws(self, samples: Tensor, inputs: Sequence[Tensor], *, draws_per_call: int = 64,
                      buffers: Mapping[str, Tensor] | None = None) -> Tensor:
        """Module outputs for each parameter draw: ``samples [S, P]`` -> ``[S, n, ...]``.

        Runs in eval mode (running BatchNorm statistics), draws vmapped in groups. ``buffers``
        (e.g. ``chain_buffers(c)``, for the draws of chain ``c``) replace the module's own.
        """
        was_training = self.module.training
        self.module.eval()
        extra = {} if buffers is None else {k: v.to(self.device) for k, v in buffers.items()}
        try:
            outs = []
            for s0 in range(0, samples.shape[0], draws_per_call):
                chunk = samples[s0 : s0 + draws_per_call].to(self._flat)
                outs.append(vmap(lambda flat: functional_call(self.module, {**self.space.unflatten(flat), **extra},
                                                              tuple(inputs)))(chunk))
            return torch.cat(outs)
        finally:
            self.module.train(was_training)


class NoisyGradientEnergy(WrappedEnergy):
    """Wraps an energy and adds i.i.d. N(0, ``noise_std``²) noise to its gradients, drawn
    from its own generator (the pSGLD paper's simulated stochastic gradients, its Fig. 1)."""

    def __init__(self, base: Energy, noise_std: float, *, seed: int = 0):
        if not noise_std > 0:
            raise ValueError("noise_std must be positive")
        super().__init__(base)
        self.noise_std, self.seed = float(noise_std), int(seed)
        self.generator = torch.Generator().manual_seed(self.seed)

    def with_base(self, base: Energy) -> "NoisyGradientEnergy":
        """A copy around ``base`` with its own generator, in the same state."""
        new = super().with_base(base)
        new.generator = torch.Generator().manual_seed(self.seed)
        new.generator.set_state(self.generator.get_state())
        return new

    def describe(self) -> dict:
        return _described(self, {"noise": {"noise_std": self.noise_std, "seed": self.seed}}, base=self.base)

    def value_and_grad(self, theta, batch):
        value, grad = self.base.value_and_grad(theta, batch)
        noise = torch.randn(grad.shape, generator=self.generator, dtype=grad.dtype).to(grad.device)
        return value, grad + self.noise_std * noise

    # -- state across iterations (StatefulEnergy): the noise generator is part of the run ------
    # Without this, a second run on the same object continued the first one's noise stream
    # (same seed, another chain) and a resumed run drew other noise than the uninterrupted one.
    def start(self, theta0: Tensor) -> None:
        self.generator = torch.Generator().manual_seed(self.seed)
        if isinstance(self.base, StatefulEnergy):
            self.base.start(theta0)

    def observe(self, theta: Tensor) -> None:
        if isinstance(self.base, StatefulEnergy):
            self.base.observe(theta)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state(),
                "base": self.base.state_dict() if isinstance(self.base, StatefulEnergy) else None}

    def load_state_dict(self, state: dict, device=None) -> None:
        self.generator = torch.Generator()
        self.generator.set_state(state["generator"])
        if isinstance(self.base, StatefulEnergy) and state.get("base") is not None:
            self.base.load_state_dict(state["base"], device)

    def fresh(self) -> "NoisyGradientEnergy":
        """A copy with its own generator at the seed (and a fresh base, if the base keeps state)."""
        new = copy.copy(self)
        new.base = self.base.fresh() if isinstance(self.base, StatefulEnergy) else self.base
        new.generator = torch.Generator().manual_seed(self.seed)
        return new


def as_energy(target, dim: int | None = None) -> Energy:
    """An :class:`Energy` as is, or a log density callable wrapped as :class:`LogDensityEnergy`."""
    if isinstance(target, Energy):
        return target
    if isinstance(target, nn.Module):
        raise TypeError("wrap a module as ModuleEnergy(module, likelihood, prior_std=..., num_data=...)")
    if hasattr(target, "value_and_grad"):
        missing = [m for m in ("space", "num_data", "evaluations_per_call", "requires_data", "device", "dtype", "cv_base",
                               "value_and_grad", "value", "with_num_data", "has_buffers", "check", "describe")
                   if not hasattr(target, m)]
        raise TypeError(f"{type(target).__name__} does not implement the Energy protocol: missing {missing} "
                        "(see structmc.energy.Energy; subclass structmc.energy.EnergyBase for the defaults of "
                        "evaluations_per_call, requires_data, device, dtype, cv_base, has_buffers, check and describe, "
                        "or structmc.energy.WrappedEnergy to wrap another energy)")
    if callable(target):
        if dim is None:
            raise ValueError("dim is needed to wrap a log density; it is taken from init")
        return LogDensityEnergy(target, dim)
    raise TypeError(f"expected an Energy or a log density callable, got {type(target).__name__}")


def check_finite_at(energy: Energy, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
    """Evaluate ``energy`` at ``theta [C, P]`` on ``batch`` and raise ``ValueError`` naming the
    chains whose energy or gradient is NaN/Inf (e.g. at the initial point, before sampling);
    returns ``(energy [C], grad [C, P])``."""
    value, grad = energy.value_and_grad(theta, batch)
    bad_value = ~torch.isfinite(value)
    bad_grad = ~torch.isfinite(grad).all(-1)
    if bool(bad_value.any()) or bool(bad_grad.any()):
        chains = torch.nonzero(bad_value | bad_grad).flatten().tolist()
        what = "energy" if bool(bad_value.any()) else "gradient"
        if bool(bad_value.any()) and bool(bad_grad.any()):
            what = "energy and gradient"
        raise ValueError(f"the {what} is not finite at the initial point for chain(s) {chains} "
                         f"(energy {value[chains].tolist()}): check init, the data and the log density")
    return value, grad


def full_data_value_and_grad(energy: Energy, theta: Tensor, data: Sequence[Tensor], chunk_size: int = 4096):
    """Exact full-data energy and gradient, accumulated over contiguous chunks of ``data``.

    Each chunk's N/n-scaled energy is weighted by n_k/N, so the likelihood sums exactly once
    and the prior (present in every chunk) gets total weight one.
    """
    n_total = int(data[0].shape[0])
    if energy.num_data is None and n_total > chunk_size:
        raise ValueError("full-data evaluation in chunks needs energy.num_data (the N/n scaling)")
    C = theta.shape[0]
    value, grad = theta.new_zeros(C), torch.zeros_like(theta)
    for start in range(0, n_total, chunk_size):
        chunk = tuple(t[start : start + chunk_size].expand(C, *t[start : start + chunk_size].shape) for t in data)
        weight = chunk[-1].shape[1] / n_total if energy.num_data is not None else 1.0
        u, g = energy.value_and_grad(theta, chunk)
        value += weight * u
        grad += weight * g
    return value, grad
