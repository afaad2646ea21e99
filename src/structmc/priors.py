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

import fnmatch
import math
from typing import Callable, Mapping

import torch
from torch import Tensor

from . import fingerprint
from .energy import WrappedEnergy

__all__ = ["Prior", "BoundPrior", "Normal", "Laplace", "StudentT", "ScaleMixtureNormal", "LogDensity", "Flat",
           "HalfCauchy", "GammaPrecision", "HierarchicalEnergy", "as_prior"]

_LOG_2PI = math.log(2 * math.pi)


# ---------------------------------------------------------------------------------------------
# parameter values: float, {pattern: float}, state dict, or a [P] tensor -> a [P] vector
# ---------------------------------------------------------------------------------------------
def _vector(value, space, like: Tensor, what: str, *, positive: bool = False) -> Tensor:
    if isinstance(value, Tensor) and value.dim() == 1 and value.shape[0] == space.dim and space.dim != 1:
        out = value.detach().to(like)
    elif isinstance(value, Mapping) and value and all(isinstance(v, Tensor) for v in value.values()):
        out = _from_state_dict(value, space, like, what)
    else:
        if isinstance(value, Tensor):
            if value.numel() != 1:
                raise ValueError(f"{what}: a tensor must be a scalar or the flat [P = {space.dim}] vector, got shape "
                                 f"{tuple(value.shape)}")
            value = float(value)
        try:
            out = space.per_param_vector(value, like=like)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{what}: {err}") from None
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"{what} must be finite")
    if positive and not bool((out > 0).all()):
        raise ValueError(f"{what} must be positive")
    return out


def _from_state_dict(state: Mapping[str, Tensor], space, like: Tensor, what: str) -> Tensor:
    """The flat vector of a state dict: every sampled parameter by name (a ``module.`` or other
    common prefix is not guessed); extra entries (buffers, unsampled parameters) are ignored."""
    missing = [i.name for i in space.params if i.name not in state]
    if missing:
        raise ValueError(f"{what}: the state dict has no entry for {missing[:5]}{' ...' if len(missing) > 5 else ''}; "
                         f"its keys are {list(state)[:8]}{' ...' if len(state) > 8 else ''}")
    parts = []
    for info in space.params:
        t = state[info.name]
        if tuple(t.shape) != tuple(info.shape):
            raise ValueError(f"{what}: {info.name!r} has shape {tuple(t.shape)} in the state dict, "
                             f"{tuple(info.shape)} in the model")
        parts.append(t.detach().reshape(-1).to(like))
    return torch.cat(parts)


# ---------------------------------------------------------------------------------------------
# declared priors
# ---------------------------------------------------------------------------------------------
class Prior:
    """A prior declared in terms of parameter names; :meth:`bind` resolves it on a
    :class:`~structmc.space.ParamSpace` into a :class:`BoundPrior` over θ ∈ R^P."""

    def bind(self, space, like: Tensor) -> "BoundPrior":
        raise NotImplementedError

    def describe(self) -> dict:
        """A JSON-ready description (resume fingerprints, reports)."""
        return {"kind": type(self).__name__}


