"""Constrained parameters of a log density: sampled in an unconstrained space.

A parameter with a support (a scale > 0, a probability in (0, 1), a simplex, a correlation's
Cholesky factor) is sampled as ``z`` in R^k with ``x = T(z)`` for a bijection ``T`` onto the
support, and the density of ``z`` is the change of variables

    log p_Z(z) = log p_X(T(z)) + log |det ∂T/∂z|,

which is what Stan does for every constrained parameter (Stan Reference Manual, "Constraint
transforms"). The bijections are PyTorch's own: ``torch.distributions.biject_to(constraint)``
for a constraint (exp for ``positive``, sigmoid and an affine map for ``interval``, stick
breaking for ``simplex``, ...), or a ``torch.distributions.transforms.Transform`` given as is.

:class:`Constraints` holds the layout of both spaces (the sampler's unconstrained θ and the
draws' constrained x, one :class:`~structmc.space.ParamSpace` each, same names in the same
order) and maps between them; :class:`~structmc.energy.LogDensityEnergy` uses it."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor
from torch.distributions import biject_to, constraints
from torch.distributions.transforms import ComposeTransform, Transform

from ..space import ParamSpace

Shape = tuple[int, ...]


def _as_shape(name: str, shape) -> Shape:
    if isinstance(shape, bool):
        raise TypeError(f"params[{name!r}] must be a shape (an int or a tuple of ints), got {shape!r}")
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = tuple(int(s) for s in shape)
        ok = all(not isinstance(s, bool) and int(s) == s for s in shape)
    except (TypeError, ValueError):
        ok = False
    if not ok or any(s < 1 for s in out):
        raise TypeError(
            f"params[{name!r}] must be a shape (an int or a tuple of positive ints; () for a scalar), got {shape!r}"
        )
    return out


def as_transform(name: str, spec) -> Transform:
    """The bijection from R^k onto the support ``spec`` names: ``biject_to(spec)`` for a
    ``torch.distributions.constraints.Constraint``, ``spec`` itself for a bijective
    ``Transform``."""
    if isinstance(spec, constraints.Constraint):
        try:
            return biject_to(spec)
        except NotImplementedError:
            raise ValueError(
                f"constraints[{name!r}] = {spec!r}: PyTorch has no bijection onto this support "
                "(torch.distributions.biject_to); give a Transform instead"
            ) from None
    if isinstance(spec, Transform):
        if not spec.bijective:
            raise ValueError(f"constraints[{name!r}] = {spec!r} is not bijective: the density of z needs a bijection")
        return spec
    raise TypeError(
        f"constraints[{name!r}] must be a torch.distributions constraint (e.g. constraints.positive) or a "
        f"bijective torch.distributions Transform, got {type(spec).__name__}"
    )


def describe_transform(t: Transform) -> str:
    """A text that changes when the bijection does (class names and their numeric members),
    for the energy's fingerprint: a resume with another constraint is refused."""
    if isinstance(t, ComposeTransform):
        return "Compose(" + ", ".join(describe_transform(p) for p in t.parts) + ")"
    members = []
    for key, value in sorted(vars(t).items()):
        if key.startswith("_") or key in ("training",):
            continue
        if isinstance(value, Tensor):
            value = value.tolist()
        if isinstance(value, (int, float, bool, list, tuple, str)) or value is None:
            members.append(f"{key}={value!r}")
        elif isinstance(value, constraints.Constraint):
            members.append(f"{key}={value!r}")
    return f"{type(t).__name__}({', '.join(members)})"


