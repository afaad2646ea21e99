"""Priors: the declared :class:`Prior`, the bound :class:`BoundPrior` and its parameter
vectors, user densities, the {pattern: prior} map, :class:`Flat` and :func:`as_prior` (see :mod:`structmc.priors`)."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

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
                raise ValueError(
                    f"{what}: a tensor must be a scalar or the flat [P = {space.dim}] vector, got shape "
                    f"{tuple(value.shape)}"
                )
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
        raise ValueError(
            f"{what}: the state dict has no entry for {missing[:5]}{' ...' if len(missing) > 5 else ''}; "
            f"its keys are {list(state)[:8]}{' ...' if len(state) > 8 else ''}"
        )
    parts = []
    for info in space.params:
        t = state[info.name]
        if tuple(t.shape) != tuple(info.shape):
            raise ValueError(
                f"{what}: {info.name!r} has shape {tuple(t.shape)} in the state dict, {tuple(info.shape)} in the model"
            )
        parts.append(t.detach().reshape(-1).to(like))
    return torch.cat(parts)


# ---------------------------------------------------------------------------------------------
# declared priors
# ---------------------------------------------------------------------------------------------
class Prior:
    """A prior declared in terms of parameter names; :meth:`bind` resolves it on a
    :class:`~structmc.space.ParamSpace` into a :class:`BoundPrior` over θ ∈ R^P."""

    def bind(self, space, like: Tensor) -> BoundPrior:
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

    def select(self, idx: Tensor) -> BoundPrior:
        raise NotImplementedError

    def to(self, device=None, dtype=None) -> BoundPrior:
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
            raise ValueError(
                f"the prior's density is 0 or undefined at the initial position (chain {c}, {where}, "
                f"value {float(theta[c, j]):.4g}): start inside the prior's support"
            )


def _take(v: Tensor, idx: Tensor) -> Tensor:
    return v.index_select(0, idx.to(v.device))


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
            raise ValueError(
                f"the log prior must return a scalar tensor, got "
                f"{type(out).__name__}{'' if not isinstance(out, Tensor) else tuple(out.shape)}"
            )
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
            raise ValueError(
                f"the prior's log density is {float(-e[c])} at the initial position of chain {c}: start "
                "inside the prior's support"
            )

    def grad(self, theta):
        if torch.compiler.is_compiling():  # the compiled step: torch.func.grad (autodiff.traced_value_and_grad)
            from ..autodiff import traced_value_and_grad

            return traced_value_and_grad(self.energy, (theta.detach(),))[1][0]
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.energy(leaf).sum(), leaf)
        return g

    def hessian_diag(self, theta, generator=None, num_probes: int = 1):
        from ..autodiff import hutchinson_diag

        return hutchinson_diag(self.energy, theta, generator, num_probes)

    def curvature(self, theta):
        raise ValueError("a LogDensity prior has no closed-form curvature: use hessian_diag (Hutchinson)")

    def sample(self, generator, shape=()):
        if self.spec.sampler is None:
            raise ValueError(
                "this LogDensity prior cannot be sampled: give LogDensity(fn, sample=...) to start "
                "chains from the prior"
            )
        out = self.spec.sampler(generator, tuple(shape))
        if not isinstance(out, Tensor) or tuple(out.shape) != (*shape, self.dim):
            raise ValueError(
                f"LogDensity sample must return a tensor of shape {(*shape, self.dim)}, got "
                f"{getattr(out, 'shape', type(out).__name__)}"
            )
        return out

    def select(self, idx):
        raise ValueError(
            "a LogDensity prior is over the whole parameter vector: it cannot be one entry of a {pattern: prior} map"
        )

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
                raise TypeError(
                    f"prior map entry {pattern!r} must be a Prior (Normal(...), Laplace(...), ...), got "
                    f"{type(p).__name__}"
                )
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
                raise ValueError(
                    f"prior pattern {pattern!r}: a LogDensity prior covers the whole vector and cannot "
                    "be one entry of a {pattern: prior} map"
                )
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
    raise TypeError(
        f"prior must be a structmc.priors.Prior, a {{pattern: prior}} map or a callable log density, "
        f"got {type(prior).__name__}"
    )
