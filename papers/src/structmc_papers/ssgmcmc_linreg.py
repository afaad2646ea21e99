"""Fig. 2 of Alexos, Boyd & Mandt (2022): SGLD vs S-SGLD vs Sd-SGLD on a 3-coefficient
Bayesian linear regression, where the exact posterior and every exact structured optimum
are known in closed form.

Model (the paper's): y = wᵀx + b + N(0, 1), w = [1.5, −0.8, 1.3], b = 0.5, 100 points, known
σ² = 1, N(0, 1) priors, θ = [w1, w2, w3, b]. The paper reports the MAP ≈ [0.52, 0.31, 0.47,
0.84], far from the truth, so its covariates were correlated (their law is in a supplement we
do not have). Rule used here: x ~ N(μ, Σ) with (μ, Σ) the Gaussian nearest N(0, I) (least
‖Σ − I‖²_F + ‖μ‖²) under which the expected exact MAP, (M + I/N)⁻¹Mθ with M = E[[x,1][x,1]ᵀ],
equals the paper's MAP (:func:`fit_covariate_law`; the fit leaves Σ one direction of variance
≈ 0.001, so x nearly lies on a plane); then, among data seeds 0..``seed_search − 1``, the data
set whose exact MAP is nearest the paper's (:func:`paper_like_data`). The report states the
law, the seed and the distance. Under this law the exact posterior has corr(w1, w2) ≈ −0.96,
the dependence the paper's SGLD panel shows and S-SGLD removes.

Scenarios: SGLD; S-SGLD with groups {[w1, w2], [w3, b]} and {w1}, {w2}, {w3}, {b}; Sd-SGLD
(Bernoulli(0.5) masks, K = 4) with the same two partitions. The report compares each
scenario's sample variances and correlations with the exact posterior (SGLD) or the exact
structured optimum q = Π q_i of its partition (Theorem 1: block-diagonal precision inverse),
and checks the figure's claims; ``pairs.png`` draws (w1, w2) and (w1, w3) like the figure.

ρ sweep (Theorem 3, issue 26 §5): Sd-SGLD with the fully factorised partition at every ρ of
``rho_grid``. In the paper ρ is the probability that a group keeps the chain's current value
(r_i ~ Bernoulli(ρ), r_i = 1: θ_i is used, r_i = 0: it is replaced by θ̃_i from the history;
App. D, eq. 33), and Theorem 3 states U^(Sd) → U (SGMCMC, the posterior) as ρ → 1 and U^(Sd) →
U^(S) (S-SGMCMC, the mean field) as ρ → 0: the issue's direction (mean field at ρ → 0, posterior
at ρ → 1) is the paper's. For this Gaussian target the interpolation is exact in closed form:
with D the partition's diagonal blocks of the posterior precision Λ and O = Λ − D, the mean
over masks of Sd's gradient (scale M/(K·Mρ) = 1/(Kρ), eq. 43) is (D + ρO)(θ − μ) + (1 − ρ)O(θ̃ −
μ), so with θ̃ from the chain's own law the small-step stationary law is N(μ, (D + ρO)⁻¹)
(:func:`sd_limit_covariance`): Λ at ρ = 1, Theorem 1's mean-field optimum D⁻¹ at ρ = 0, the
precision linear in ρ between them. :func:`sd_ideal_covariance` gives the exact stationary
covariance of the discretised chain at step ε (full-batch gradients, θ̃ independent draws from
that law, the mask and θ̃-draw noise of K copies included); the two differ by < 0.01 in
corr(w1, w2) at ε = 1e-3 (minibatch noise, another O(ε) term, is not in it). On this data set
corr(w1, w2) of (D + ρO)⁻¹ is −0.034, −0.18, −0.38, −0.64, −0.90 at ρ = 0.05, 0.25, 0.5, 0.75,
0.95 (mean field 0, posterior −0.977). Measured: the within-chain corr(w1, w2) of each chain,
mean over chains ± its standard error; the pooled correlation over all chains is reported
beside it (not judged): it adds the spread of the chains' centres, which the history's slowly
relaxing mean freezes in at small ρ (the effect ssgmcmc-theorem1 measures for S-SGLD). The
sweep's chains are shorter than the main scenarios' (``sweep_steps`` × ``sweep_chains``):
quick runs 6,000 steps x 32 chains per ρ.

Step sizes: SGLD(lr=ε) in the library's convention, θ ← θ − (ε/2)∇Û + √ε ξ with Û scaled by
N/n; the paper's figure does not state its step, ε = 1e-3 is stable and mixes in the quick
preset (the stiffest direction has precision ≈ 260, ε·λ ≈ 0.26 < 2).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from structmc import SGLD, ModuleEnergy, sample
from structmc.schedules import check_int
from structmc.structured import (
    BernoulliMask,
    ChainHistory,
    StructuredEnergy,
    custom,
    fully_factorized,
    fully_joint,
    structured_optimum_gaussian,
)

from . import REGISTRY, resolve_preset

# the data construction lives in ._linreg (shared with ssgmcmc-theorem1); importable from here too
from ._linreg import NAMES, PAPER_MAP, TRUTH, _second_moment, expected_map, fit_covariate_law, paper_like_data  # noqa: F401
from ._report import Claim, Comparison, Tolerance, write_report
from ._shared import pyplot, restores_globals


@dataclass
class Config:
    num_steps: int = 20_000
    burn_in: int = 4_000
    thin: int = 5
    num_chains: int = 16
    batch_size: int = 10
    lr: float = 1e-3
    history: int = 5_000
    rho: float = 0.5
    num_copies: int = 4
    seed: int = 2
    num_data: int = 100
    seed_search: int = 300  # data seeds tried for the paper-like data set (1: use seed 0 as is)
    # Theorem 3's ρ sweep: Sd-SGLD {w1},{w2},{w3},{b} (K = num_copies) at each ρ (strictly increasing in (0, 1];
    # empty: no sweep), each run sweep_steps (burn-in sweep_burn_in) x sweep_chains, thin and history as above.
    # Rules (sweep_comparisons), fixed by the exact predictions, not by our noise: each step up the grid moves
    # corr(w1, w2) toward the posterior by > 2 combined SE; |corr(ρ_1)| <= half-way from the exact value at ρ_1 to
    # the one at ρ_2 (0.098 on this grid); progress toward the posterior at ρ_n >= half-way between the exact
    # fractions at ρ_{n-1} and ρ_n (0.78 on this grid)
    rho_grid: tuple = (0.05, 0.25, 0.5, 0.75, 0.95)
    sweep_steps: int = 6_000
    sweep_burn_in: int = 1_500
    sweep_chains: int = 32


PRESETS = {
    "tiny": Config(
        num_steps=600, burn_in=200, num_chains=2, history=300, sweep_steps=300, sweep_burn_in=100, sweep_chains=2
    ),
    "quick": Config(),
    "full": Config(
        num_steps=200_000,
        burn_in=50_000,
        thin=20,
        num_chains=32,
        history=20_000,
        sweep_steps=40_000,
        sweep_burn_in=10_000,
    ),
}

REDUCTIONS = {
    "tiny": [
        "600 steps x 2 chains instead of 200,000 x 32: the sample moments carry Monte Carlo errors of "
        "about 0.1-0.3, so most moment rows are expected to fail; only the set-up is exercised"
    ],
    "quick": [
        "20,000 steps x 16 chains (burn-in 4,000) instead of 200,000 x 32: moment errors ~0.02-0.05",
        "rho sweep (not in the paper's figure): 6,000 steps x 32 chains per rho (burn-in 1,500), 40,000 in full; "
        "the within-chain corr(w1, w2) is biased toward 0 by ~0.01-0.04 at this length (slow directions are "
        "under-sampled within a chain), standard errors ~0.013",
    ],
    "full": [],
}


def _scenarios(cfg: Config):
    two = custom(4, [0, 0, 1, 1])
    four = fully_factorized(4)
    mask = BernoulliMask(cfg.rho)
    return {
        "SGLD": (fully_joint(4), None),
        "S-SGLD {[w1,w2],[w3,b]}": (two, None),
        "S-SGLD {w1},{w2},{w3},{b}": (four, None),
        "Sd-SGLD {[w1,w2],[w3,b]}": (two, mask),
        "Sd-SGLD {w1},{w2},{w3},{b}": (four, mask),
    }


def _moments(x: torch.Tensor) -> dict:
    cov = torch.cov(x.T)
    sd = cov.diagonal().sqrt()
    return {"mean": x.mean(0).tolist(), "var": cov.diagonal().tolist(), "corr": (cov / sd.outer(sd)).tolist()}


def _cov_summary(cov: torch.Tensor) -> dict:
    sd = cov.diagonal().sqrt()
    return {"var": cov.diagonal().tolist(), "corr": (cov / sd.outer(sd)).nan_to_num().tolist()}


def _per_chain(samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Variances ``[C, 4]`` and correlation matrices ``[C, 4, 4]`` of each chain's draws."""
    var, corr = [], []
    for c in range(samples.shape[0]):
        cov = torch.cov(samples[c].T)
        sd = cov.diagonal().sqrt()
        var.append(cov.diagonal())
        corr.append(cov / sd.outer(sd))
    return torch.stack(var), torch.stack(corr)


