r"""Gold standard: structmc's samplers against posteriordb's reference posteriors.

posteriordb (Magnusson et al. 2024, https://github.com/stan-dev/posteriordb, BSD 3-Clause, commit
28f8d3d) publishes Stan programs, their data and reference draws (10 chains × 1,000 draws of
long, thinned Stan NUTS runs, constrained space) that nobody here computed. For eight of its
posteriors with reference draws this script writes each Stan program's log density in PyTorch
(:data:`POSTERIORS`: the constrained parameters with their shapes and
``torch.distributions.constraints`` declared next to the density; Stan's priors exactly, a
``<lower=0>`` parameter's truncated prior without its constant normaliser, other constants
dropped), samples it at T = 1 with

* SGLD at two step sizes, SGHMC and pSGLD (full batch: the gradients are exact, so what is
  measured is the discretisation and the mixing, not the minibatch noise), and
* a Metropolis-adjusted reference: full-batch MALA (``MetropolisWithinGibbs`` with one block and
  ``mala=True``) in Laplace-whitened unconstrained coordinates, its proposal variance adapted
  toward 57% acceptance during burn-in and frozen after,

and prints, per posterior and sampler, the error of the posterior means in reference-sd units
(max and mean over the reference's quantities), the range of sd ratios (sampler / reference),
the Monte Carlo standard error of the means (from the bulk ESS, in reference-sd units), MALA's
acceptance and the wall time.

Step sizes follow one rule from the curvature at the mode, never from the reference answers:
with H the Hessian of the unconstrained energy U(u) = −log p(T(u)) − log|det J_T(u)| at its
minimum (L-BFGS) and λ_max, λ_min its extreme eigenvalues,

* SGLD: ε = 1/λ_max ("large") and ε = 0.25/λ_max ("small"); for a Gaussian target SGLD's
  stationary variance along an eigenvector is 1/(λ(1 − ελ/4)), so ≤ 33% resp. ≤ 6.7% too large
  along the stiffest direction and less elsewhere;
* SGHMC: η = 0.1/λ_max (a leapfrog step h = √η = 0.32/√λ_max), friction α = 2√(η λ_min)
  (critical damping of the slowest direction) clipped to [0.001, 0.5];
* pSGLD: the same 0.25/λ_max rule on the preconditioned curvature G^{1/2} H G^{1/2}, with G the
  preconditioner pSGLD settles to at the posterior, G_ii = N/√H_ii (E[(∂_i U)²] = H_ii for a
  Gaussian; ḡ = ∇U/N);
* MALA: proposal variance 1.65²/P^{1/3} in whitened coordinates (Roberts & Rosenthal 1998)
  adapted toward acceptance 0.57 during burn-in.

Each run: ``--chains`` chains started near the mode (mode + 0.1 × a Laplace draw, per chain),
``--burn-in`` iterations discarded, ``--draws`` kept (thin 1), seed fixed per posterior and sampler.
The relaxation time of SGLD's slowest direction is 2/(ε λ_min) iterations = 8 κ at the small
step (κ = λ_max/λ_min): a posterior whose κ makes that a sizeable fraction of the run is one SGLD
cannot sample in the budget, and the table says so (column κ).

Usage::

    python bench/gold_standard.py --posteriordb PATH [--out results.json] [--only NAME ...]

PATH is a posteriordb checkout (the folder holding ``posterior_database/``), that folder itself,
or a bare git repository of it; the environment variable ``STRUCTMC_POSTERIORDB`` is the default.
The library and the tests never need it: tests/validation/test_gold_standard.py runs two small
posteriors from committed fixtures (``--write-fixtures`` writes them).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import subprocess
import sys
import time
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from torch.distributions import biject_to, constraints
from torch.distributions.constraints import Constraint

import structmc as sm
from structmc.diagnostics import ess
from structmc.gibbs import Adapt, MetropolisWithinGibbs
from structmc.partitions import fully_joint

DTYPE = torch.float64
POSTERIORDB_COMMIT = "28f8d3d"
SAMPLERS = ("SGLD large", "SGLD small", "SGHMC", "pSGLD", "MALA")


# ---------------------------------------------------------------------------------------------
# log densities of Stan's distributions, elementwise, their constants dropped (a scale that is a
# parameter keeps its −log σ). Every posterior's density takes parameters with any leading batch
# shape B (() for one point, (C,) for C chains at once) and returns B: the chains of a run are
# one tensor computation rather than a vmap over chains, several times faster for these sizes.
# ---------------------------------------------------------------------------------------------
def _log(x) -> Tensor | float:
    return torch.log(x) if isinstance(x, Tensor) else math.log(x)


def normal_lpdf(x: Tensor, loc, scale) -> Tensor:
    z = (x - loc) / scale
    return -0.5 * z * z - _log(scale)


def student_t_lpdf(x: Tensor, nu: float, loc, scale) -> Tensor:
    z = (x - loc) / scale
    return -(nu + 1) / 2 * torch.log1p(z * z / nu) - _log(scale)


def cauchy_lpdf(x: Tensor, loc, scale) -> Tensor:
    z = (x - loc) / scale
    return -torch.log1p(z * z) - _log(scale)


def gamma_lpdf(x: Tensor, shape: float, rate: float) -> Tensor:
    return (shape - 1) * torch.log(x) - rate * x


def beta_lpdf(x: Tensor, a: float, b: float) -> Tensor:
    return (a - 1) * torch.log(x) + (b - 1) * torch.log1p(-x)


def _named(name: str, x: Tensor, count: int) -> dict[str, Tensor]:
    """Stan's names ``name[1]`` ... ``name[count]`` of the last axis of ``x``."""
    return {f"{name}[{i + 1}]": x[..., i] for i in range(count)}


