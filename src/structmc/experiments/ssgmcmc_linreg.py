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

Step sizes: SGLD(lr=ε) in the library's convention, θ ← θ − (ε/2)∇Û + √ε ξ with Û scaled by
N/n; the paper's figure does not state its step, ε = 1e-3 is stable and mixes in the quick
preset (the stiffest direction has precision ≈ 260, ε·λ ≈ 0.26 < 2).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from .. import SGLD, ModuleEnergy, sample
from ..structured import (
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
from ._report import Claim, Comparison, Tolerance, smallest_gap, write_report
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


PRESETS = {
    "tiny": Config(num_steps=600, burn_in=200, num_chains=2, history=300),
    "quick": Config(),
    "full": Config(num_steps=200_000, burn_in=50_000, thin=20, num_chains=32, history=20_000),
}

REDUCTIONS = {
    "tiny": [
        "600 steps x 2 chains instead of 200,000 x 32: the sample moments carry Monte Carlo errors of "
        "about 0.1-0.3, so most moment rows are expected to fail; only the set-up is exercised"
    ],
    "quick": ["20,000 steps x 16 chains (burn-in 4,000) instead of 200,000 x 32: moment errors ~0.02-0.05"],
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


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/ssgmcmc-linreg",
    progress: bool | None = None,
    *,
    seed: int | None = None,
) -> dict:
    cfg, preset = resolve_preset(config, PRESETS, seed)
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
        stats[name].update(
            target_var=target.diagonal().tolist(),
            target_corr=(target / tsd.outer(tsd)).nan_to_num().tolist(),
            se_var=se_var.tolist(),
            se_corr=se_corr.tolist(),
        )
    rows = comparisons(cfg, post_mean.tolist(), stats)
    _plot(out / "pairs.png", draws, post_mean, post_cov, targets)
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
    }
    notes = [
        f"Covariates: x ~ N(mu, Sigma), the Gaussian nearest N(0, I) whose expected exact MAP is the paper's "
        f"(mu = {[round(v, 3) for v in data['mu'].tolist()]}, Sigma eigenvalues "
        f"{[round(v, 4) for v in torch.linalg.eigvalsh(data['cov']).tolist()]}); data seed {data['data_seed']} "
        f"of {max(1, cfg.seed_search)} has the exact MAP nearest the paper's: distance "
        f"{data['distance']:.3f} (Euclidean, 4 coordinates).",
        "The paper gives no numbers for the figure's panels: each scenario is compared with its exact "
        "target instead (tolerances: 10% + 4 standard errors across chains for variances, 0.05 + 4 standard "
        "errors for correlations, each capped at 0.9 x the smallest gap between the scenarios' exact targets, "
        "so that one scenario's target never passes for another's), and the figure's visible claims are "
        "checked as stated. The exact-MAP rows are checks of the simulated data, not counted.",
        "S-SGLD reaches the exact structured optimum only slowly on this target: with corr(w1, w2) = -0.98 the "
        "mean-field fixed point is approached at a rate ~ corr^2 per turnover of the history window, so the "
        "history's mean drifts as a slow collective mode, which shows as extra variance and residual "
        "correlation in the S-SGLD rows (the figure's qualitative picture holds: see the claims).",
    ]
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
        figures=["pairs.png"],
        notes=notes,
    )