class BoundPrior:
    """A prior over θ ∈ R^P. Factorised priors (every built-in one) implement
    :meth:`elementwise`, :meth:`grad`, :meth:`curvature` and :meth:`_sample_flat` per
    coordinate; ``idx`` restricts one to some coordinates (``{pattern: prior}`` maps)."""

    factorised = True
    dim: int

    # per-coordinate pieces, theta [..., P]
    def elementwise(self, theta: Tensor) -> Tensor:
        """−log p(θ_j) per coordinate, constants dropped."""
        raise NotImplementedError

    def log_normaliser(self) -> Tensor:
        """Per coordinate: log p(θ_j) = −elementwise(θ_j) − log_normaliser_j."""
        raise NotImplementedError

    def grad(self, theta: Tensor) -> Tensor:
        raise NotImplementedError

    def curvature(self, theta: Tensor) -> Tensor:
        raise NotImplementedError

    def _sample_flat(self, generator, shape: tuple[int, ...]) -> Tensor:
        raise NotImplementedError

    def select(self, idx: Tensor) -> "BoundPrior":
        raise NotImplementedError

    def to(self, device=None, dtype=None) -> "BoundPrior":
        for k, v in list(vars(self).items()):
            if isinstance(v, Tensor) and v.is_floating_point():
                setattr(self, k, v.to(device=device, dtype=dtype))
        return self

    # the interface the energy uses
    def energy(self, theta: Tensor) -> Tensor:
        """−log p(θ) per chain, ``[C]`` (constants dropped)."""
        return self.elementwise(theta).sum(-1)

    def log_prob(self, theta: Tensor) -> Tensor:
        """log p(θ) per chain, normalised, ``[C]``."""
        return -(self.elementwise(theta).sum(-1) + self.log_normaliser().sum())

    def add_grad(self, lik_grad: Tensor, theta: Tensor) -> Tensor:
        """A new tensor ``lik_grad`` + ∇(−log p)(θ) (the energy's gradient from the likelihood's)."""
        return lik_grad + self.grad(theta)

    def hessian_diag(self, theta: Tensor, generator=None, num_probes: int = 1) -> Tensor:
        return self.curvature(theta)

    def sample(self, generator: torch.Generator | None, shape: tuple[int, ...] = ()) -> Tensor:
        """Draws ``[*shape, P]`` from the prior; every random number from ``generator``."""
        return self._sample_flat(generator, tuple(shape))

    def check_support(self, theta: Tensor, names: Callable[[int], str] | None = None) -> None:
        """``ValueError`` naming a chain and coordinate where the prior density is 0 or
        undefined (before any compute, at the initial positions)."""
        e = self.elementwise(theta)
        bad = ~torch.isfinite(e)
        if bool(bad.any()):
            c, j = (int(v) for v in bad.nonzero()[0])
            where = names(j) if names is not None else f"coordinate {j}"
            raise ValueError(f"the prior's density is 0 or undefined at the initial position (chain {c}, {where}, "
                             f"value {float(theta[c, j]):.4g}): start inside the prior's support")


def _take(v: Tensor, idx: Tensor) -> Tensor:
    return v.index_select(0, idx.to(v.device))


class Normal(Prior):
    """N(loc, scale²) per parameter; ``loc`` may be a state dict (a prior centred on
    pretrained weights)."""

    def __init__(self, loc=0.0, scale=1.0):
        self.loc, self.scale = loc, scale

    def bind(self, space, like):
        return _BoundNormal(_vector(self.loc, space, like, "Normal loc"),
                            _vector(self.scale, space, like, "Normal scale", positive=True))

    def describe(self):
        return {"kind": "Normal", "loc": _describe(self.loc), "scale": _describe(self.scale)}