def _t(values, dtype=DTYPE) -> Tensor:
    return torch.as_tensor(values, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# the posteriors: Stan program -> PyTorch, once each
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Posterior:
    """One posteriordb posterior written in PyTorch.

    ``log_density(p, data)``: the Stan program's log density (constants dropped) of the named
    constrained parameters ``p`` (shapes ``params``, supports ``constraints``). ``quantities(p,
    data)``: the reference draws' quantities (posteriordb's names) from parameters with any
    leading batch dimensions. ``prepare(json)``: posteriordb's data JSON as tensors."""

    name: str
    kind: str
    params: dict[str, tuple[int, ...]]
    constraints: dict[str, Constraint]
    log_density: Callable[[dict[str, Tensor], dict[str, Tensor]], Tensor]  # batch shape B in, B out
    quantities: Callable[[dict[str, Tensor], dict[str, Tensor]], dict[str, Tensor]]
    prepare: Callable[[dict], dict[str, Tensor]]
    note: str = ""

    def num_data(self, data: dict[str, Tensor]) -> int:
        return int(data["N"])


# -- sblri-blr: Bayesian linear regression, 100 rows, 5 coefficients ---------------------------
def blr_log_density(p, d):
    # beta ~ normal(0, 10); sigma ~ normal(0, 10) (<lower=0>); y ~ normal(X beta, sigma)
    beta, sigma = p["beta"], p["sigma"]
    return (
        normal_lpdf(beta, 0.0, 10.0).sum(-1)
        + normal_lpdf(sigma, 0.0, 10.0)
        + normal_lpdf(d["y"], beta @ d["X"].T, sigma[..., None]).sum(-1)
    )


BLR = Posterior(
    name="sblri-blr",
    kind="unconstrained β, σ > 0",
    params={"beta": (5,), "sigma": ()},
    constraints={"beta": constraints.real, "sigma": constraints.positive},
    log_density=blr_log_density,
    quantities=lambda p, d: {**_named("beta", p["beta"], 5), "sigma": p["sigma"]},
    prepare=lambda j: {"X": _t(j["X"]), "y": _t(j["y"]), "N": _t(j["N"])},
)


# -- earnings-logearn_interaction_z: log earnings on standardised height, sex, interaction ----
def earnings_prepare(j):
    earn, height, male = _t(j["earn"]), _t(j["height"]), _t(j["male"])
    z = (height - height.mean()) / height.std()  # Stan's sd divides by N - 1, as torch's
    return {"log_earn": earn.log(), "z_height": z, "male": male, "inter": z * male, "N": _t(j["N"])}


def earnings_log_density(p, d):
    # flat priors; log_earn ~ normal(b1 + b2 z + b3 male + b4 z·male, sigma)
    design = torch.stack([torch.ones_like(d["male"]), d["z_height"], d["male"], d["inter"]], 1)
    return normal_lpdf(d["log_earn"], p["beta"] @ design.T, p["sigma"][..., None]).sum(-1)


EARNINGS = Posterior(
    name="earnings-logearn_interaction_z",
    kind="unconstrained β, σ > 0; 1,192 rows",
    params={"beta": (4,), "sigma": ()},
    constraints={"beta": constraints.real, "sigma": constraints.positive},
    log_density=earnings_log_density,
    quantities=lambda p, d: {**_named("beta", p["beta"], 4), "sigma": p["sigma"]},
    prepare=earnings_prepare,
)


# -- diamonds-diamonds: brms linear model, 5,000 rows, 24 correlated predictors --------------
def diamonds_prepare(j):
    X = _t(j["X"])
    Xc = X[:, 1:] - X[:, 1:].mean(0)  # brms centres the predictors (transformed data)
    return {"Xc": Xc, "Y": _t(j["Y"]), "N": _t(j["N"])}


def diamonds_log_density(p, d):
    # b ~ normal(0, 1); Intercept ~ student_t(3, 8, 10); sigma ~ student_t(3, 0, 10) (<lower=0>,
    # its lccdf a constant); Y ~ normal_id_glm(Xc, Intercept, b, sigma)
    b, a, sigma = p["b"], p["Intercept"], p["sigma"]
    return (
        normal_lpdf(b, 0.0, 1.0).sum(-1)
        + student_t_lpdf(a, 3.0, 8.0, 10.0)
        + student_t_lpdf(sigma, 3.0, 0.0, 10.0)
        + normal_lpdf(d["Y"], a[..., None] + b @ d["Xc"].T, sigma[..., None]).sum(-1)
    )


DIAMONDS = Posterior(
    name="diamonds-diamonds",
    kind="ill-conditioned regression; 5,000 rows",
    params={"b": (24,), "Intercept": (), "sigma": ()},
    constraints={"b": constraints.real, "Intercept": constraints.real, "sigma": constraints.positive},
    log_density=diamonds_log_density,
    quantities=lambda p, d: {**_named("b", p["b"], 24), "Intercept": p["Intercept"], "sigma": p["sigma"]},
    prepare=diamonds_prepare,
)


# -- eight_schools-eight_schools_noncentered ----------------------------------------------------
def eight_schools_log_density(p, d):
    # theta_trans ~ normal(0, 1); y ~ normal(mu + tau theta_trans, sigma); mu ~ normal(0, 5);
    # tau ~ cauchy(0, 5) (<lower=0>)
    theta = p["mu"][..., None] + p["tau"][..., None] * p["theta_trans"]
    return (
        normal_lpdf(p["theta_trans"], 0.0, 1.0).sum(-1)
        + normal_lpdf(d["y"], theta, d["sigma"]).sum(-1)
        + normal_lpdf(p["mu"], 0.0, 5.0)
        + cauchy_lpdf(p["tau"], 0.0, 5.0)
    )


def eight_schools_quantities(p, d):
    theta = p["mu"][..., None] + p["tau"][..., None] * p["theta_trans"]
    return {**_named("theta", theta, 8), "mu": p["mu"], "tau": p["tau"]}


EIGHT_SCHOOLS = Posterior(
    name="eight_schools-eight_schools_noncentered",
    kind="hierarchical (non-centred), τ > 0",
    params={"theta_trans": (8,), "mu": (), "tau": ()},
    constraints={"theta_trans": constraints.real, "mu": constraints.real, "tau": constraints.positive},
    log_density=eight_schools_log_density,
    quantities=eight_schools_quantities,
    prepare=lambda j: {"y": _t(j["y"]), "sigma": _t(j["sigma"]), "N": _t(j["J"])},
)


# -- gp_pois_regr-gp_pois_regr: latent Gaussian process, Poisson counts -------------------------
def gp_latent(rho: Tensor, alpha: Tensor, f_tilde: Tensor, x: Tensor) -> Tensor:
    """f = chol(α² exp(−(xᵢ − xⱼ)²/(2ρ²)) + 1e-10 I) f̃ (Stan's gp_exp_quad_cov), batched."""
    sq = (x[:, None] - x[None, :]) ** 2
    cov = alpha[..., None, None] ** 2 * torch.exp(-sq / (2 * rho[..., None, None] ** 2))
    cov = cov + 1e-10 * torch.eye(x.numel(), dtype=x.dtype)
    return (torch.linalg.cholesky(cov) @ f_tilde[..., None])[..., 0]


def gp_log_density(p, d):
    # rho ~ gamma(25, 4); alpha ~ normal(0, 2) (<lower=0>); f_tilde ~ normal(0, 1);
    # k ~ poisson_log(f)
    f = gp_latent(p["rho"], p["alpha"], p["f_tilde"], d["x"])
    return (
        gamma_lpdf(p["rho"], 25.0, 4.0)
        + normal_lpdf(p["alpha"], 0.0, 2.0)
        + normal_lpdf(p["f_tilde"], 0.0, 1.0).sum(-1)
        + (d["k"] * f - torch.exp(f)).sum(-1)
    )


GP = Posterior(
    name="gp_pois_regr-gp_pois_regr",
    kind="hierarchical latent GP, ρ, α > 0",
    params={"rho": (), "alpha": (), "f_tilde": (11,)},
    constraints={"rho": constraints.positive, "alpha": constraints.positive, "f_tilde": constraints.real},
    log_density=gp_log_density,
    quantities=lambda p, d: {
        "rho": p["rho"],
        "alpha": p["alpha"],
        **_named("f", gp_latent(p["rho"], p["alpha"], p["f_tilde"], d["x"]), 11),
    },
    prepare=lambda j: {"x": _t(j["x"]), "k": _t(j["k"]), "N": _t(j["N"])},
)


# -- garch-garch11: GARCH(1,1), 0 < β₁ < 1 − α₁ ------------------------------------------------
def garch_variances(mu, alpha0, alpha1, beta1, y, sigma1):
    """σ_t² = α₀ + α₁(y_{t−1} − μ)² + β₁σ_{t−1}², σ₁ given. The recursion is linear in σ² with a
    constant coefficient, σ_t² = Σ_{j≤t} β₁^{t−j} c_j (c₁ = σ₁², c_j = α₀ + α₁(y_{j−1} − μ)²),
    so a Hillis–Steele scan computes it exactly in ⌈log₂ T⌉ vector steps instead of T scalar ones:
    after the round with shift s every entry sums the window of its last 2s terms."""
    mu, alpha0, alpha1, power = (x[..., None] for x in (mu, alpha0, alpha1, beta1))
    c = alpha0 + alpha1 * (y[:-1] - mu) ** 2
    c = torch.cat([(sigma1**2).to(y.dtype).expand(*c.shape[:-1], 1), c], -1)
    shift = 1
    while shift < c.shape[-1]:
        c = torch.cat([c[..., :shift], c[..., shift:] + power * c[..., :-shift]], -1)
        shift, power = 2 * shift, power * power
    return c


def garch_log_density(p, d):
    # flat priors on mu and alpha0 > 0, alpha1 in (0, 1), beta1 in (0, 1 - alpha1); y ~ normal(mu, sigma).
    # beta1 = (1 - alpha1) * beta1_frac with beta1_frac in (0, 1): the density in
    # (alpha1, beta1_frac) is Stan's times |∂beta1/∂beta1_frac| = 1 - alpha1.
    beta1 = (1 - p["alpha1"]) * p["beta1_frac"]
    var = garch_variances(p["mu"], p["alpha0"], p["alpha1"], beta1, d["y"], d["sigma1"])
    return normal_lpdf(d["y"], p["mu"][..., None], var.sqrt()).sum(-1) + torch.log1p(-p["alpha1"])


GARCH = Posterior(
    name="garch-garch11",
    kind="constrained: α₀ > 0, α₁ ∈ (0,1), β₁ ∈ (0, 1−α₁)",
    params={"mu": (), "alpha0": (), "alpha1": (), "beta1_frac": ()},
    constraints={
        "mu": constraints.real,
        "alpha0": constraints.positive,
        "alpha1": constraints.unit_interval,
        "beta1_frac": constraints.unit_interval,
    },
    log_density=garch_log_density,
    quantities=lambda p, d: {
        "mu": p["mu"],
        "alpha0": p["alpha0"],
        "alpha1": p["alpha1"],
        "beta1": (1 - p["alpha1"]) * p["beta1_frac"],
    },
    prepare=lambda j: {"y": _t(j["y"]), "sigma1": _t(j["sigma1"]), "N": _t(j["T"])},
    note="β₁'s bound depends on α₁: sampled as β₁ = (1 − α₁)·f, f ∈ (0, 1), with the Jacobian 1 − α₁",
)


# -- arK-arK: AR(5) ------------------------------------------------------------------------------
def ark_prepare(j):
    y, K = _t(j["y"]), int(j["K"])
    T = y.numel()
    lags = torch.stack([y[K - k : T - k] for k in range(1, K + 1)], 1)  # y[t-k], t = K+1..T
    return {"target": y[K:], "lags": lags, "N": _t(j["T"])}


def ark_log_density(p, d):
    # alpha, beta ~ normal(0, 10); sigma ~ cauchy(0, 2.5) (<lower=0>); y[t] ~ normal(alpha + Σ beta_k y[t-k], sigma)
    return (
        normal_lpdf(p["alpha"], 0.0, 10.0)
        + normal_lpdf(p["beta"], 0.0, 10.0).sum(-1)
        + cauchy_lpdf(p["sigma"], 0.0, 2.5)
        + normal_lpdf(d["target"], p["alpha"][..., None] + p["beta"] @ d["lags"].T, p["sigma"][..., None]).sum(-1)
    )


ARK = Posterior(
    name="arK-arK",
    kind="autoregression AR(5), σ > 0",
    params={"alpha": (), "beta": (5,), "sigma": ()},
    constraints={"alpha": constraints.real, "beta": constraints.real, "sigma": constraints.positive},
    log_density=ark_log_density,
    quantities=lambda p, d: {"alpha": p["alpha"], **_named("beta", p["beta"], 5), "sigma": p["sigma"]},
    prepare=ark_prepare,
)


# -- low_dim_gauss_mix-low_dim_gauss_mix: two-component mixture, ordered means ------------------
def mix_log_density(p, d):
    # mu (ordered[2]) ~ normal(0, 2); sigma ~ normal(0, 2) (<lower=0>); theta ~ beta(5, 5);
    # y ~ theta N(mu1, sigma1) + (1 - theta) N(mu2, sigma2). ordered[2] as mu1 = mu_low,
    # mu2 = mu_low + mu_gap (mu_gap > 0): a shift, Jacobian 1.
    mu = torch.stack([p["mu_low"], p["mu_low"] + p["mu_gap"]], -1)  # B + (2,)
    sigma, theta, y = p["sigma"], p["theta"], d["y"]
    comp = normal_lpdf(y[:, None], mu[..., None, :], sigma[..., None, :])  # B + (N, 2)
    log_weight = torch.log(torch.stack([theta, 1 - theta], -1))[..., None, :]
    mix = torch.logsumexp(comp + log_weight, dim=-1).sum(-1)
    return normal_lpdf(mu, 0.0, 2.0).sum(-1) + normal_lpdf(sigma, 0.0, 2.0).sum(-1) + beta_lpdf(theta, 5.0, 5.0) + mix


MIXTURE = Posterior(
    name="low_dim_gauss_mix-low_dim_gauss_mix",
    kind="mixture: ordered μ, σ > 0, θ ∈ (0,1); 1,000 rows",
    params={"mu_low": (), "mu_gap": (), "sigma": (2,), "theta": ()},
    constraints={
        "mu_low": constraints.real,
        "mu_gap": constraints.positive,
        "sigma": constraints.positive,
        "theta": constraints.unit_interval,
    },
    log_density=mix_log_density,
    quantities=lambda p, d: {
        "mu[1]": p["mu_low"],
        "mu[2]": p["mu_low"] + p["mu_gap"],
        **_named("sigma", p["sigma"], 2),
        "theta": p["theta"],
    },
    prepare=lambda j: {"y": _t(j["y"]), "N": _t(j["N"])},
    note="ordered[2] μ as (μ₁, μ₂ − μ₁ > 0)",
)

POSTERIORS: dict[str, Posterior] = {
    p.name: p for p in (BLR, EARNINGS, DIAMONDS, EIGHT_SCHOOLS, GP, GARCH, ARK, MIXTURE)
}


# ---------------------------------------------------------------------------------------------
# the constrained-parameter energy: the one place to swap in sm.LogDensityEnergy(params=...,
# constraints=...) once the library has it
# ---------------------------------------------------------------------------------------------
@dataclass
class ConstrainedTarget:
    """The posterior on the flat unconstrained vector u (Stan's transforms: ``biject_to``).

    ``log_density(u)`` = log p(T(u)) + log|det J_T(u)| at ``u [..., P]``; ``energy`` is it as an
    structmc energy; ``constrained(u [..., P])`` the named constrained parameters;
    ``unconstrained(p)`` the inverse."""

    energy: sm.LogDensityEnergy
    log_density: Callable[[Tensor], Tensor]
    constrained: Callable[[Tensor], dict[str, Tensor]]
    unconstrained: Callable[[dict[str, Tensor]], Tensor]
    dim: int


def constrained_log_density_energy(
    log_prob: Callable[[dict[str, Tensor], object], Tensor],
    params: dict[str, tuple[int, ...]],
    constraints: dict[str, Constraint],
    num_data: int | None = None,
    jacobian: bool = True,
) -> ConstrainedTarget:
    """Local stand-in for ``sm.LogDensityEnergy(log_prob, params=..., constraints=...,
    num_data=...)`` (issue 39, in progress): samples in the unconstrained space, u ↦ θ = T(u) with
    T = ``biject_to(constraint)`` per parameter, the target log p(T(u)) + Σ log|det J_T(u)|.
    Elementwise constraints only (real, positive, intervals). ``jacobian=False`` leaves the
    Jacobian out: a wrong posterior, which the tests use to show their checks can fail."""
    if set(params) != set(constraints):
        raise ValueError(
            f"params and constraints must name the same parameters: {sorted(params)} vs {sorted(constraints)}"
        )
    transforms, slices, start = {}, {}, 0
    for name, shape in params.items():
        t = biject_to(constraints[name])
        if t.domain.event_dim != 0 or t.codomain.event_dim != 0:
            raise NotImplementedError(f"{name}: only elementwise constraints in this stand-in")
        size = math.prod(shape)
        transforms[name], slices[name] = t, (start, start + size, tuple(shape))
        start += size
    dim = start

    def constrained(u: Tensor) -> dict[str, Tensor]:
        return {
            n: transforms[n](u[..., a:b].reshape(tuple(u.shape[:-1]) + shape)) for n, (a, b, shape) in slices.items()
        }

    def unconstrained(p: dict[str, Tensor]) -> Tensor:
        return torch.cat([transforms[n].inv(torch.as_tensor(p[n], dtype=DTYPE)).reshape(-1) for n in params])

    def log_density(u: Tensor, batch=None) -> Tensor:
        """At ``u [..., P]``: ``[...]``."""
        p, log_jac = {}, u.new_zeros(u.shape[:-1])
        for n, (a, b, shape) in slices.items():
            x = u[..., a:b].reshape(tuple(u.shape[:-1]) + shape)
            p[n] = transforms[n](x)
            if jacobian:
                log_jac = log_jac + transforms[n].log_abs_det_jacobian(x, p[n]).reshape(*u.shape[:-1], -1).sum(-1)
        return log_prob(p, batch) + log_jac

    # vectorized: log_prob takes the chains' [C] batch of each parameter at once (the densities
    # of POSTERIORS are written for any leading batch shape)
    energy = sm.LogDensityEnergy(log_density, dim, num_data=num_data, vectorized=True)
    return ConstrainedTarget(energy, log_density, constrained, unconstrained, dim)


def make_target(post: Posterior, data: dict[str, Tensor], jacobian: bool = True) -> ConstrainedTarget:
    """The posterior ``post`` on ``data`` (full batch: the data are bound, ``batch`` is unused)."""
    return constrained_log_density_energy(
        lambda p, batch: post.log_density(p, data),
        post.params,
        post.constraints,
        num_data=post.num_data(data),
        jacobian=jacobian,
    )


# ---------------------------------------------------------------------------------------------
# mode, curvature, the step-size rule
# ---------------------------------------------------------------------------------------------
@dataclass
class Laplace:
    mode: Tensor  # [P] unconstrained
    hessian: Tensor  # [P, P] of U = -log density
    chol_cov: Tensor  # chol(H^-1)
    lam_max: float
    lam_min: float


def laplace(target: ConstrainedTarget, max_iter: int = 2000) -> Laplace:
    """Mode of the unconstrained log density (L-BFGS from u = 0) and the Hessian of U there."""
    u = torch.zeros(target.dim, dtype=DTYPE, requires_grad=True)
    opt = torch.optim.LBFGS([u], lr=1.0, max_iter=max_iter, tolerance_grad=1e-9, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = -target.log_density(u)
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    mode = u.detach()
    H = torch.autograd.functional.hessian(lambda v: -target.log_density(v), mode)
    H = (H + H.T) / 2
    lam = torch.linalg.eigvalsh(H)
    if not bool(lam[0] > 0):
        raise RuntimeError(f"the Hessian at the mode is not positive definite (smallest eigenvalue {lam[0]:.3g})")
    chol_cov = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)))
    return Laplace(mode, H, chol_cov, float(lam[-1]), float(lam[0]))