PAIRS = ((0, 1), (0, 2), (2, 3))


# -- Theorem 3 for a Gaussian target: exact predictions of the ρ sweep --------------------
def _group_blocks(precision: torch.Tensor, group_ids) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ids, D, O)``: the partition's diagonal blocks D of Λ and the rest O = Λ − D."""
    ids = torch.as_tensor(group_ids, dtype=torch.long)
    same = ids[:, None] == ids[None, :]
    D = precision * same
    return ids, D, precision - D


def sd_limit_covariance(precision: torch.Tensor, group_ids, rho: float) -> torch.Tensor:
    """(D + ρO)⁻¹: the small-step stationary covariance of Sd-SGLD with Bernoulli(ρ) group masks
    (no at-least-one conditioning) on the Gaussian energy ½(θ − μ)ᵀΛ(θ − μ), θ̃ drawn from the
    chain's own law. The mask-averaged gradient of eq. 43 is (1/ρ)E[RΛR](θ − μ) + (1/ρ)E[RΛ(I − R)]
    (θ̃ − μ) = (D + ρO)(θ − μ) + (1 − ρ)O(θ̃ − μ) (E[r_i r_j] = ρ² for different groups, ρ within
    one group, where r_i = r_j), whose θ̃ term has mean 0: Λ at ρ = 1 (Theorem 3 (i)) and Theorem
    1's optimum, the block inverse D⁻¹, as ρ → 0 (Theorem 3 (ii))."""
    _, D, O = _group_blocks(precision, group_ids)
    return torch.linalg.inv(D + rho * O)


