"""The built-in families: :class:`Normal`, :class:`Laplace`, :class:`StudentT`,
:class:`ScaleMixtureNormal` (see :mod:`structmc.priors`)."""

from __future__ import annotations

import math

import torch

from .prior import _LOG_2PI, BoundPrior, Prior, _describe, _take, _vector


class Normal(Prior):
    """N(loc, scale²) per parameter; ``loc`` may be a state dict (a prior centred on
    pretrained weights)."""

    def __init__(self, loc=0.0, scale=1.0):
        self.loc, self.scale = loc, scale

    def bind(self, space, like):
        return _BoundNormal(
            _vector(self.loc, space, like, "Normal loc"),
            _vector(self.scale, space, like, "Normal scale", positive=True),
        )

    def describe(self):
        return {"kind": "Normal", "loc": _describe(self.loc), "scale": _describe(self.scale)}


class _BoundNormal(BoundPrior):
    _fused: bool | tuple = (
        False  # prior_std's zero-mean Normal of a ModuleEnergy (see fuse); pickles from before lack it
    )

    def __init__(self, loc, scale, fused: bool = False):
        self.loc, self.scale, self.dim = loc, scale, loc.shape[0]
        self.precision = scale.pow(-2)
        self._centred = not bool(loc.any())
        if fused:
            self.fuse()

    def fuse(self) -> _BoundNormal:
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
        return _BoundLaplace(
            _vector(self.loc, space, like, "Laplace loc"),
            _vector(self.scale, space, like, "Laplace scale", positive=True),
        )

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
        return _BoundStudentT(
            _vector(self.df, space, like, "StudentT df", positive=True),
            _vector(self.loc, space, like, "StudentT loc"),
            _vector(self.scale, space, like, "StudentT scale", positive=True),
        )

    def describe(self):
        return {
            "kind": "StudentT",
            "df": _describe(self.df),
            "loc": _describe(self.loc),
            "scale": _describe(self.scale),
        }


class _BoundStudentT(BoundPrior):
    def __init__(self, df, loc, scale):
        self.df, self.loc, self.scale, self.dim = df, loc, scale, loc.shape[0]

    def elementwise(self, theta):
        z = (theta - self.loc) / self.scale
        return 0.5 * (self.df + 1) * torch.log1p(z * z / self.df)

    def log_normaliser(self):
        nu = self.df
        return torch.lgamma(nu / 2) - torch.lgamma((nu + 1) / 2) + 0.5 * torch.log(nu * math.pi) + self.scale.log()

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
        return _BoundScaleMixture(
            w,
            _vector(self.scale1, space, like, "ScaleMixtureNormal scale1", positive=True),
            _vector(self.scale2, space, like, "ScaleMixtureNormal scale2", positive=True),
            _vector(self.loc, space, like, "ScaleMixtureNormal loc"),
        )

    def describe(self):
        return {
            "kind": "ScaleMixtureNormal",
            "weight": _describe(self.weight),
            "scale1": _describe(self.scale1),
            "scale2": _describe(self.scale2),
            "loc": _describe(self.loc),
        }


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