class _BoundNormal(BoundPrior):
    _fused = False  # prior_std's zero-mean Normal of a ModuleEnergy (see fuse); pickles from before lack it

    def __init__(self, loc, scale, fused: bool = False):
        self.loc, self.scale, self.dim = loc, scale, loc.shape[0]
        self.precision = scale.pow(-2)
        self._centred = not bool(loc.any())
        if fused:
            self.fuse()

    def fuse(self) -> "_BoundNormal":
        """Use the fused forms of ``prior_std``'s zero-mean Normal (a ModuleEnergy without
        ``prior=``): ½·(1/σ²)·θᵀθ and ``lik_grad.add(θ, alpha=1/σ²)`` when every σ is equal,
        ``addcmul`` otherwise, one op each. They round differently from the generic forms,
        which an explicit ``prior=Normal(...)`` keeps (same seed, same chain). Not part of the
        fingerprint (structmc.fingerprint skips ``_fused``): the density is the same."""
        if not self._centred:
            raise ValueError("only a zero-mean Normal has the fused forms")
        first = float(self.precision[0])
        self._fused = (first if bool((self.precision == first).all()) else None,)  # (uniform 1/σ² or None,)
        return self

    def elementwise(self, theta):
        z = theta if self._centred else theta - self.loc
        return 0.5 * z * z * self.precision

    def energy(self, theta):  # one fused reduction
        if self._fused and self._fused[0] is not None:
            return (0.5 * self._fused[0]) * torch.linalg.vecdot(theta, theta)
        z = theta if self._centred else theta - self.loc
        return 0.5 * torch.linalg.vecdot(z * self.precision, z)

    def add_grad(self, lik_grad, theta):
        if not self._fused:
            return super().add_grad(lik_grad, theta)
        if self._fused[0] is not None:
            return lik_grad.add(theta, alpha=self._fused[0])
        return torch.addcmul(lik_grad, theta, self.precision)

    def log_normaliser(self):
        return self.scale.log() + 0.5 * _LOG_2PI

    def grad(self, theta):
        return (theta if self._centred else theta - self.loc) * self.precision

    def curvature(self, theta):
        return self.precision.expand_as(theta).clone()

    def _sample_flat(self, generator, shape):
        eps = torch.randn(*shape, self.dim, generator=generator, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + self.scale * eps

    def select(self, idx):
        return _BoundNormal(_take(self.loc, idx), _take(self.scale, idx))


class Laplace(Prior):
    """Laplace(loc, scale b): p(θ) = exp(−|θ − μ|/b) / (2b). Its gradient is sign(θ − μ)/b
    (0 at θ = μ) and its curvature 0 away from μ."""

    def __init__(self, loc=0.0, scale=1.0):
        self.loc, self.scale = loc, scale

    def bind(self, space, like):
        return _BoundLaplace(_vector(self.loc, space, like, "Laplace loc"),
                             _vector(self.scale, space, like, "Laplace scale", positive=True))

    def describe(self):
        return {"kind": "Laplace", "loc": _describe(self.loc), "scale": _describe(self.scale)}


class _BoundLaplace(BoundPrior):
    def __init__(self, loc, scale):
        self.loc, self.scale, self.dim = loc, scale, loc.shape[0]

    def elementwise(self, theta):
        return (theta - self.loc).abs() / self.scale

    def log_normaliser(self):
        return (2 * self.scale).log()

    def grad(self, theta):
        return (theta - self.loc).sign() / self.scale

    def curvature(self, theta):
        return torch.zeros_like(theta)

    def _sample_flat(self, generator, shape):
        # inverse CDF on u ∈ (−½, ½): μ − b·sign(u)·log(1 − 2|u|)
        u = torch.rand(*shape, self.dim, generator=generator, dtype=self.loc.dtype, device=self.loc.device) - 0.5
        tiny = torch.finfo(u.dtype).tiny
        return self.loc - self.scale * u.sign() * torch.log1p(-2 * u.abs()).clamp(max=-tiny)

    def select(self, idx):
        return _BoundLaplace(_take(self.loc, idx), _take(self.scale, idx))


class StudentT(Prior):
    r"""Student's t with ``df`` ν, ``loc`` μ, ``scale`` s:
    −log p = (ν+1)/2 · log(1 + z²/ν) + const, z = (θ − μ)/s. ``df=1`` is the Cauchy."""

    def __init__(self, df, loc=0.0, scale=1.0):
        self.df, self.loc, self.scale = df, loc, scale

    def bind(self, space, like):
        return _BoundStudentT(_vector(self.df, space, like, "StudentT df", positive=True),
                              _vector(self.loc, space, like, "StudentT loc"),
                              _vector(self.scale, space, like, "StudentT scale", positive=True))

    def describe(self):
        return {"kind": "StudentT", "df": _describe(self.df), "loc": _describe(self.loc),
                "scale": _describe(self.scale)}


class _BoundStudentT(BoundPrior):
    def __init__(self, df, loc, scale):
        self.df, self.loc, self.scale, self.dim = df, loc, scale, loc.shape[0]

    def elementwise(self, theta):
        z = (theta - self.loc) / self.scale
        return 0.5 * (self.df + 1) * torch.log1p(z * z / self.df)

    def log_normaliser(self):
        nu = self.df
        return (torch.lgamma(nu / 2) - torch.lgamma((nu + 1) / 2) + 0.5 * torch.log(nu * math.pi)
                + self.scale.log())

    def grad(self, theta):
        z = (theta - self.loc) / self.scale
        return (self.df + 1) * z / (self.scale * (self.df + z * z))

    def curvature(self, theta):
        z2 = ((theta - self.loc) / self.scale).square()
        return (self.df + 1) * (self.df - z2) / (self.scale.square() * (self.df + z2).square())

    def _sample_flat(self, generator, shape):
        # Bailey's polar method (1994): (u, v) uniform in the unit disc, w = u² + v²,
        # t = u·√(ν(w^(−2/ν) − 1)/w); exact for any ν > 0 and needs only uniforms
        out = torch.empty(*shape, self.dim, dtype=self.loc.dtype, device=self.loc.device)
        flat = out.view(-1, self.dim) if out.numel() else out.reshape(0, self.dim)
        todo = torch.ones_like(flat, dtype=torch.bool)
        nu = self.df.expand_as(flat)
        while bool(todo.any()):
            u = 2 * torch.rand(flat.shape, generator=generator, dtype=flat.dtype, device=flat.device) - 1
            v = 2 * torch.rand(flat.shape, generator=generator, dtype=flat.dtype, device=flat.device) - 1
            w = u * u + v * v
            ok = todo & (w < 1) & (w > 0)
            t = u * torch.sqrt(nu * (w.pow(-2 / nu) - 1) / w)
            flat[ok] = t[ok]
            todo &= ~ok
        return self.loc + self.scale * out

    def select(self, idx):
        return _BoundStudentT(_take(self.df, idx), _take(self.loc, idx), _take(self.scale, idx))


class ScaleMixtureNormal(Prior):
    r"""π N(μ, σ₁²) + (1 − π) N(μ, σ₂²) per parameter (Blundell et al. 2015, eq. 7 — a
    continuous spike and slab: σ₁ large, σ₂ small). With responsibilities r_k(θ) and
    a_k = 1/σ_k², ∇(−log p) = ā (θ − μ) with ā = Σ r_k a_k, and the curvature is
    ā − (θ − μ)² Var_r(a)."""

    def __init__(self, weight=0.5, scale1=1.0, scale2=0.01, loc=0.0):
        self.weight, self.scale1, self.scale2, self.loc = weight, scale1, scale2, loc

    def bind(self, space, like):
        w = _vector(self.weight, space, like, "ScaleMixtureNormal weight", positive=True)
        if not bool((w < 1).all()):
            raise ValueError("ScaleMixtureNormal weight must lie in (0, 1)")
        return _BoundScaleMixture(w, _vector(self.scale1, space, like, "ScaleMixtureNormal scale1", positive=True),
                                  _vector(self.scale2, space, like, "ScaleMixtureNormal scale2", positive=True),
                                  _vector(self.loc, space, like, "ScaleMixtureNormal loc"))

    def describe(self):
        return {"kind": "ScaleMixtureNormal", "weight": _describe(self.weight), "scale1": _describe(self.scale1),
                "scale2": _describe(self.scale2), "loc": _describe(self.loc)}


class _BoundScaleMixture(BoundPrior):
    def __init__(self, weight, scale1, scale2, loc):
        self.weight, self.scale1, self.scale2, self.loc, self.dim = weight, scale1, scale2, loc, loc.shape[0]

    def _parts(self, theta):
        z2 = (theta - self.loc).square()
        a1, a2 = self.scale1.pow(-2), self.scale2.pow(-2)
        l1 = self.weight.log() - self.scale1.log() - 0.5 * z2 * a1
        l2 = torch.log1p(-self.weight) - self.scale2.log() - 0.5 * z2 * a2
        return l1, l2, a1, a2, z2

    def elementwise(self, theta):
        l1, l2, *_ = self._parts(theta)
        return -torch.logaddexp(l1, l2)

    def log_normaliser(self):
        return torch.full_like(self.loc, 0.5 * _LOG_2PI)

    def _abar(self, theta):
        l1, l2, a1, a2, z2 = self._parts(theta)
        r1 = torch.sigmoid(l1 - l2)
        abar = r1 * a1 + (1 - r1) * a2
        var = r1 * (1 - r1) * (a1 - a2).square()
        return abar, var, z2

    def grad(self, theta):
        return self._abar(theta)[0] * (theta - self.loc)

    def curvature(self, theta):
        abar, var, z2 = self._abar(theta)
        return abar - z2 * var

    def _sample_flat(self, generator, shape):
        kw = {"generator": generator, "dtype": self.loc.dtype, "device": self.loc.device}
        first = torch.rand(*shape, self.dim, **kw) < self.weight
        eps = torch.randn(*shape, self.dim, **kw)
        return self.loc + torch.where(first, self.scale1, self.scale2) * eps

    def select(self, idx):
        return _BoundScaleMixture(*(_take(v, idx) for v in (self.weight, self.scale1, self.scale2, self.loc)))


class LogDensity(Prior):
    """A user log prior: ``fn(theta [P]) -> scalar`` (``on="flat"``) or ``fn({name: tensor})
    -> scalar`` (``on="dict"``, the module's parameter shapes). Its gradient comes from
    autograd, its curvature from Hutchinson probes; ``sample(generator, shape) -> [*shape, P]``
    is optional (needed for ``initial_position("prior")``)."""

    def __init__(self, fn: Callable, *, on: str = "flat", sample: Callable | None = None):
        if not callable(fn):
            raise TypeError(f"LogDensity needs a callable log density, got {type(fn).__name__}")
        if on not in ("flat", "dict"):
            raise ValueError(f"on must be 'flat' or 'dict', got {on!r}")
        if sample is not None and not callable(sample):
            raise TypeError("sample must be a callable sample(generator, shape) -> [*shape, P]")
        self.fn, self.on, self.sampler = fn, on, sample

    def bind(self, space, like):
        return _BoundLogDensity(self, space)

    def describe(self):
        return {"kind": "LogDensity", "fn": getattr(self.fn, "__qualname__", type(self.fn).__name__), "on": self.on}


class _BoundLogDensity(BoundPrior):
    factorised = False

    def __init__(self, spec: LogDensity, space):
        self.spec, self.space, self.dim = spec, space, space.dim

    def _log_p(self, theta1: Tensor) -> Tensor:
        arg = theta1 if self.spec.on == "flat" else self.space.unflatten(theta1)
        out = self.spec.fn(arg)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise ValueError(f"the log prior must return a scalar tensor, got "
                             f"{type(out).__name__}{'' if not isinstance(out, Tensor) else tuple(out.shape)}")
        return out.reshape(())

    def energy(self, theta):
        return -torch.stack([self._log_p(t) for t in theta])

    def log_prob(self, theta):
        return -self.energy(theta)

    def elementwise(self, theta):
        raise ValueError("a LogDensity prior is not factorised: it has no per-coordinate energy")

    def check_support(self, theta, names=None):
        e = self.energy(theta)
        bad = ~torch.isfinite(e)
        if bool(bad.any()):
            c = int(bad.nonzero()[0, 0])
            raise ValueError(f"the prior's log density is {float(-e[c])} at the initial position of chain {c}: start "
                             "inside the prior's support")

    def grad(self, theta):
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.energy(leaf).sum(), leaf)
        return g

    def hessian_diag(self, theta, generator=None, num_probes: int = 1):
        from .energy import hutchinson_diag

        return hutchinson_diag(self.energy, theta, generator, num_probes)

    def curvature(self, theta):
        raise ValueError("a LogDensity prior has no closed-form curvature: use hessian_diag (Hutchinson)")

    def sample(self, generator, shape=()):
        if self.spec.sampler is None:
            raise ValueError("this LogDensity prior cannot be sampled: give LogDensity(fn, sample=...) to start "
                             "chains from the prior")
        out = self.spec.sampler(generator, tuple(shape))
        if not isinstance(out, Tensor) or tuple(out.shape) != (*shape, self.dim):
            raise ValueError(f"LogDensity sample must return a tensor of shape {(*shape, self.dim)}, got "
                             f"{getattr(out, 'shape', type(out).__name__)}")
        return out

    def select(self, idx):
        raise ValueError("a LogDensity prior is over the whole parameter vector: it cannot be one entry of a "
                         "{pattern: prior} map")

    def to(self, device=None, dtype=None):
        return self