def sd_step_covariance(
    precision: torch.Tensor, group_ids, rho: float, num_copies: int, lr: float, cov: torch.Tensor
) -> torch.Tensor:
    """Covariance of δ' = δ − (ε/2)g + √ε ξ, one step of the library's SGLD on Sd's energy for the
    Gaussian target with full-batch gradients, when δ = θ − μ ~ (0, ``cov``) and the K copies'
    θ̃ − μ = δ̃_k are independent with covariance cov∘B (an independent past time per group: only
    the within-group blocks B survive): g = (1/(Kρ)) Σ_k R_k Λ (R_k δ + (I − R_k) δ̃_k), R_k =
    diag(r_k), r_k independent Bernoulli(ρ) group masks (all 2^M patterns enumerated; eq. 43's
    scale M/(K·E[Σr]) = 1/(Kρ)). With G = (1/(Kρ)) Σ_k R_kΛR_k and H_k = (1/(Kρ)) R_kΛ(I − R_k):
    E[(I − ε/2·G) cov (I − ε/2·G)ᵀ] + (ε²/4) Σ_k E[H_k (cov∘B) H_kᵀ] + ε I, where E[G cov Gᵀ] has K
    same-copy terms and K(K − 1) pairs of independent copies. Linear in ``cov`` plus ε I."""
    import itertools

    dt = torch.float64
    Lam, cov = precision.to(dt), cov.to(dt)
    ids, _, _ = _group_blocks(Lam, group_ids)
    P, M, K = Lam.shape[0], int(ids.max()) + 1, int(num_copies)
    same = (ids[:, None] == ids[None, :]).to(dt)
    eye = torch.eye(P, dtype=dt)
    c = 1.0 / (K * rho)
    mean_rlr = torch.zeros(P, P, dtype=dt)  # E[RΛR]
    GG, HH = torch.zeros(P, P, dtype=dt), torch.zeros(P, P, dtype=dt)  # E[RΛR cov RΛR], E[H cov∘B Hᵀ]
    for bits in itertools.product((0.0, 1.0), repeat=M):
        b = torch.tensor(bits, dtype=dt)
        p = rho ** float(b.sum()) * (1 - rho) ** float(M - b.sum())
        R = torch.diag(b[ids])
        G, H = R @ Lam @ R, R @ Lam @ (eye - R)
        mean_rlr += p * G
        GG += p * G @ cov @ G.T
        HH += p * H @ (cov * same) @ H.T
    G_mean = c * K * mean_rlr
    GcG = c * c * (K * GG + K * (K - 1) * mean_rlr @ cov @ mean_rlr.T)
    out = cov - lr / 2 * (G_mean @ cov + cov @ G_mean.T) + lr**2 / 4 * (GcG + c * c * K * HH) + lr * eye
    return (out + out.T) / 2


def sd_ideal_covariance(precision: torch.Tensor, group_ids, rho: float, num_copies: int, lr: float) -> torch.Tensor:
    """Exact stationary covariance S of the discretised Sd-SGLD chain on the Gaussian energy
    with full-batch gradients and an ideal store (θ̃ independent draws from the chain's own law):
    the fixed point S = :func:`sd_step_covariance` (S), a linear system in S. As ε → 0 it is
    :func:`sd_limit_covariance`; at ε > 0 the masks' and draws' gradient noise adds O(ε)."""
    dt = torch.float64
    P = precision.shape[0]
    zero = torch.zeros(P, P, dtype=dt)
    shift = sd_step_covariance(precision, group_ids, rho, num_copies, lr, zero)  # ε I
    cols = []
    for k in range(P * P):
        E = torch.zeros(P * P, dtype=dt)
        E[k] = 1
        E = E.view(P, P)
        # the step's linear part on a basis matrix (the symmetrisation is linear: S is symmetric)
        cols.append((sd_step_covariance(precision, group_ids, rho, num_copies, lr, (E + E.T) / 2) - shift).reshape(-1))
    S = torch.linalg.solve(torch.eye(P * P, dtype=dt) - torch.stack(cols, 1), shift.reshape(-1)).view(P, P)
    return (S + S.T) / 2


def _corr01(S: torch.Tensor) -> float:
    return float(S[0, 1] / (S[0, 0] * S[1, 1]).sqrt())


