"""The linear-regression data set of Alexos, Boyd & Mandt (2022), Fig. 2, shared by the
experiments that use it (``ssgmcmc-linreg``, ``ssgmcmc-theorem1``).

Model (the paper's): y = wᵀx + b + N(0, 1), w = [1.5, −0.8, 1.3], b = 0.5, 100 points, known
σ² = 1, N(0, 1) priors, θ = [w1, w2, w3, b]. The paper reports the MAP ≈ [0.52, 0.31, 0.47,
0.84]; its covariate law is in a supplement we do not have, so the covariates are drawn from
the Gaussian nearest N(0, I) whose expected exact MAP is the paper's
(:func:`fit_covariate_law`), and the data seed is the one whose exact MAP is nearest the
paper's (:func:`paper_like_data`).
"""

from __future__ import annotations

import torch

NAMES = ["w1", "w2", "w3", "b"]
TRUTH = (1.5, -0.8, 1.3, 0.5)
PAPER_MAP = (0.52, 0.31, 0.47, 0.84)


def _second_moment(mu: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    S = L @ L.T
    M = torch.zeros(4, 4, dtype=mu.dtype)
    M[:3, :3] = S + torch.outer(mu, mu)
    M[:3, 3] = M[3, :3] = mu
    M[3, 3] = 1
    return M


def expected_map(mu: torch.Tensor, cov: torch.Tensor, num_data: int = 100) -> torch.Tensor:
    """E-data approximation of the exact MAP: (M + I/N)⁻¹ M θ_true."""
    M = _second_moment(mu, torch.linalg.cholesky(cov))
    theta = torch.tensor(TRUTH, dtype=mu.dtype)
    return torch.linalg.solve(M + torch.eye(4, dtype=mu.dtype) / num_data, M @ theta)


def fit_covariate_law(num_data: int = 100, target=PAPER_MAP) -> tuple[torch.Tensor, torch.Tensor]:
    """``(μ [3], Σ [3, 3])``: the Gaussian nearest N(0, I) whose expected exact MAP is
    ``target`` (a penalty of 10⁶ on the squared MAP error, L-BFGS in float64 from N(0, I))."""
    dt = torch.float64
    theta, m = torch.tensor(TRUTH, dtype=dt), torch.tensor(target, dtype=dt)
    mu = torch.zeros(3, dtype=dt, requires_grad=True)
    raw = torch.eye(3, dtype=dt).requires_grad_(True)
    opt = torch.optim.LBFGS(
        [mu, raw],
        max_iter=300,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-12,
        tolerance_change=1e-14,
        history_size=20,
    )

    def loss():
        opt.zero_grad()
        L = torch.tril(raw)
        M = _second_moment(mu, L)
        err = torch.linalg.solve(M + torch.eye(4, dtype=dt) / num_data, M @ theta) - m
        value = 1e6 * (err**2).sum() + ((L @ L.T - torch.eye(3, dtype=dt)) ** 2).sum() + (mu**2).sum()
        value.backward()
        return value

    opt.step(loss)  # ~375 evaluations, 0.2 s: the expected MAP matches to 1e-7
    L = torch.tril(raw).detach()
    return mu.detach(), L @ L.T


def paper_like_data(cfg) -> dict:
    """The data set: covariates from :func:`fit_covariate_law`, the data seed among
    ``0..cfg.seed_search − 1`` whose exact MAP is nearest the paper's (first one on ties);
    ``cfg`` has ``num_data`` and ``seed_search``."""
    mu, cov = fit_covariate_law(cfg.num_data)
    L = torch.linalg.cholesky(cov)
    theta = torch.tensor(TRUTH, dtype=torch.float64)
    best = None
    for seed in range(max(1, cfg.seed_search)):
        g = torch.Generator().manual_seed(seed)
        x = mu + torch.randn(cfg.num_data, 3, generator=g, dtype=torch.float64) @ L.T
        y = x @ theta[:3] + theta[3] + torch.randn(cfg.num_data, generator=g, dtype=torch.float64)
        A = torch.cat([x, torch.ones(cfg.num_data, 1, dtype=x.dtype)], 1)
        precision = A.T @ A + torch.eye(4, dtype=x.dtype)
        post_mean = torch.linalg.solve(precision, A.T @ y)
        dist = float((post_mean - torch.tensor(PAPER_MAP, dtype=x.dtype)).norm())
        if best is None or dist < best["distance"]:
            best = {
                "x": x,
                "y": y.unsqueeze(1),
                "precision": precision,
                "mean": post_mean,
                "distance": dist,
                "data_seed": seed,
            }
    assert best is not None  # at least one seed was tried
    best.update(mu=mu, cov=cov)
    return best