class _BoundComposite(BoundPrior):
    """Different factorised priors on disjoint sets of coordinates."""

    def __init__(self, parts: list[tuple[BoundPrior, Tensor]], dim: int):
        self.parts, self.dim = parts, dim

    def _scatter(self, theta, fn):
        out = torch.empty_like(theta)
        for prior, idx in self.parts:
            out[..., idx] = fn(prior, theta[..., idx])
        return out

    def elementwise(self, theta):
        return self._scatter(theta, lambda p, t: p.elementwise(t))

    def grad(self, theta):
        return self._scatter(theta, lambda p, t: p.grad(t))

    def curvature(self, theta):
        return self._scatter(theta, lambda p, t: p.curvature(t))

    def log_normaliser(self):
        ref = self.parts[0][0].log_normaliser()
        out = ref.new_empty(self.dim)
        for prior, idx in self.parts:
            out[idx] = prior.log_normaliser()
        return out

    def _sample_flat(self, generator, shape):
        draws = [(p._sample_flat(generator, shape), idx) for p, idx in self.parts]
        out = draws[0][0].new_empty(*shape, self.dim)
        for d, idx in draws:
            out[..., idx] = d
        return out

    def select(self, idx):
        raise ValueError("nested {pattern: prior} maps are not supported")

    def to(self, device=None, dtype=None):
        self.parts = [(p.to(device, dtype), idx.to(device)) for p, idx in self.parts]
        return self