def check_rho_grid(rho_grid) -> tuple:
    """The sweep's ρ values as floats: empty (no sweep) or at least two, strictly increasing in
    (0, 1] (``ValueError`` naming ``rho_grid`` otherwise, before any compute)."""
    try:
        grid = tuple(float(r) for r in rho_grid)
    except (TypeError, ValueError):
        raise TypeError(f"rho_grid must be a sequence of numbers in (0, 1], got {rho_grid!r}") from None
    if grid and (
        len(grid) < 2
        or not all(math.isfinite(r) and 0 < r <= 1 for r in grid)
        or any(b <= a for a, b in zip(grid, grid[1:]))
    ):
        raise ValueError(
            f"rho_grid must be empty (no sweep) or at least two values strictly increasing in (0, 1] "
            f"(Bernoulli(rho) masks), got {rho_grid!r}; e.g. rho_grid=(0.05, 0.25, 0.5, 0.75, 0.95)"
        )
    return grid


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/ssgmcmc-linreg",
    progress: bool | None = None,
    *,
    seed: int | None = None,
) -> dict:
    cfg, preset = resolve_preset(config, PRESETS, seed)
    grid = check_rho_grid(cfg.rho_grid)  # before any compute
    if grid:
        check_int("sweep_chains", cfg.sweep_chains, 1)
        if check_int("sweep_burn_in", cfg.sweep_burn_in, 0) >= check_int("sweep_steps", cfg.sweep_steps, 1):
            raise ValueError(
                f"sweep_burn_in ({cfg.sweep_burn_in}) must be below sweep_steps ({cfg.sweep_steps}): the rho "
                f"sweep would keep no draws"
            )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    data = paper_like_data(cfg)
    x, y, precision, post_mean = data["x"], data["y"], data["precision"], data["mean"]
    post_cov = torch.linalg.inv(precision)

    torch.manual_seed(cfg.seed)
    base = ModuleEnergy(nn.Linear(3, 1).double(), "gaussian", noise_std=1.0, prior_std=1.0)
    results, draws, targets, stats = {}, {}, {}, {}
    for name, (partition, mask) in _scenarios(cfg).items():
        energy = StructuredEnergy(
            base,
            partition,
            ChainHistory(cfg.history),
            mask=mask,
            num_copies=cfg.num_copies if mask is not None else None,
            seed=cfg.seed,
        )
        t0 = time.perf_counter()
        chain = sample(
            energy,
            post_mean,
            SGLD(cfg.lr),
            cfg.num_steps,
            data=(x, y),
            batch_size=cfg.batch_size,
            burn_in=cfg.burn_in,
            thin=cfg.thin,
            seed=cfg.seed,
            num_chains=cfg.num_chains,
            progress=progress,
        )
        d = chain.flat_draws()
        _, optimum = structured_optimum_gaussian(post_mean, precision, partition)
        target = post_cov if name == "SGLD" else optimum
        if name != "SGLD":
            targets[name] = optimum
        results[name] = {
            "samples": _moments(d),
            "exact_posterior" if name == "SGLD" else "exact_structured_optimum": _cov_summary(target),
            "num_groups": partition.num_groups,
            "seconds": time.perf_counter() - t0,
        }
        draws[name] = d
        s_m = results[name]["samples"]
        stats[name] = {"var": s_m["var"], "corr": s_m["corr"]}
        if mask is not None:
            continue  # Sd-SGLD's exact law is not known in closed form: checked by the claims
        var_c, corr_c = _per_chain(chain.samples)
        C = chain.samples.shape[0]
        se_var = var_c.std(0) / C**0.5 if C > 1 else var_c.abs().mean(0)
        se_corr = corr_c.std(0) / C**0.5 if C > 1 else torch.ones(4, 4)
        tsd = target.diagonal().sqrt()
        results[name]["se"] = {"var": se_var.tolist(), "corr": se_corr.tolist()}  # across chains (rejudge)
        stats[name].update(
            target_var=target.diagonal().tolist(),
            target_corr=(target / tsd.outer(tsd)).nan_to_num().tolist(),
            se_var=se_var.tolist(),
            se_corr=se_corr.tolist(),
        )
    sweep = _rho_sweep(cfg, grid, base, (x, y), post_mean, precision, progress) if grid else None
    rows = comparisons(cfg, post_mean.tolist(), stats, sweep)
    _plot(out / "pairs.png", draws, post_mean, post_cov, targets)
    if sweep is not None:
        _plot_sweep(out / "rho_sweep.png", sweep, precision)
    numbers = {
        "parameters": NAMES,
        "truth": list(TRUTH),
        "paper_map": list(PAPER_MAP),
        "covariate_law": {
            "mean": data["mu"].tolist(),
            "cov": data["cov"].tolist(),
            "cov_eigenvalues": torch.linalg.eigvalsh(data["cov"]).tolist(),
        },
        "data_seed": data["data_seed"],
        "map_distance_to_paper": data["distance"],
        "exact_posterior": {"mean": post_mean.tolist(), **_cov_summary(post_cov)},
        "scenarios": results,
        "rho_sweep": sweep,
    }
    notes = [
        f"Covariates: x ~ N(mu, Sigma), the Gaussian nearest N(0, I) whose expected exact MAP is the paper's "
        f"(mu = {[round(v, 3) for v in data['mu'].tolist()]}, Sigma eigenvalues "
        f"{[round(v, 4) for v in torch.linalg.eigvalsh(data['cov']).tolist()]}); data seed {data['data_seed']} "
        f"of {max(1, cfg.seed_search)} has the exact MAP nearest the paper's: distance "
        f"{data['distance']:.3f} (Euclidean, 4 coordinates).",
        "The paper gives no numbers for the figure's panels: each scenario is compared with its exact "
        "target instead (tolerances: 10% + 4 standard errors across chains for variances, 0.05 + 4 standard "
        "errors for correlations; where that is not below 0.9 x the distance to another scenario's exact target, "
        "a failure counts and a pass is weak, since it cannot tell the scenarios apart), and the figure's visible "
        "claims are checked as stated. The exact-MAP rows are checks of the simulated data, not counted.",
        "S-SGLD reaches the exact structured optimum only slowly on this target: with corr(w1, w2) = -0.98 the "
        "mean-field fixed point is approached at a rate ~ corr^2 per turnover of the history window, so the "
        "history's mean drifts as a slow collective mode, which shows as extra variance and residual "
        "correlation in the S-SGLD rows (the figure's qualitative picture holds: see the claims).",
    ]
    if sweep is not None:
        notes.append(
            f"Theorem 3's rho sweep (rho_sweep.png): Sd-SGLD {{w1}},{{w2}},{{w3}},{{b}}, K = {cfg.num_copies}, at rho = "
            f"{', '.join(f'{r:g}' for r in grid)} ({cfg.sweep_steps:,} steps x {cfg.sweep_chains} chains each, "
            f"burn-in {cfg.sweep_burn_in:,}). rho is the probability that a group keeps the chain's value "
            "(App. D): rho -> 1 is SGLD (the posterior, corr(w1, w2) = "
            f"{sweep['posterior']:.3f}), rho -> 0 is S-SGLD (the mean field, {sweep['mean_field']:.3f}). Exact for "
            "this Gaussian target: the small-step law N(mu, (D + rho O)^-1), D the partition's blocks of the "
            "posterior precision, and the exact stationary covariance of the discretised chain with an ideal store "
            f"(corr {', '.join(f'{v:.3f}' for v in sweep['exact'])}). Judged: the within-chain corr(w1, w2), mean "
            f"over chains ({', '.join(f'{v:.3f}' for v in sweep['corr'])}, standard errors "
            f"{', '.join(f'{v:.3f}' for v in sweep['se'])}). The pooled correlation over all chains "
            f"({', '.join(f'{v:.3f}' for v in sweep['pooled'])}) also counts the spread of the chains' centres, "
            "which the history's slowly relaxing mean freezes in at small rho (ssgmcmc-theorem1): it is shown, "
            "not judged."
        )
    return write_report(
        out,
        experiment=REGISTRY.get("ssgmcmc-linreg"),
        preset=preset,
        config=asdict(cfg),
        seed=cfg.seed,
        comparisons=rows,
        numbers=numbers,
        wall_time_s=time.perf_counter() - t_start,
        step_sizes=[
            f"SGLD(lr={cfg.lr:g}): θ ← θ − (ε/2)∇Û + √ε ξ, Û scaled by N/n = "
            f"{cfg.num_data}/{cfg.batch_size}; the paper does not state its step"
        ],
        reductions=REDUCTIONS.get(preset, []),
        figures=["pairs.png"] + (["rho_sweep.png"] if sweep is not None else []),
        notes=notes,
    )


