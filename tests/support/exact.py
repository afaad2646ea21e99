r"""Exact stationary moments of linear SGMCMC recursions, for the statistical sampler tests.

A random affine recursion

.. math::  z_{t+1} = A_b z_t + c_b + B\xi_t, \qquad b \sim \text{i.i.d. over a finite set},\ \xi_t\sim N(0, I)

has (when stable) a unique stationary law whose first two moments are

.. math::
    \mu &= (I - E[A])^{-1} E[c] \\
    M &= E[A M A^\top] + E[A\mu c^\top + c\mu^\top A^\top] + E[cc^\top] + BB^\top, \qquad
    \Sigma = M - \mu\mu^\top

(``b`` and ``ξ`` are drawn independently of the current state). ``M`` is found by
vectorising: ``vec(A M Aᵀ) = (A ⊗ A) vec(M)`` for a row-major ``vec``.

SGLD / SGHMC with a plain minibatch or a control-variate gradient on Bayesian linear
regression are exactly such recursions, because the minibatch gradient is affine in θ:
``∇Û_b(θ) = H_b θ - r_b`` with ``H_b = (N/n) Σ_{i∈b} x_i x_iᵀ/σ² + I/σ0²`` and
``r_b = (N/n) Σ_{i∈b} x_i y_i/σ²``. All minibatches of a tiny data set are enumerated, so
the answer includes the discretisation error *and* the minibatch noise, with no
approximation. Everything is float64 numpy.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch


# ---------------------------------------------------------------------------------------
# The generic calculator
# ---------------------------------------------------------------------------------------
@dataclass
class AffineRecursion:
    """``z' = A[b] z + c[b] + B ξ`` with ``b`` drawn with probabilities ``probs``."""

    A: np.ndarray  # [K, D, D]
    c: np.ndarray  # [K, D]
    B: np.ndarray  # [D, m]
    probs: np.ndarray  # [K]

    def __post_init__(self):
        self.A = np.asarray(self.A, dtype=np.float64)
        self.c = np.asarray(self.c, dtype=np.float64)
        self.B = np.asarray(self.B, dtype=np.float64)
        self.probs = np.asarray(self.probs, dtype=np.float64)
        K, D, _ = self.A.shape
        assert self.c.shape == (K, D) and self.B.shape[0] == D and self.probs.shape == (K,)
        assert abs(self.probs.sum() - 1) < 1e-12 and (self.probs >= 0).all()

    @property
    def dim(self) -> int:
        return self.A.shape[1]

    def mean_contraction(self) -> float:
        """Spectral radius of E[A] (< 1 is needed for the mean to exist)."""
        return float(np.abs(np.linalg.eigvals(np.einsum("k,kij->ij", self.probs, self.A))).max())

    def second_moment_contraction(self) -> float:
        """Spectral radius of E[A ⊗ A] (< 1 is needed for a finite stationary covariance)."""
        AA = np.einsum("k,kij,klm->iljm", self.probs, self.A, self.A).reshape(self.dim**2, self.dim**2)
        return float(np.abs(np.linalg.eigvals(AA)).max())

    def fourth_moment_contraction(self) -> float:
        """Spectral radius of E[A⊗A⊗A⊗A] (< 1: finite stationary 4th moments, so the sample
        second moments have finite variance and their standard errors mean something)."""
        D = self.dim
        A2 = np.einsum("kij,klm->kiljm", self.A, self.A).reshape(-1, D * D, D * D)
        AAAA = np.einsum("k,kij,klm->iljm", self.probs, A2, A2).reshape(D**4, D**4)
        return float(np.abs(np.linalg.eigvals(AAAA)).max())

    def max_norm(self) -> float:
        """max_b ||A_b||₂: < 1 means every step contracts (all moments finite, light tails)."""
        return float(max(np.linalg.norm(a, 2) for a in self.A))

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Stationary (mean [D], covariance [D, D])."""
        D, p, A, c = self.dim, self.probs, self.A, self.c
        if self.second_moment_contraction() >= 1:
            raise ValueError("the recursion has no stationary second moment (E[A⊗A] not contracting)")
        EA = np.einsum("k,kij->ij", p, A)
        Ec = p @ c
        mu = np.linalg.solve(np.eye(D) - EA, Ec)
        Amu = np.einsum("kij,j->ki", A, mu)  # A_b μ
        cross = np.einsum("k,ki,kj->ij", p, Amu, c)  # E[A μ cᵀ]
        rhs = cross + cross.T + np.einsum("k,ki,kj->ij", p, c, c) + self.B @ self.B.T
        # vec(A M Aᵀ)_{(i,j)} = Σ_{l,m} A_il A_jm M_lm  (row-major vec)
        AA = np.einsum("k,kil,kjm->ijlm", p, A, A).reshape(D * D, D * D)
        M = np.linalg.solve(np.eye(D * D) - AA, rhs.reshape(-1)).reshape(D, D)
        M = 0.5 * (M + M.T)
        return mu, M - np.outer(mu, mu)

    def without_batch_noise(self) -> AffineRecursion:
        """The same recursion with (A, c) replaced by their means (full-batch gradients)."""
        return AffineRecursion(
            np.einsum("k,kij->ij", self.probs, self.A)[None], (self.probs @ self.c)[None], self.B, np.ones(1)
        )

    def with_noise_scale(self, factor: float) -> AffineRecursion:
        """The same recursion with the injected noise covariance BBᵀ multiplied by ``factor``."""
        return AffineRecursion(self.A, self.c, self.B * math.sqrt(factor), self.probs)


# ---------------------------------------------------------------------------------------
# Minibatches and Bayesian linear regression
# ---------------------------------------------------------------------------------------
def enumerate_batches(N: int, n: int, batching: str) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """All minibatches (index tuples) and their probabilities.

    ``"without_replacement"``: every size-n subset, probability 1/C(N, n);
    ``"with_replacement"``: every ordered n-tuple of indices, probability N^{-n}.
    """
    if batching == "without_replacement":
        batches = list(itertools.combinations(range(N), n))
    elif batching == "with_replacement":
        batches = list(itertools.product(range(N), repeat=n))
    else:
        raise ValueError(f"no i.i.d. batch law for batching={batching!r}")
    return batches, np.full(len(batches), 1.0 / len(batches))


@dataclass
class LinearRegression:
    """Bayesian linear regression y ~ N(Xθ, σ²), θ ~ N(0, σ0² I) (no bias)."""

    X: np.ndarray  # [N, d]
    y: np.ndarray  # [N]
    noise_std: float
    prior_std: float

    def __post_init__(self):
        self.X = np.asarray(self.X, dtype=np.float64)
        self.y = np.asarray(self.y, dtype=np.float64)

    @property
    def N(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    def hessian(self, idx=None, n: int | None = None) -> np.ndarray:
        """H_b = (N/n) Σ_{i∈b} x_i x_iᵀ/σ² + I/σ0² (full data when ``idx`` is None)."""
        X = self.X if idx is None else self.X[list(idx)]
        scale = 1.0 if idx is None else self.N / len(idx)
        return scale * X.T @ X / self.noise_std**2 + np.eye(self.d) / self.prior_std**2

    def shift(self, idx=None) -> np.ndarray:
        """r_b = (N/n) Σ_{i∈b} x_i y_i/σ², so that ∇Û_b(θ) = H_b θ - r_b."""
        X = self.X if idx is None else self.X[list(idx)]
        y = self.y if idx is None else self.y[list(idx)]
        scale = 1.0 if idx is None else self.N / len(idx)
        return scale * X.T @ y / self.noise_std**2

    def grad(self, theta, idx=None) -> np.ndarray:
        return self.hessian(idx) @ theta - self.shift(idx)

    def posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """Exact posterior (mean, covariance)."""
        H = self.hessian()
        cov = np.linalg.inv(H)
        return cov @ self.shift(), cov

    def batch_terms(self, n: int, batching: str, *, scaled: bool = True):
        """(H_b [K, d, d], r_b [K, d], probs [K]) over every minibatch.

        ``scaled=False`` drops the N/n factor (what an energy that forgot it would use).
        """
        batches, probs = enumerate_batches(self.N, n, batching)
        H = np.stack([self.hessian(b) for b in batches])
        r = np.stack([self.shift(b) for b in batches])
        if not scaled:
            prior = np.eye(self.d) / self.prior_std**2
            H = (H - prior) * n / self.N + prior
            r = r * n / self.N
        return H, r, probs


# ---------------------------------------------------------------------------------------
# Samplers as affine recursions
# ---------------------------------------------------------------------------------------
def _cv_terms(H, r, model: LinearRegression, centre):
    """Control variate: ∇ = ∇U(θ̂) + ∇Û_b(θ) - ∇Û_b(θ̂) = H_b θ - (H_b θ̂ - ∇U(θ̂)) =: H_b θ - r̃_b."""
    centre = np.asarray(centre, dtype=np.float64)
    full_grad = model.grad(centre)
    r_cv = np.einsum("kij,j->ki", H, centre) - full_grad
    return H, r_cv


def sgld_recursion(
    model: LinearRegression,
    lr: float,
    n: int,
    *,
    temperature: float = 1.0,
    batching: str = "without_replacement",
    centre=None,
    scaled: bool = True,
) -> AffineRecursion:
    """SGLD θ' = θ - (ε/2)(H_b θ - r_b) + √(εT) ξ; with ``centre`` the SGLD-CV gradient."""
    H, r, probs = model.batch_terms(n, batching, scaled=scaled)
    if centre is not None:
        H, r = _cv_terms(H, r, model, centre)
    d = model.d
    A = np.eye(d)[None] - 0.5 * lr * H
    c = 0.5 * lr * r
    return AffineRecursion(A, c, math.sqrt(lr * temperature) * np.eye(d), probs)