class Constraints:
    """The named parameters of a log density, their constrained shapes and the bijections of
    the constrained ones (``transforms``; unconstrained parameters are used as they are).

    ``space``: the layout of θ, the unconstrained vector the sampler moves (a parameter's
    unconstrained shape is ``transform.inverse_shape(shape)``: ``[K-1]`` for a ``[K]``
    simplex). ``draw_space``: the layout of the draws, in the constrained space."""

    def __init__(self, params: Mapping, specs: Mapping | None):
        if not isinstance(params, Mapping) or not params:
            raise TypeError("params must be a non-empty mapping {name: shape}")
        shapes = {str(n): _as_shape(str(n), s) for n, s in params.items()}
        specs = dict(specs or {})
        unknown = [n for n in specs if n not in shapes]
        if unknown:
            raise ValueError(
                f"constraints name parameters that params does not declare: {unknown} (params: {list(shapes)})"
            )
        self.transforms: dict[str, Transform] = {n: as_transform(n, specs[n]) for n in shapes if n in specs}
        # the support init is checked against: the constraint given (a composed bijection's
        # codomain is its last part's, e.g. an affine map's real line for greater_than)
        self.support = {
            n: specs[n] if isinstance(specs[n], constraints.Constraint) else t.codomain
            for n, t in self.transforms.items()
        }
        unconstrained = {}
        for name, shape in shapes.items():
            t = self.transforms.get(name)
            if t is None:
                unconstrained[name] = shape
                continue
            try:
                unconstrained[name] = tuple(t.inverse_shape(torch.Size(shape)))
            except ValueError as err:
                raise ValueError(
                    f"constraints[{name!r}]: {describe_transform(t)} cannot map onto shape {shape} ({err})"
                ) from None
        self.draw_space = ParamSpace(list(shapes.items()))
        self.space = ParamSpace(list(unconstrained.items()))

    def describe(self) -> dict:
        return {
            "params": [[i.name, list(i.shape)] for i in self.draw_space.params],
            "constraints": {n: describe_transform(t) for n, t in self.transforms.items()},
        }

    def constrain(self, theta: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """θ ``[..., P]`` (unconstrained) -> the named constrained values ``{name: [..., *shape]}``
        and ``log |det ∂x/∂θ|`` ``[...]``, summed over the parameters."""
        lead = theta.shape[:-1]
        values, log_det = {}, theta.new_zeros(lead)
        for info in self.space.params:
            z = theta[..., info.slice].reshape((*lead, *info.shape))
            t = self.transforms.get(info.name)
            if t is None:
                values[info.name] = z
                continue
            x = t(z)
            ladj = t.log_abs_det_jacobian(z, x)
            values[info.name] = x
            log_det = log_det + ladj.reshape((*lead, -1)).sum(-1)
        return values, log_det

    def to_draws(self, theta: Tensor) -> Tensor:
        """θ ``[..., P]`` -> the draws ``[..., P_draws]`` (flat, :attr:`draw_space`'s layout)."""
        if not self.transforms:
            return theta
        values, _ = self.constrain(theta)
        lead = theta.shape[:-1]
        return torch.cat([values[i.name].reshape((*lead, i.numel)) for i in self.draw_space.params], -1)

    def from_draws(self, x: Tensor, what: str = "init") -> Tensor:
        """The draws' layout ``[..., P_draws]`` -> θ ``[..., P]``; a value outside its support
        is refused with the parameter's name."""
        lead = x.shape[:-1]
        parts = []
        for info in self.draw_space.params:
            value = x[..., info.slice].reshape((*lead, *info.shape))
            t = self.transforms.get(info.name)
            if t is None:
                parts.append(value.reshape((*lead, -1)))
                continue
            support = self.support[info.name]
            inside = support.check(value)
            if not bool(inside.all()):
                raise ValueError(
                    f"{what}: {info.name!r} = {value.tolist()} is outside its support {support!r} "
                    "(give a value inside it: the sampler starts from its unconstrained image)"
                )
            z = t.inv(value)
            if not bool(torch.isfinite(z).all()):
                raise ValueError(
                    f"{what}: {info.name!r} = {value.tolist()} lies on the edge of its support {support!r}; "
                    "its unconstrained image is not finite"
                )
            parts.append(z.reshape((*lead, -1)))
        return torch.cat(parts, -1)