def _rho_sweep(cfg: Config, grid: tuple, base, data: tuple, mean: torch.Tensor, precision: torch.Tensor, progress):
    """Sd-SGLD {w1},{w2},{w3},{b} at each ρ of ``grid`` (after the main scenarios: their chains are
    unchanged), with the exact predictions: ``{"rho", "corr" (within-chain corr(w1, w2), mean over
    chains), "se" (its standard error over chains), "pooled" (all chains' draws together), "exact"
    (:func:`sd_ideal_covariance` at ε), "limit" (:func:`sd_limit_covariance`), "mean_field",
    "posterior", "seconds", ...}``."""
    four = fully_factorized(4)
    ids = four.group_ids
    _, optimum = structured_optimum_gaussian(mean, precision, four)
    out: dict = {
        "partition": "{w1},{w2},{w3},{b}",
        "num_copies": cfg.num_copies,
        "steps": cfg.sweep_steps,
        "burn_in": cfg.sweep_burn_in,
        "chains": cfg.sweep_chains,
        "mean_field": _corr01(optimum),
        "posterior": _corr01(torch.linalg.inv(precision)),
        "rho": list(grid),
    }
    for key in ("corr", "se", "pooled", "exact", "limit", "seconds"):
        out[key] = []
    for rho in grid:
        energy = StructuredEnergy(
            base,
            four,
            ChainHistory(cfg.history),
            mask=BernoulliMask(rho),
            num_copies=cfg.num_copies,
            seed=cfg.seed,
        )
        t0 = time.perf_counter()
        chain = sample(
            energy,
            mean,
            SGLD(cfg.lr),
            cfg.sweep_steps,
            data=data,
            batch_size=cfg.batch_size,
            burn_in=cfg.sweep_burn_in,
            thin=cfg.thin,
            seed=cfg.seed,
            num_chains=cfg.sweep_chains,
            progress=progress,
        )
        c = _per_chain(chain.samples)[1][:, 0, 1]
        C = c.shape[0]
        out["corr"].append(float(c.mean()))
        out["se"].append(float(c.std() / C**0.5) if C > 1 else 1.0)  # one chain: no error estimate
        out["pooled"].append(_corr01(torch.cov(chain.flat_draws().T)))
        out["exact"].append(_corr01(sd_ideal_covariance(precision, ids, rho, cfg.num_copies, cfg.lr)))
        out["limit"].append(_corr01(sd_limit_covariance(precision, ids, rho)))
        out["seconds"].append(time.perf_counter() - t0)
    return out


def sweep_comparisons(sweep: dict) -> list[Comparison]:
    """Theorem 3's rows for the ρ sweep (pure). ``sweep``: ``rho`` (increasing), ``corr`` (ours,
    per ρ), ``se`` (its standard errors), ``exact`` (the exact prediction per ρ), ``mean_field``
    and ``posterior`` (corr(w1, w2) of the two limits). Progress toward the posterior is
    f(c) = (c − mean_field)/(posterior − mean_field): 0 at the mean field, 1 at the posterior.

    * (a) monotone between the limits: every step up the grid moves f by more than 2 combined
      standard errors (|c_{k+1} − c_k| > 2√(se_k² + se_{k+1}²), in the posterior's direction: a
      difference within 2 SE is a tie and breaks the strict ordering), and every value lies between
      the two limits within 2 SE (Theorem 3: "a continuum with S-SGMCMC at one extreme and SGMCMC
      at the other"; the exact gaps between grid neighbours are 0.14-0.26 here, ~5-9 SE in quick);
    * (b) the mean-field end: |c(ρ_1) − mean_field| at most half-way from the exact prediction at
      ρ_1 to the one at ρ_2 ((0.027 + 0.170)/2 = 0.098 here; Theorem 3 (ii): ρ → 0 is S-SGMCMC,
      whose exact law (Theorem 1) has corr 0): a sweep shifted by one grid point fails;
    * (c) the posterior end: f(c(ρ_n)) at least half-way between the exact f at ρ_{n−1} and at
      ρ_n ((0.646 + 0.919)/2 = 0.78 here; Theorem 3 (i): ρ → 1 is SGMCMC): the last point must have
      moved further toward the posterior than the exact law at the grid's previous ρ.

    The tolerances are fixed by the exact predictions, not by our noise (standard errors ~0.013
    in quick, so each margin is > 5 SE). Plus a check (not a claim): the largest |ours − exact|
    over the grid within 0.05 + 4 SE (the within-chain estimate is biased toward 0 by ~0.01-0.04
    at quick's length; minibatch noise is not in the exact prediction)."""
    rho = [float(r) for r in sweep["rho"]]
    ours = [float(v) for v in sweep["corr"]]
    se = [float(v) for v in sweep["se"]]
    exact = [float(v) for v in sweep["exact"]]
    mf, post = float(sweep["mean_field"]), float(sweep["posterior"])
    span = post - mf
    if len(rho) < 2 or not (len(ours) == len(se) == len(exact) == len(rho)) or span == 0:
        raise ValueError(
            "sweep needs at least two rho values with one corr, se and exact value each, and distinct limits"
        )
    frac = lambda c: (c - mf) / span  # noqa: E731
    grid = ", ".join(f"{r:g}" for r in rho)
    lo, hi = min(mf, post), max(mf, post)

    def monotone(v) -> bool:
        steps = all(
            (v[k + 1] - v[k]) * math.copysign(1.0, span) > 2 * math.hypot(se[k], se[k + 1]) for k in range(len(v) - 1)
        )
        return steps and all(lo - 2 * s <= c <= hi + 2 * s for c, s in zip(v, se))

    tol_mf = (abs(exact[0] - mf) + abs(exact[1] - mf)) / 2
    f_min = (frac(exact[-2]) + frac(exact[-1])) / 2
    worst = max(range(len(rho)), key=lambda k: abs(ours[k] - exact[k]) - 4 * se[k])
    return [
        Comparison(
            f"Theorem 3: Sd-SGLD {{w1}},{{w2}},{{w3}},{{b}} corr(w1, w2) moves monotonically with rho ({grid}) from "
            f"the mean field ({mf:.3g}) toward the posterior ({post:.3f})",
            ours,
            "monotone between the limits",
            Claim(
                "every step up the grid moves toward the posterior by more than 2 combined SE (a difference "
                "within 2 SE is a tie), every value between the two limits within 2 SE",
                monotone,
            ),
            note=f"ours: within-chain corr, mean over chains; SE {', '.join(f'{s:.3f}' for s in se)}; exact "
            f"{', '.join(f'{e:.3f}' for e in exact)}",
            valid=(-1, 1),
        ),
        Comparison(
            f"Theorem 3 (ii): at rho = {rho[0]:g} corr(w1, w2) is near the mean-field value (rho -> 0: S-SGLD)",
            ours[0],
            mf,
            Tolerance(abs=tol_mf),
            valid=(-1, 1),
            note=f"tolerance: half-way from the exact prediction at rho = {rho[0]:g} ({exact[0]:.3f}) to the one at "
            f"rho = {rho[1]:g} ({exact[1]:.3f}), so a sweep shifted by one grid point fails",
        ),
        Comparison(
            f"Theorem 3 (i): at rho = {rho[-1]:g} corr(w1, w2) has moved most of the way to the posterior's "
            f"(rho -> 1: SGLD)",
            frac(ours[-1]),
            f">= {f_min:.2f}",
            Claim(
                f"(corr - mean field)/(posterior - mean field) >= {f_min:.2f}: half-way between the exact fractions at "
                f"rho = {rho[-2]:g} ({frac(exact[-2]):.2f}) and rho = {rho[-1]:g} ({frac(exact[-1]):.2f})",
                lambda f: f >= f_min,
            ),
            note=f"ours: corr {ours[-1]:.3f} (exact {exact[-1]:.3f}, posterior {post:.3f})",
        ),
        Comparison(
            "rho sweep vs the exact stationary corr(w1, w2) of the discretised chain (ideal store), largest "
            f"deviation (at rho = {rho[worst]:g})",
            ours[worst],
            exact[worst],
            Tolerance(abs=0.05 + 4 * se[worst]),
            note="a check of the implementation against the exact prediction, not a claim of the paper",
            check=True,
            check_reason=SWEEP_CHECK_REASON,
            valid=(-1, 1),
        ),
    ]