class _PatternPriors(Prior):
    def __init__(self, priors: Mapping[str, Prior]):
        for pattern, p in priors.items():
            if not isinstance(p, Prior):
                raise TypeError(f"prior map entry {pattern!r} must be a Prior (Normal(...), Laplace(...), ...), got "
                                f"{type(p).__name__}")
        self.priors = dict(priors)

    def bind(self, space, like):
        space.check_patterns(self.priors)
        space.check_not_shadowed(self.priors, "prior pattern")
        chosen = {pattern: [] for pattern in self.priors}
        for info, _ in space.first_match({p: p for p in self.priors}, "add a '*' default"):
            pattern = next(p for p in self.priors if fnmatch.fnmatchcase(info.name, p))
            chosen[pattern].append(torch.arange(info.offset, info.offset + info.numel, device=like.device))
        parts = []
        for pattern, ranges in chosen.items():
            if not ranges:
                raise ValueError(f"prior pattern {pattern!r} matches only parameters an earlier pattern took")
            bound = self.priors[pattern].bind(space, like)
            if not bound.factorised:
                raise ValueError(f"prior pattern {pattern!r}: a LogDensity prior covers the whole vector and cannot "
                                 "be one entry of a {pattern: prior} map")
            idx = torch.cat(ranges)
            parts.append((bound.select(idx), idx))
        return _BoundComposite(parts, space.dim)

    def describe(self):
        return {"kind": "map", "priors": {k: v.describe() for k, v in self.priors.items()}}