def sghmc_recursion(
    model: LinearRegression,
    lr: float,
    friction: float,
    n: int,
    *,
    temperature: float = 1.0,
    beta_hat: float = 0.0,
    batching: str = "without_replacement",
    centre=None,
    scaled: bool = True,
) -> AffineRecursion:
    r"""SGHMC on the state z = (θ, v):

    v' = (1-α) v - η(H_b θ - r_b) + N(0, 2(α-β̂)ηT),  θ' = θ + v'
    => θ' = (I - ηH_b)θ + (1-α)v + η r_b + s ξ,   v' = -ηH_b θ + (1-α)v + η r_b + s ξ
    (the same ξ in both rows).
    """
    H, r, probs = model.batch_terms(n, batching, scaled=scaled)
    if centre is not None:
        H, r = _cv_terms(H, r, model, centre)
    d, K = model.d, H.shape[0]
    eye = np.eye(d)
    A = np.zeros((K, 2 * d, 2 * d))
    A[:, :d, :d] = eye - lr * H
    A[:, :d, d:] = (1 - friction) * eye
    A[:, d:, :d] = -lr * H
    A[:, d:, d:] = (1 - friction) * eye
    c = np.concatenate([lr * r, lr * r], axis=1)
    s = math.sqrt(2 * (friction - beta_hat) * lr * temperature)
    B = np.concatenate([s * eye, s * eye], axis=0)
    return AffineRecursion(A, c, B, probs)