#: the five scenarios of :func:`_scenarios`; those with an exact target in closed form (SGLD: the
#: posterior; S-SGLD: Theorem 1's structured optimum) get moment rows
SCENARIOS = (
    "SGLD",
    "S-SGLD {[w1,w2],[w3,b]}",
    "S-SGLD {w1},{w2},{w3},{b}",
    "Sd-SGLD {[w1,w2],[w3,b]}",
    "Sd-SGLD {w1},{w2},{w3},{b}",
)
EXACT_SCENARIOS = SCENARIOS[:3]
MAP_CHECK_REASON = (
    "an implementation check of the simulated data, not a claim of the method: the paper's covariate law is not "
    "published, so ours was fitted to make the expected exact MAP the paper's (fit_covariate_law) and the data "
    "seed chosen nearest it; computed, not sampled"
)
SWEEP_CHECK_REASON = (
    "an implementation check against the exact stationary law of the discretised chain computed here, not a claim "
    "of the paper (which gives no number for the sweep)"
)
NOT_RUN_SCENARIO = "scenario {name} not in this run's results"
NOT_RUN_SWEEP = "Theorem 3's rho sweep not run (Config.rho_grid is empty)"


def comparisons(cfg: Config, exact_map, scenarios: dict, sweep: dict | None = None) -> list[Comparison]:
    """The report's rows (pure, so a test can feed it any numbers; issues 26 §1, 35).

    ``exact_map``: our data set's exact posterior mode (4 numbers); ``scenarios``: ``{name:
    {"var": [4], "corr": [4][4]}}`` for the five scenarios of :func:`_scenarios`, those with an
    exact target adding ``"target_var"``, ``"target_corr"`` and the standard errors across chains
    ``"se_var"``, ``"se_corr"``. A scenario missing from ``scenarios`` keeps its rows, "not run".

    * the exact MAP against the paper's: checks (computed, not sampled: true by construction of
      the data set, not a claim of the method), each saying why;
    * each variance and correlation against its exact target (the posterior for SGLD, Theorem 1's
      structured optimum for S-SGLD): a claim (Fig. 2 draws these laws; the paper gives no
      number), within 10 % of the target (variances: the discretisation bias of ε = 1e-3, ε·λ_max
      ≈ 0.26, plus minibatch noise) or 0.05 (correlations) plus 4 standard errors across chains.
      Where that tolerance is not below the distance to another scenario's target (var w3 and
      var b of S-SGLD's two partitions: 0.0136 / 0.0132, 0.0102 / 0.0099) the row still counts:
      a failure is a failure, a pass is weak (it cannot tell those scenarios apart, and is
      credited only while the report's other claims carry it);
    * the figure's claims on corr(w1, w2), as stated there ("Sd-SGLD lies between" is weak: equal
      numbers meet it);
    * Theorem 3's rows (:func:`sweep_comparisons`) with ``sweep``, else "not run"."""
    rows = []
    for k, j in enumerate(range(4)):
        rows.append(
            Comparison(
                f"exact MAP {NAMES[j]}",
                float(exact_map[j]),
                PAPER_MAP[j],
                Tolerance(abs=0.1),
                note="ours: the exact posterior mode of our data set (a check that the simulated data match the "
                "paper's, computed, not sampled: not a claim of the method)"
                if k == 0
                else "",
                check=True,
                check_reason=MAP_CHECK_REASON,
            )
        )
    exact = {n: v for n, v in scenarios.items() if "target_var" in v}

    def gap_to_others(own: float, values) -> float:
        """0.9 × the distance from this scenario's target to the nearest different target of another
        scenario: a tolerance at or above it lets one scenario's answer pass for another's."""
        others = [abs(float(x) - own) for x in values if abs(float(x) - own) > 0]
        return 0.9 * min(others) if others else math.inf

    def value_row(quantity: str, ours, target: float, tol: float, values, valid) -> Comparison:
        cap = gap_to_others(target, values)
        if tol < cap:
            return Comparison(quantity, ours, target, Tolerance(abs=tol), valid=valid)
        # another scenario's target lies within the tolerance: a failure counts, a pass is weak (issue 35: "a
        # reason not to credit a pass, not a reason to drop a failure"), credited only while the others carry it
        return Comparison(
            quantity,
            ours,
            target,
            Claim(
                f"|ours − target| ≤ {tol:g} (10 % + 4 SE for a variance, 0.05 + 4 SE for a correlation); weak: "
                f"another scenario's target lies within it",
                lambda v, t=target, a=tol: abs(v - t) <= a * (1 + 1e-9),
                weak=True,
            ),
            note=f"the noise tolerance {tol:.3g} is not below 0.9 × the distance to another scenario's target "
            f"({cap:.3g}): a pass here cannot tell those scenarios apart (weak), a failure counts",
            valid=valid,
        )

    for name in EXACT_SCENARIOS:
        ref = "exact posterior" if name == "SGLD" else "exact structured optimum (Theorem 1)"
        v = exact.get(name)
        if v is None:
            for j in range(4):
                rows.append(
                    Comparison(
                        f"{name}: var {NAMES[j]} (vs the {ref})",
                        None,
                        "exact target",
                        Tolerance(abs=0.1),
                        not_run=NOT_RUN_SCENARIO.format(name=name),
                    )
                )
            for i, j in PAIRS:
                rows.append(
                    Comparison(
                        f"{name}: corr({NAMES[i]}, {NAMES[j]}) (vs the {ref})",
                        None,
                        "exact target",
                        Tolerance(abs=0.05),
                        not_run=NOT_RUN_SCENARIO.format(name=name),
                    )
                )
            continue
        for j in range(4):  # variances within 10% (discretisation and minibatch noise) + 4 standard errors
            tol = 0.10 * float(v["target_var"][j]) + 4 * float(v["se_var"][j])
            values = [w["target_var"][j] for w in exact.values()]
            rows.append(
                value_row(
                    f"{name}: var {NAMES[j]} (vs the {ref})",
                    v["var"][j],
                    float(v["target_var"][j]),
                    tol,
                    values,
                    (0, math.inf),
                )
            )
        for i, j in PAIRS:
            tol = 0.05 + 4 * float(v["se_corr"][i][j])
            values = [w["target_corr"][i][j] for w in exact.values()]
            rows.append(
                value_row(
                    f"{name}: corr({NAMES[i]}, {NAMES[j]}) (vs the {ref})",
                    v["corr"][i][j],
                    float(v["target_corr"][i][j]),
                    tol,
                    values,
                    (-1, 1),
                )
            )
    c12 = {n: v["corr"][0][1] for n, v in scenarios.items()}

    def claim(quantity: str, names: tuple, paper: str, rule: Claim) -> Comparison:
        lost = [n for n in names if n not in c12]
        return Comparison(
            quantity,
            None if lost else [c12[n] for n in names],
            paper,
            rule,
            not_run=f"scenario(s) {', '.join(lost)} not in this run's results" if lost else "",
            valid=(-1, 1),
        )

    rows.append(
        claim(
            "figure: SGLD shows the w1-w2 dependence, fully factorised S-SGLD removes most of it",
            ("SGLD", "S-SGLD {w1},{w2},{w3},{b}"),
            "strong vs weak",
            Claim(
                "|corr(w1,w2)| > 0.8 for SGLD, and below a third of that for S-SGLD "
                "{w1},{w2},{w3},{b} (exact target 0)",
                lambda v: abs(v[0]) > 0.8 and abs(v[1]) < abs(v[0]) / 3,
            ),
        )
    )
    rows.append(
        claim(
            "figure: S-SGLD {[w1,w2],[w3,b]} keeps a w1-w2 dependence (same group)",
            ("S-SGLD {[w1,w2],[w3,b]}", "S-SGLD {w1},{w2},{w3},{b}"),
            "kept",
            Claim(
                "|corr(w1,w2)| of S-SGLD {[w1,w2],[w3,b]} > 0.5 (exact target 0.67) and "
                "above the fully factorised one's",
                lambda v: abs(v[0]) > 0.5 and abs(v[0]) > abs(v[1]),
            ),
        )
    )
    rows.append(
        claim(
            "Theorem 3: Sd-SGLD (rho = 0.5) lies between SGLD and S-SGLD",
            ("SGLD", "Sd-SGLD {w1},{w2},{w3},{b}", "S-SGLD {w1},{w2},{w3},{b}"),
            "between",
            Claim(
                "|corr(w1,w2)|: S-SGLD - 0.05 <= Sd-SGLD <= SGLD + 0.05 (four groups); weak: equal numbers for "
                "the three scenarios meet it",
                lambda v: abs(v[2]) - 0.05 <= abs(v[1]) <= abs(v[0]) + 0.05,
                weak=True,
            ),
        )
    )
    if sweep is not None:
        rows += sweep_comparisons(sweep)
    else:
        rows += [
            Comparison(q, None, "Theorem 3", Claim(q, lambda v: False), not_run=NOT_RUN_SWEEP)
            for q in (
                "Theorem 3: Sd-SGLD {w1},{w2},{w3},{b} corr(w1, w2) moves monotonically with rho from the mean field "
                "toward the posterior",
                "Theorem 3 (ii): at the smallest rho corr(w1, w2) is near the mean-field value (rho -> 0: S-SGLD)",
                "Theorem 3 (i): at the largest rho corr(w1, w2) has moved most of the way to the posterior's "
                "(rho -> 1: SGLD)",
            )
        ]
    return rows