class Flat(Prior):
    """The improper flat prior (energy 0): for a likelihood alone, e.g. under
    :class:`HierarchicalEnergy`, which supplies the prior itself."""

    def bind(self, space, like):
        return _BoundFlat(space.dim, like)


class _BoundFlat(BoundPrior):
    def __init__(self, dim, like):
        self.dim, self._like = dim, like

    def elementwise(self, theta):
        return torch.zeros_like(theta)

    def log_normaliser(self):
        raise ValueError("the flat prior is improper: it has no normalised density")

    def grad(self, theta):
        return torch.zeros_like(theta)

    def curvature(self, theta):
        return torch.zeros_like(theta)

    def _sample_flat(self, generator, shape):
        raise ValueError("the flat prior is improper and cannot be sampled")

    def select(self, idx):
        return _BoundFlat(int(idx.numel()), self._like)


# ---------------------------------------------------------------------------------------------
# hierarchical scales: σ_g of each group's Normal(0, σ_g²) prior sampled as s_g = log σ_g
# ---------------------------------------------------------------------------------------------
class HalfCauchy:
    """Half-Cauchy(0, b) hyperprior on a scale σ (Gelman 2006; Polson & Scott 2012). In s = log σ,
    with the Jacobian: −log p(s) = log(1 + e^{2s}/b²) − s + const."""

    def __init__(self, scale: float = 1.0):
        if not float(scale) > 0:
            raise ValueError(f"HalfCauchy scale must be positive, got {scale}")
        self.scale = float(scale)

    def energy(self, s: Tensor) -> Tensor:
        return torch.nn.functional.softplus(2 * s - 2 * math.log(self.scale)) - s

    def grad(self, s: Tensor) -> Tensor:
        return 2 * torch.sigmoid(2 * s - 2 * math.log(self.scale)) - 1

    def log_prob_sigma(self, sigma: Tensor) -> Tensor:
        """log p(σ), normalised (tests)."""
        b = self.scale
        return math.log(2 / (math.pi * b)) - torch.log1p((sigma / b).square())

    def describe(self):
        return {"kind": "HalfCauchy", "scale": self.scale}