def comparisons(cfg: Config, exact_map, scenarios: dict) -> list[Comparison]:
    """The report's rows (pure, so a test can feed it any numbers; issue 26 §1).

    ``exact_map``: our data set's exact posterior mode (4 numbers); ``scenarios``: ``{name:
    {"var": [4], "corr": [4][4]}}`` for the five scenarios of :func:`_scenarios`, those with an
    exact target adding ``"target_var"``, ``"target_corr"`` and the standard errors across chains
    ``"se_var"``, ``"se_corr"``.

    * the exact MAP against the paper's: checks (computed, not sampled: true by construction of
      the data set, not a claim of the method), outside the tally;
    * each variance and correlation against its exact target (the posterior for SGLD, Theorem 1's
      structured optimum for S-SGLD): within 10 % of the target (variances) or 0.05
      (correlations) plus 4 standard errors across chains, **capped at 0.9 × the smallest gap
      between the scenarios' targets** for that quantity (:func:`._report.smallest_gap`), so
      that neither our noise nor the tolerance lets one scenario's target pass for another's
      (var w3: S-SGLD's two partitions have 0.0136 and 0.0132, so the cap is 3.6e-4);
    * the figure's claims on corr(w1, w2), as stated there.
    """
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
            )
        )
    exact = {n: v for n, v in scenarios.items() if "target_var" in v}

    def cap(values) -> float:
        try:
            return 0.9 * smallest_gap(values)
        except ValueError:  # one scenario, or all targets equal: no other target to pass for
            return math.inf

    var_cap = [cap([v["target_var"][j] for v in exact.values()]) for j in range(4)]
    corr_cap = {(i, j): cap([v["target_corr"][i][j] for v in exact.values()]) for i, j in PAIRS}
    for name, v in exact.items():
        ref = "exact posterior" if name == "SGLD" else "exact structured optimum (Theorem 1)"
        for j in range(4):  # variances within 10% (discretisation and minibatch noise) + 4 standard errors
            tol = min(0.10 * float(v["target_var"][j]) + 4 * float(v["se_var"][j]), var_cap[j])
            rows.append(
                Comparison(
                    f"{name}: var {NAMES[j]} (vs the {ref})",
                    v["var"][j],
                    float(v["target_var"][j]),
                    Tolerance(abs=tol),
                    note=f"tolerance capped at 0.9 × the smallest gap between the scenarios' targets ({var_cap[j]:.3g})"
                    if tol == var_cap[j]
                    else "",
                )
            )
        for i, j in PAIRS:
            tol = min(0.05 + 4 * float(v["se_corr"][i][j]), corr_cap[(i, j)])
            rows.append(
                Comparison(
                    f"{name}: corr({NAMES[i]}, {NAMES[j]}) (vs the {ref})",
                    v["corr"][i][j],
                    float(v["target_corr"][i][j]),
                    Tolerance(abs=tol),
                    note=f"tolerance capped at 0.9 × the smallest gap between the scenarios' targets "
                    f"({corr_cap[(i, j)]:.3g})"
                    if tol == corr_cap[(i, j)]
                    else "",
                )
            )
    c12 = {n: v["corr"][0][1] for n, v in scenarios.items()}
    sgld, s2, s4 = c12["SGLD"], c12["S-SGLD {[w1,w2],[w3,b]}"], c12["S-SGLD {w1},{w2},{w3},{b}"]
    sd4 = c12["Sd-SGLD {w1},{w2},{w3},{b}"]
    rows.append(
        Comparison(
            "figure: SGLD shows the w1-w2 dependence, fully factorised S-SGLD removes most of it",
            [sgld, s4],
            "strong vs weak",
            Claim(
                "|corr(w1,w2)| > 0.8 for SGLD, and below a third of that for S-SGLD "
                "{w1},{w2},{w3},{b} (exact target 0)",
                lambda v: abs(v[0]) > 0.8 and abs(v[1]) < abs(v[0]) / 3,
            ),
        )
    )
    rows.append(
        Comparison(
            "figure: S-SGLD {[w1,w2],[w3,b]} keeps a w1-w2 dependence (same group)",
            [s2, s4],
            "kept",
            Claim(
                "|corr(w1,w2)| of S-SGLD {[w1,w2],[w3,b]} > 0.5 (exact target 0.67) and "
                "above the fully factorised one's",
                lambda v: abs(v[0]) > 0.5 and abs(v[0]) > abs(v[1]),
            ),
        )
    )
    rows.append(
        Comparison(
            "Theorem 3: Sd-SGLD (rho = 0.5) lies between SGLD and S-SGLD",
            [sgld, sd4, s4],
            "between",
            Claim(
                "|corr(w1,w2)|: S-SGLD - 0.05 <= Sd-SGLD <= SGLD + 0.05 (four groups)",
                lambda v: abs(v[2]) - 0.05 <= abs(v[1]) <= abs(v[0]) + 0.05,
            ),
        )
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