def rejudge(report: dict) -> list[Comparison]:
    """The rows of a written report rebuilt from its ``numbers`` and ``config`` under today's
    rules (issue 35 §7). The standard errors across chains of the moment rows are in
    ``numbers["scenarios"][name]["se"]`` in reports written since; an older report lacks them, and
    they are read back from its own rows' tolerances (0.1·target + 4 SE for a variance, 0.05 + 4 SE
    for a correlation), which the row's note says."""
    import dataclasses
    import re

    names = {f.name for f in dataclasses.fields(Config)}
    fields: dict[str, Any] = {
        k: (tuple(v) if isinstance(v, list) else v) for k, v in report["config"].items() if k in names
    }
    cfg = Config(**fields)
    numbers = report["numbers"]
    old_tol: dict[str, float] = {}
    for c in report.get("comparisons", []):
        # a Tolerance "|ours − paper| ≤ ±t" or a weak row's "|ours − target| ≤ t (...)", t to 6 digits
        m = re.search(r"\| ≤ ±?([0-9][0-9.eE+-]*)", str(c.get("rule") or ""))
        if m:
            old_tol[c["quantity"]] = float(m.group(1))
    recovered: set[str] = set()
    stats: dict[str, dict] = {}
    for name, res in numbers["scenarios"].items():
        s = {"var": res["samples"]["var"], "corr": res["samples"]["corr"]}
        target = res.get("exact_posterior") or res.get("exact_structured_optimum")
        if name in EXACT_SCENARIOS and target is not None:
            ref = "exact posterior" if name == "SGLD" else "exact structured optimum (Theorem 1)"
            s |= {"target_var": target["var"], "target_corr": target["corr"]}
            if "se" in res:
                s |= {"se_var": res["se"]["var"], "se_corr": res["se"]["corr"]}
            else:
                se_corr = [[0.0] * 4 for _ in range(4)]
                se_var = []
                for j in range(4):
                    q = f"{name}: var {NAMES[j]} (vs the {ref})"
                    se_var.append((old_tol[q] - 0.10 * float(target["var"][j])) / 4)
                    recovered.add(q)
                for i, j in PAIRS:
                    q = f"{name}: corr({NAMES[i]}, {NAMES[j]}) (vs the {ref})"
                    se_corr[i][j] = se_corr[j][i] = (old_tol[q] - 0.05) / 4
                    recovered.add(q)
                s |= {"se_var": se_var, "se_corr": se_corr}
        stats[name] = s
    rows = comparisons(cfg, numbers["exact_posterior"]["mean"], stats, numbers.get("rho_sweep"))
    for r in rows:
        if r.quantity in recovered:
            r.note = (r.note + "; " if r.note else "") + (
                "the SE across chains read back from this record's earlier tolerance (the report then kept no SEs "
                "in its numbers)"
            )
    return rows