class GammaPrecision:
    """Gamma(shape a, rate r) hyperprior on the precision τ = σ^{-2} (the conjugate choice). In
    s = log σ, with the Jacobian |dτ/ds| = 2e^{−2s}: −log p(s) = 2a·s + r·e^{−2s} + const."""

    def __init__(self, shape: float = 1.0, rate: float = 1.0):
        if not (float(shape) > 0 and float(rate) > 0):
            raise ValueError(f"GammaPrecision needs shape > 0 and rate > 0, got {shape}, {rate}")
        self.shape, self.rate = float(shape), float(rate)

    def energy(self, s: Tensor) -> Tensor:
        return 2 * self.shape * s + self.rate * torch.exp(-2 * s)

    def grad(self, s: Tensor) -> Tensor:
        return 2 * self.shape - 2 * self.rate * torch.exp(-2 * s)

    def describe(self):
        return {"kind": "GammaPrecision", "shape": self.shape, "rate": self.rate}


class HierarchicalEnergy(WrappedEnergy):
    r"""A :class:`~structmc.energy.ModuleEnergy` whose Normal(0, σ_g²) prior scales are sampled:
    one σ_g per group g of parameters (``groups="layer"``: per layer; ``"param"``: per
    parameter tensor; or a :class:`~structmc.partitions.Partition`), each with ``hyperprior``
    (:class:`HalfCauchy` or :class:`GammaPrecision`). θ gains one coordinate s_g = log σ_g per
    group, named ``log_scale.<group>``, after the network's parameters:

    .. math::
        U(θ, s) = U_{lik}(θ) + \sum_g \Big[	frac12 e^{-2 s_g} \sum_{j \in g} θ_j^2
                  + n_g s_g\Big] - \sum_g \log p_{hyper}(s_g)

    (the last term includes the Jacobian of σ = e^s). Any sampler runs on it; ``predictive``,
    ``evaluate`` and ``forward_draws`` use the network part of each draw. The base energy's
    own prior is replaced (``base.with_prior(Flat())``). As a
    :class:`~structmc.energy.WrappedEnergy` it forwards the base's ``num_data``, ``device``,
    ``dtype``, ``requires_data``, per-chain buffers and checks; its ``space`` is its own.
    """

    def __init__(self, base, groups="layer", hyperprior=None, *, init_scale: float = 1.0):
        from .space import ParamSpace

        if not hasattr(base, "with_prior"):
            raise TypeError(f"HierarchicalEnergy wraps a ModuleEnergy, got {type(base).__name__}")
        if not float(init_scale) > 0:
            raise ValueError(f"init_scale must be positive, got {init_scale}")
        self.hyperprior = HalfCauchy(1.0) if hyperprior is None else hyperprior
        if not (hasattr(self.hyperprior, "energy") and hasattr(self.hyperprior, "grad")):
            raise TypeError("hyperprior must be HalfCauchy(...) or GammaPrecision(...) (energy and grad in s = log σ)")
        super().__init__(base.with_prior(Flat()))
        space = base.space
        names, ids = self._groups(space, groups)
        self.group_names, self.num_groups = names, len(names)
        self.group_ids = ids.to(base.device)
        self.group_sizes = torch.bincount(ids, minlength=len(names)).to(device=base.device, dtype=base.dtype)
        self.net_dim = space.dim
        self._space = ParamSpace([(i.name, i.shape) for i in space.params] + [(f"log_scale.{n}", ()) for n in names])
        self.init_scale = float(init_scale)
        self.groups_spec = groups

    @staticmethod
    def _groups(space, groups):
        if isinstance(groups, str):
            if groups == "layer":
                names, ids = [], torch.empty(space.dim, dtype=torch.long)
                for g, layer in enumerate(space.layers):
                    names.append(layer.name or str(g))  # a bare module's layer has no name
                    for pname in ([layer.weight, layer.bias] if layer.kind != "other" else list(layer.other)):
                        if pname is not None:
                            ids[space[pname].slice] = g
                return names, ids
            if groups == "param":
                ids = torch.empty(space.dim, dtype=torch.long)
                for g, info in enumerate(space.params):
                    ids[info.slice] = g
                return [i.name for i in space.params], ids
            raise ValueError(f"groups must be 'layer', 'param' or a Partition, got {groups!r}")
        ids = getattr(groups, "group_ids", None)
        if ids is None or ids.shape != (space.dim,):
            raise ValueError("groups must be 'layer', 'param' or a Partition of the network's parameters")
        return [str(g) for g in range(int(groups.num_groups))], ids.long().cpu()

    # -- the Energy protocol (the rest forwarded by WrappedEnergy) -------------------------------
    @property
    def space(self):
        """The network's parameters, then one ``log_scale.<group>`` per group."""
        return self._space

    def check(self, data=None, init=None, batch_size=None, batching=None, *, num_points=None) -> None:
        """The base's checks, on the network part of ``init`` (log σ_g ranges over the reals)."""
        self.base.check(data, None if init is None else init[..., : self.net_dim], batch_size, batching,
                        num_points=num_points)

    def describe(self) -> dict:
        """Kind, ``num_data``, the groups, hyperprior and network size hashed as ``hierarchical``,
        and the base's description."""
        part, unchecked = fingerprint.value_fingerprint(
            {"config": self.config(), "hyperprior": self.hyperprior, "group_ids": self.group_ids,
             "net_dim": self.net_dim}, "the hierarchical prior")
        out = {"kind": type(self).__name__, "num_data": self.num_data, "hierarchical": part}
        if unchecked:
            out["unfingerprintable"] = unchecked
        out["base"] = self.base.describe()
        return out

    def initial_position(self, source: str = "module", *, generator=None, num_chains=None):
        """The module's parameters and log σ_g = log ``init_scale`` (``"module"`` only: the
        hyperprior's draws of σ can be extreme; give ``init=`` for anything else)."""
        if source != "module":
            raise ValueError(f"a HierarchicalEnergy starts from 'module' (or give init=), got {source!r}")
        net = self.base.initial_position()
        s = torch.full((self.num_groups,), math.log(self.init_scale), dtype=net.dtype, device=net.device)
        out = torch.cat([net, s])
        return out if num_chains is None else out.expand(num_chains, -1).clone()

    def _hier(self, theta: Tensor, grad: bool):
        w, s = theta[:, : self.net_dim], theta[:, self.net_dim:]
        sq = torch.zeros(theta.shape[0], self.num_groups, dtype=theta.dtype, device=theta.device)
        sq.index_add_(1, self.group_ids, w * w)
        inv_var = torch.exp(-2 * s)  # [C, G]
        energy = (0.5 * inv_var * sq + self.group_sizes * s + self.hyperprior.energy(s)).sum(-1)
        if not grad:
            return energy, None
        g_w = w * inv_var.index_select(1, self.group_ids)
        g_s = -inv_var * sq + self.group_sizes + self.hyperprior.grad(s)
        return energy, torch.cat([g_w, g_s], 1)

    def value_and_grad(self, theta, batch):
        lik, g_lik = self.base.value_and_grad(theta[:, : self.net_dim].contiguous(), batch)
        hier, g_hier = self._hier(theta, True)
        g_hier[:, : self.net_dim] += g_lik
        return lik + hier, g_hier

    def value(self, theta, batch):
        return self.base.value(theta[:, : self.net_dim].contiguous(), batch) + self._hier(theta, False)[0]

    def check_data(self, data):
        return self.base.check_data(data)

    # -- predictions use the network part of each draw -------------------------------------------
    @property
    def predictive_energy(self):
        """The energy that predicts from this energy's draws (see :class:`~structmc.energy.Energy`):
        itself, since :meth:`forward_draws` takes whole draws and drops their ``log_scale`` part."""
        return self

    @property
    def likelihood(self):
        return self.base.likelihood

    @property
    def module(self):
        return self.base.module

    def forward_draws(self, samples, inputs, **kw):
        return self.base.forward_draws(samples[..., : self.net_dim], inputs, **kw)

    def scales(self, draws: Tensor) -> Tensor:
        """σ_g of draws ``[..., P]`` -> ``[..., G]``."""
        return draws[..., self.net_dim:].exp()

    def config(self) -> dict:
        return {"groups": self.group_names, "hyperprior": self.hyperprior.describe()}


def _describe(v):
    if isinstance(v, Tensor):
        return {"tensor": list(v.shape), "sum": float(v.double().sum())}
    if isinstance(v, Mapping):
        return {str(k): (_describe(x) if isinstance(x, Tensor) else x) for k, x in v.items()}
    return v


def as_prior(prior) -> Prior:
    """A :class:`Prior` from a prior, a ``{name pattern: prior}`` map or a callable log
    density on the flat vector."""
    if isinstance(prior, Prior):
        return prior
    if isinstance(prior, Mapping):
        return _PatternPriors(prior)
    if callable(prior):
        return LogDensity(prior)
    raise TypeError(f"prior must be a structmc.priors.Prior, a {{pattern: prior}} map or a callable log density, "
                    f"got {type(prior).__name__}")