def step_sizes(lap: Laplace, num_data: int) -> dict[str, dict]:
    """The stated rule (module docstring): every step from the curvature at the mode."""
    eta = 0.1 / lap.lam_max
    friction = min(max(2 * math.sqrt(eta * lap.lam_min), 0.001), 0.5)
    g = num_data / lap.hessian.diagonal().sqrt()  # pSGLD's preconditioner at the posterior
    pre = g.sqrt()[:, None] * lap.hessian * g.sqrt()[None, :]
    lam_pre = torch.linalg.eigvalsh(pre)
    psgld_eps = 0.25 / float(lam_pre[-1])
    return {
        "SGLD large": {"lr": 1.0 / lap.lam_max},
        "SGLD small": {"lr": 0.25 / lap.lam_max},
        "SGHMC": {"lr": eta, "friction": friction},
        "pSGLD": {"lr": psgld_eps, "num_data": num_data, "kappa_preconditioned": float(lam_pre[-1] / lam_pre[0])},
        "MALA": {"proposal_var": 1.65**2 / lap.mode.numel() ** (1 / 3), "target_accept": 0.57},
    }


# ---------------------------------------------------------------------------------------------
# one run, its summary
# ---------------------------------------------------------------------------------------------
def run_sampler(
    kind: str,
    target: ConstrainedTarget,
    lap: Laplace,
    settings: dict,
    *,
    chains: int,
    burn_in: int,
    draws: int,
    seed: int,
) -> tuple[dict[str, Tensor], dict]:
    """``chains`` chains of sampler ``kind``; returns the constrained draws ``{name: [C, S, ...]}``
    and run facts (wall time, MALA's acceptance)."""
    gen = torch.Generator().manual_seed(seed)
    # near the mode: 0.1 × a draw of the Laplace approximation per chain (a full draw can land
    # deep in a funnel, eight schools' small τ, where one global MALA step size is stuck)
    z0 = 0.1 * torch.randn(chains, target.dim, generator=gen, dtype=DTYPE)
    steps = burn_in + draws
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings: the table is the verdict
        if kind == "MALA":
            u, accept = _whitened_mala(
                target, lap, settings, z0, chains=chains, burn_in=burn_in, draws=draws, seed=seed
            )
            facts = {"accept": accept}
        else:
            init = lap.mode + z0 @ lap.chol_cov.T
            if kind.startswith("SGLD"):
                sampler = sm.SGLD(settings["lr"])
            elif kind == "SGHMC":
                sampler = sm.SGHMC(settings["lr"], settings["friction"])
            elif kind == "pSGLD":
                sampler = sm.PSGLD(settings["lr"], num_data=settings["num_data"])
            else:
                raise ValueError(kind)
            chain = sm.sample(
                target.energy, init, sampler, steps, burn_in=burn_in, seed=seed, num_chains=chains, progress=False
            )
            u = chain.samples
            facts = {}
    facts["seconds"] = time.perf_counter() - t0
    facts["cpu_seconds"] = time.process_time() - c0
    facts["finite"] = bool(torch.isfinite(u).all())
    return target.constrained(u), facts