def _ellipse(ax, mean, cov, i, j, **kw) -> None:
    """The 2-sigma ellipse of the (i, j) marginal of N(mean, cov)."""
    sub = cov[[i, j]][:, [i, j]]
    vals, vecs = torch.linalg.eigh(sub)
    t = torch.linspace(0, 2 * math.pi, 200, dtype=cov.dtype)
    circle = torch.stack([t.cos(), t.sin()], 1) * (2 * vals.clamp(min=0).sqrt())
    pts = circle @ vecs.T + torch.stack([mean[i], mean[j]])
    ax.plot(pts[:, 0].numpy(), pts[:, 1].numpy(), **kw)


def _plot(path: Path, draws: dict, mean: torch.Tensor, cov: torch.Tensor, targets: dict) -> None:
    """Scatter of (w1, w2) and (w1, w3) per scenario, like the paper's Fig. 2, with the 2-sigma
    ellipses of the exact posterior (grey) and of the scenario's exact target (red, S-SGLD)."""
    plt = pyplot()
    if plt is None:  # pragma: no cover
        return
    fig, axes = plt.subplots(2, len(draws), figsize=(3.2 * len(draws), 6.2), sharex="row", sharey="row")
    g = torch.Generator().manual_seed(0)
    for col, (name, d) in enumerate(draws.items()):
        keep = d[torch.randperm(d.shape[0], generator=g)[:3000]]
        for row, (i, j) in enumerate(((0, 1), (0, 2))):
            ax = axes[row, col]
            ax.scatter(keep[:, i].numpy(), keep[:, j].numpy(), s=2, alpha=0.25, color="tab:blue", rasterized=True)
            _ellipse(ax, mean, cov, i, j, color="0.3", ls=":", lw=1.2, label="exact posterior")
            if name in targets:
                _ellipse(ax, mean, targets[name], i, j, color="tab:red", ls="--", lw=1.2, label="exact S target")
            ax.set(xlabel=NAMES[i], ylabel=NAMES[j])
            if row == 0:
                ax.set_title(name, fontsize=9)
    axes[0, -1].legend(fontsize=7, loc="upper right")
    fig.suptitle(
        "2-sigma ellipses: exact posterior (dotted), exact structured optimum of the partition (dashed)", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_sweep(path: Path, sweep: dict, precision: torch.Tensor) -> None:
    """corr(w1, w2) against ρ: ours (within-chain, ±2 SE; pooled hollow), the exact small-step
    curve (D + ρO)⁻¹ and the discretised chain's exact values, and both limits of Theorem 3."""
    plt = pyplot()
    if plt is None:  # pragma: no cover
        return
    ids = fully_factorized(4).group_ids
    fine = [k / 100 for k in range(1, 101)]
    fig, ax = plt.subplots(figsize=(5.2, 4))
    ax.plot(
        fine,
        [_corr01(sd_limit_covariance(precision, ids, r)) for r in fine],
        color="0.4",
        lw=1,
        label="exact, small step: (D + ρO)⁻¹",
    )
    ax.plot(sweep["rho"], sweep["exact"], "x", color="0.2", label="exact, discretised chain (ε)")
    ax.errorbar(
        sweep["rho"],
        sweep["corr"],
        yerr=[2 * s for s in sweep["se"]],
        fmt="o",
        color="tab:blue",
        capsize=3,
        label="ours: within-chain, mean ± 2 SE",
    )
    ax.plot(sweep["rho"], sweep["pooled"], "o", mfc="none", color="tab:orange", label="ours: pooled over chains")
    ax.axhline(sweep["mean_field"], color="tab:red", ls="--", lw=1, label="mean field (ρ → 0, S-SGLD)")
    ax.axhline(sweep["posterior"], color="k", ls=":", lw=1, label="posterior (ρ → 1, SGLD)")
    ax.set(xlabel="ρ (probability a group keeps the chain's value)", ylabel="corr(w1, w2)", xlim=(0, 1))
    ax.set_title("Theorem 3: Sd-SGLD {w1},{w2},{w3},{b} between S-SGLD and SGLD", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