def gaussian_sghmc_recursion(h: float, lr: float, friction: float, noise_var: float, shift_var: float = 0.0):
    r"""One coordinate of SGHMC on U(θ) = hθ²/2 with additive gradient noise of variance
    ``shift_var`` (∇Û_b = hθ - r_b, Var r_b = shift_var, E r_b = 0) and injected noise
    variance ``noise_var`` (= 2aηT for SGNHT, 2(α-β̂)ηT for SGHMC). Two-point law for r_b
    (only its first two moments matter)."""
    s = math.sqrt(shift_var)
    A = np.array([[1 - lr * h, 1 - friction], [-lr * h, 1 - friction]])
    c = np.array([[lr * s, lr * s], [-lr * s, -lr * s]])
    B = math.sqrt(noise_var) * np.ones((2, 1))
    return AffineRecursion(np.stack([A, A]), c, B, np.array([0.5, 0.5]))


def sgld_gaussian_variance(h: float, lr: float, precond: float = 1.0, temperature: float = 1.0) -> float:
    """Stationary variance of θ' = θ - (ε/2)Ghθ + N(0, εTG) (fixed preconditioner G)."""
    a = 1 - 0.5 * lr * precond * h
    return lr * temperature * precond / (1 - a * a)


def sgld_gaussian_covariance(precision: np.ndarray, lr: float, temperature: float = 1.0) -> np.ndarray:
    """Stationary covariance of full-gradient SGLD on N(μ, Λ⁻¹):
    θ' = θ − (ε/2)Λ(θ − μ) + √(εT) ξ, i.e. V = (I − εΛ/2) V (I − εΛ/2) + εT I."""
    precision = np.asarray(precision, dtype=np.float64)
    D = precision.shape[0]
    A = (np.eye(D) - 0.5 * lr * precision)[None]
    return AffineRecursion(A, np.zeros((1, D)), math.sqrt(lr * temperature) * np.eye(D), np.ones(1)).moments()[1]


# ---------------------------------------------------------------------------------------
# Structured SGLD (S-SGLD) on a Gaussian target
# ---------------------------------------------------------------------------------------
F64 = torch.float64


def discretised_structured_covariance(precision: torch.Tensor, part, eps: float, iters: int = 3000):
    """Stationary covariance of S-SGLD on N(μ, Λ⁻¹) when θ̃ are independent stationary draws:
    θ_i' = θ_i − (ε/2)[Λ_ii(θ_i−μ_i) + Λ_i,−i(θ̃_−i−μ_−i)] + √ε ξ, with θ̃ groups drawn at
    independent times (cross-group covariance 0 inside θ̃). Fixed point by iteration."""
    P = precision.shape[0]
    groups = [part.members(g) for g in range(part.num_groups)]
    V = torch.zeros(P, P, dtype=F64)
    for _ in range(iters):
        Vblock = torch.zeros_like(V)
        for idx in groups:
            Vblock[idx.unsqueeze(1), idx] = V[idx.unsqueeze(1), idx]
        new = torch.zeros_like(V)
        for idx in groups:
            rest = torch.tensor([j for j in range(P) if j not in set(idx.tolist())], dtype=torch.long)
            A = torch.eye(len(idx), dtype=F64) - 0.5 * eps * precision[idx][:, idx]
            B = precision[idx][:, rest]
            extra = (0.5 * eps) ** 2 * B @ Vblock[rest.unsqueeze(1), rest] @ B.T
            Vi = V[idx.unsqueeze(1), idx]
            new[idx.unsqueeze(1), idx] = A @ Vi @ A.T + eps * torch.eye(len(idx), dtype=F64) + extra
        V = new
    return V