def _whitened_mala(target, lap, settings, z0, *, chains, burn_in, draws, seed) -> tuple[Tensor, float]:
    """Full-batch MALA (one block) on z with u = m + L z, an exact Metropolis kernel whatever m, L.
    The first half of burn-in whitens with the Laplace approximation (m, L) = (mode, chol H⁻¹);
    the second with the mean and covariance of the last half of those draws (pooled over chains),
    as the mode and curvature can be far from the posterior's (eight schools' joint mode has τ ≈
    29 where its mean is 3.6). The proposal variance adapts toward 57% acceptance in each burn-in
    phase and is frozen for the draws. Returns u ``[C, draws, P]`` and the draws' acceptance."""
    first = burn_in // 2

    def run(m, L, z, steps, adapt_steps, keep_from, seed_):
        energy = sm.LogDensityEnergy(lambda w, b: target.log_density(m + w @ L.T), target.dim, vectorized=True)
        sampler = MetropolisWithinGibbs(
            fully_joint(target.dim),
            settings["proposal_var"],
            mala=True,
            adapt=Adapt(adapt_steps, target=settings["target_accept"], by="block"),
        )
        chain = sm.sample(energy, z, sampler, steps, burn_in=keep_from, seed=seed_, num_chains=chains, progress=False)
        return m + chain.samples @ L.T, chain

    u1, _ = run(lap.mode, lap.chol_cov, z0, first, first, 0, seed)
    pilot = u1[:, first // 2 :].reshape(-1, target.dim)
    m2 = pilot.mean(0)
    cov = torch.cov(pilot.T) + 1e-10 * torch.eye(target.dim, dtype=DTYPE)
    L2 = torch.linalg.cholesky(cov)
    z1 = torch.linalg.solve_triangular(L2, (u1[:, -1] - m2).T, upper=False).T
    rest = burn_in - first
    u, chain = run(m2, L2, z1, rest + draws, rest, rest, seed + 1)
    accept = chain.info["accept"].to(DTYPE)[..., rest:].mean().item()  # [C, blocks, iterations]
    return u, accept


def summarise(quantities: dict[str, Tensor], ref_mean: dict[str, float], ref_sd: dict[str, float]) -> dict:
    """Mean errors in reference sd units, sd ratios and Monte Carlo errors (bulk ESS) over the
    reference's quantities (those the program defines)."""
    names = list(ref_mean)
    x = torch.stack([quantities[n] for n in names], -1)  # [C, S, K]
    mean, sd = x.mean((0, 1)), x.std((0, 1))
    rm, rs = _t([ref_mean[n] for n in names]), _t([ref_sd[n] for n in names])
    err = (mean - rm) / rs
    ratio = sd / rs
    n_eff = ess(x.float()).to(DTYPE) if bool(torch.isfinite(x).all()) else torch.full_like(err, float("nan"))
    mcse = sd / rs / n_eff.clamp(min=1).sqrt()
    worst = int(err.abs().argmax()) if bool(torch.isfinite(err).all()) else 0
    return {
        "max_abs_err": float(err.abs().max()),
        "mean_abs_err": float(err.abs().mean()),
        "worst": names[worst],
        "sd_ratio_min": float(ratio.min()),
        "sd_ratio_max": float(ratio.max()),
        "mcse_max": float(mcse.max()),
        "ess_min": float(n_eff.min()),
        "per_quantity": {n: {"err": float(e), "sd_ratio": float(r)} for n, e, r in zip(names, err, ratio)},
    }


# ---------------------------------------------------------------------------------------------
# posteriordb files
# ---------------------------------------------------------------------------------------------
class PosteriorDB:
    """Reads posteriordb's files from a checkout, its ``posterior_database`` folder or a bare git
    repository (``git show HEAD:...``)."""

    def __init__(self, path: str | os.PathLike):
        root = Path(path)
        if (root / "posterior_database").is_dir():
            root = root / "posterior_database"
        self.root = root
        self.git = not (root / "posteriors").is_dir()
        if self.git and not (root / "HEAD").exists():
            raise FileNotFoundError(f"{path}: neither a posteriordb checkout nor a bare git repository of it")

    def _read(self, rel: str) -> bytes:
        """A file under ``posterior_database/`` (``../NAME``: the repository's top level)."""
        if self.git:
            spec = rel[3:] if rel.startswith("../") else f"posterior_database/{rel}"
            return subprocess.run(
                ["git", "-C", str(self.root), "show", f"HEAD:{spec}"], check=True, capture_output=True
            ).stdout
        return (self.root / rel).read_bytes()

    def licence(self) -> str:
        try:
            return self._read("../LICENCE.md").decode()
        except (FileNotFoundError, subprocess.CalledProcessError):
            return "BSD 3-Clause License, Copyright (c) 2011-2024, Stan Developers and their Assignees (LICENCE.md not found)"

    def _json(self, rel: str):
        if rel.endswith(".zip"):
            try:
                raw = self._read(rel)
            except (FileNotFoundError, subprocess.CalledProcessError):
                return json.loads(self._read(rel[: -len(".zip")]))  # an unzipped copy
            with zipfile.ZipFile(io.BytesIO(raw)) as z:
                return json.loads(z.read(z.namelist()[0]))
        return json.loads(self._read(rel))

    def commit(self) -> str:
        if not self.git:
            return "unknown (a plain folder)"
        out = subprocess.run(
            ["git", "-C", str(self.root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        return out.stdout.strip()

    def posterior(self, name: str) -> dict:
        return self._json(f"posteriors/{name}.json")

    def data(self, name: str) -> dict:
        return self._json(f"data/data/{self.posterior(name)['data_name']}.json.zip")

    def reference(self, name: str) -> tuple[dict[str, float], dict[str, float], dict]:
        """Means and sds over all reference draws (10 chains × 1,000), per quantity."""
        rel = f"reference_posteriors/draws/draws/{name}.json.zip"
        chains = self._json(rel)
        means, sds = {}, {}
        for key in chains[0]:
            x = torch.tensor([c[key] for c in chains], dtype=DTYPE)
            means[key], sds[key] = float(x.mean()), float(x.std())
        return means, sds, {"file": f"posterior_database/{rel}", "chains": len(chains), "draws": len(chains[0][key])}


def reference_for(post: Posterior, data: dict[str, Tensor], means: dict, sds: dict) -> tuple[dict, dict]:
    """The reference's quantities that the PyTorch program defines (e.g. diamonds' generated
    b_Intercept is not one)."""
    probe = post.quantities({n: torch.ones(s, dtype=DTYPE) * 0.5 for n, s in post.params.items()}, data)
    missing = [n for n in probe if n not in means]
    if missing:
        raise KeyError(f"{post.name}: quantities {missing} are not in the reference draws")
    return {n: means[n] for n in probe}, {n: sds[n] for n in probe}


# ---------------------------------------------------------------------------------------------
# the suite
# ---------------------------------------------------------------------------------------------
def run_posterior(post: Posterior, data: dict, ref_mean: dict, ref_sd: dict, *, chains, burn_in, draws, seed) -> dict:
    target = make_target(post, data)
    lap = laplace(target)
    rule = step_sizes(lap, post.num_data(data))
    out = {
        "kind": post.kind,
        "dim": target.dim,
        "num_data": post.num_data(data),
        "kappa": lap.lam_max / lap.lam_min,
        "lam_max": lap.lam_max,
        "note": post.note,
        "samplers": {},
    }
    for i, kind in enumerate(SAMPLERS):
        draws_c, facts = run_sampler(
            kind, target, lap, rule[kind], chains=chains, burn_in=burn_in, draws=draws, seed=seed + 1000 * i
        )
        summary = summarise(post.quantities(draws_c, data), ref_mean, ref_sd) if facts["finite"] else {}
        out["samplers"][kind] = {"settings": rule[kind], **facts, **summary}
        print(_row(post.name, kind, out["samplers"][kind], out["kappa"]), flush=True)
    return out


def _fmt(x: float) -> str:
    return "nan" if x != x else (f"{x:.2g}" if abs(x) < 0.01 or abs(x) >= 1000 else f"{x:.3f}".rstrip("0").rstrip("."))


def _row(name: str, kind: str, s: dict, kappa: float) -> str:
    if not s.get("finite", False):
        return f"| {name} | {_fmt(kappa)} | {kind} | {_fmt(s['settings'].get('lr', float('nan')))} | diverged | | | | | | {s['seconds']:.1f} |"
    lr = s["settings"].get("lr", s["settings"].get("proposal_var"))
    acc = f"{s['accept']:.2f}" if "accept" in s else ""
    # a miss within 3 Monte Carlo standard errors (of the worst-determined mean) is noise: the run
    # is too short for that sampler; beyond, the sampler is biased (or has not mixed at all)
    if s["max_abs_err"] <= 0.1:
        ok = "yes"
    elif s["sd_ratio_min"] < 0.5:  # started 0.1 posterior sd around the mode, still that narrow
        ok = "**no: not mixed**"
    elif s["max_abs_err"] <= 3 * s["mcse_max"]:
        ok = "no: MC noise"
    else:
        ok = "**no: bias**"
    return (
        f"| {name} | {_fmt(kappa)} | {kind} | {_fmt(lr)} | {s['max_abs_err']:.3f} ({s['worst']}) | "
        f"{s['mean_abs_err']:.3f} | {s['sd_ratio_min']:.2f}–{s['sd_ratio_max']:.2f} | {s['mcse_max']:.3f} | "
        f"{ok} | {acc} | {s['cpu_seconds']:.0f} |"
    )


HEADER = (
    "| posterior | κ | sampler | ε (MALA: σ²₀) | max abs mean error / sd (worst) | mean abs error / sd | sd ratio | "
    "max MC se / sd | ≤ 0.1 | MALA accept | CPU s |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def render(paths: list[str]) -> str:
    """The markdown table of one or several results files (runs split over processes by --only)."""
    found, protocols = {}, set()
    for path in paths:
        res = json.loads(Path(path).read_text())
        protocols.add(json.dumps(res["protocol"], sort_keys=True))
        found.update(res["posteriors"])
    if len(protocols) != 1:
        raise ValueError(f"the files ran different protocols: {protocols}")
    rows = [HEADER]
    for name in sorted(found, key=lambda n: list(POSTERIORS).index(n) if n in POSTERIORS else len(POSTERIORS)):
        rows += [_row(name, kind, s, found[name]["kappa"]) for kind, s in found[name]["samplers"].items()]
    return "\n".join(rows)


def write_fixtures(db: PosteriorDB, path: Path) -> None:
    """The two small posteriors the tests run: data and reference means/sds, with provenance."""
    out = {
        "provenance": (
            f"posteriordb (https://github.com/stan-dev/posteriordb, BSD 3-Clause licence, commit {db.commit()}): "
            "posterior_database/data/data/<data>.json.zip and posterior_database/reference_posteriors/draws/draws/"
            "<posterior>.json.zip; reference mean and sd (N - 1) over all 10 chains x 1,000 reference draws, per quantity; "
            "written by bench/gold_standard.py --write-fixtures"
        ),
        "licence": db.licence(),
        "data_sources": (
            "eight schools: Rubin (1981), J. Educational Statistics 6(4); earnings: Gelman & Hill (2007), "
            "Data Analysis Using Regression and Multilevel/Hierarchical Models, as distributed by posteriordb"
        ),
        "posteriors": {},
    }
    for post in (EIGHT_SCHOOLS, EARNINGS):
        means, sds, info = db.reference(post.name)
        out["posteriors"][post.name] = {
            "data_file": f"posterior_database/data/data/{db.posterior(post.name)['data_name']}.json.zip",
            "reference_file": info["file"],
            "data": db.data(post.name),
            "reference_mean": means,
            "reference_sd": sds,
        }
    path.write_text(json.dumps(out, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--posteriordb", default=os.environ.get("STRUCTMC_POSTERIORDB"), help="posteriordb checkout or bare git repo"
    )
    ap.add_argument("--only", nargs="*", help="posterior names (default: all eight)")
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--burn-in", type=int, default=500)
    ap.add_argument("--draws", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--write-fixtures", help="write the tests' fixture JSON here and exit")
    ap.add_argument("--render", nargs="+", help="print the markdown table of these results files and exit")
    args = ap.parse_args(argv)
    if args.render:
        print(render(args.render))
        return 0
    if not args.posteriordb:
        ap.error("give --posteriordb PATH or set STRUCTMC_POSTERIORDB")
    torch.set_num_threads(args.threads)
    db = PosteriorDB(args.posteriordb)
    if args.write_fixtures:
        write_fixtures(db, Path(args.write_fixtures))
        return 0
    names = args.only or list(POSTERIORS)
    unknown = [n for n in names if n not in POSTERIORS]
    if unknown:
        ap.error(f"unknown posteriors {unknown}; known: {list(POSTERIORS)}")
    t0 = time.perf_counter()
    results = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "posteriordb_commit": db.commit(),
        "structmc_commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
        ).stdout.strip(),
        "machine": f"{platform.machine()} {platform.processor() or ''} torch {torch.__version__}, {args.threads} thread(s)",
        "protocol": {
            "temperature": 1.0,
            "chains": args.chains,
            "burn_in": args.burn_in,
            "draws": args.draws,
            "seed": args.seed,
        },
        "posteriors": {},
    }
    print(HEADER)
    for name in names:
        k = list(POSTERIORS).index(name)  # the seed follows the posterior, not the order of --only
        post = POSTERIORS[name]
        data = post.prepare(db.data(name))
        means, sds, _ = db.reference(name)
        ref_mean, ref_sd = reference_for(post, data, means, sds)
        results["posteriors"][name] = run_posterior(
            post,
            data,
            ref_mean,
            ref_sd,
            chains=args.chains,
            burn_in=args.burn_in,
            draws=args.draws,
            seed=args.seed + 10 * k,
        )
        if args.out:  # after each posterior: a long run interrupted keeps what it finished
            Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    results["seconds"] = time.perf_counter() - t0
    results["cpu_seconds"] = time.process_time()
    print(f"total {results['seconds']:.0f} s wall, {results['cpu_seconds']:.0f} s CPU")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
