"""Fig. 2 of Li, Chen, Carlson & Carin (2016): pSGLD against SGLD for Bayesian logistic
regression on the Statlog Australian credit data (Girolami & Calderhead 2011): (a) the time
per minimum effective sample and (b) the error of the weight estimates against a long
exact reference chain, over a range of step sizes.

Protocol (the paper's §"Bayesian Logistic Regression"): N = 690, D = 14 (the attributes
standardised, no intercept, as the paper's D), prior N(0, σ² I) with σ² = 100, minibatch 5,
T = 5,000 iterations, step sizes ε from 10⁻⁷ to 10⁻⁴, 50 runs per sampler and step size.
The paper's figure gives no numbers, so every row is one of its claims, judged on ours:

* (a) "pSGLD generates much larger ESS compared to SGLD": at each step size, the median
  over runs of the minimum (over the 14 weights) bulk ESS of pSGLD above SGLD's;
  "especially when the stepsize is large": the ratio at the largest step size above the
  ratio at the smallest one;
* (b) "pSGLD provides smaller error in estimating weights": at each step size, the mean over
  runs of the mean absolute error of the posterior-mean estimate of the weights against the
  reference, pSGLD below SGLD.

Reference ("ground truth": the paper's 10⁶ HMC samples with Metropolis–Hastings): HMC with
a Metropolis–Hastings correction on the full data (float64), preconditioned by the Laplace
covariance at the MAP (:func:`reference_hmc`; the chains' Monte Carlo standard error is in
the report and is far below the errors compared).

Step sizes: the paper's eq. (3) reads ε on the summed energy (Δθ = (ε/2)∇log p̃ + N(0, ε)),
which is ``SGLD(lr=ε)`` / ``PSGLD(lr=ε)`` in the library's convention (docs/conventions.md);
every ε of the range is stable here (λ_max of the Hessian at the MAP is reported, ε·λ_max/2
≪ 2), and at 10⁻⁷ the chains barely move in 5,000 steps, as the paper says they do. The
per-datum reading of the authors' Matlab code (ε on the mean log-likelihood, lr = 2ε/N) would
leave every chain within ~1 posterior standard deviation of its start in 5,000 steps.
Temperature: the posterior (T = 1) and the authors' code (noise divided by N: T = 1/N) side
by side (issue 26 §2), the tally on T = 1/N.

Data: the Statlog file (:func:`structmc.data.load_australian`, checksummed) when found;
otherwise, with ``data="auto"``, a synthetic stand-in of the same shape (correlated
standardised covariates, labels from a random θ), said in the report and not judged.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from structmc import PSGLD, SGLD, LogDensityEnergy, sample
from structmc.data import DataNotFoundError, load_australian
from structmc.diagnostics import ess_bulk

from . import REGISTRY, resolve_preset
from ._common import GaussianLogPrior, logistic_log_likelihood
from ._report import Claim, Comparison, write_report
from ._shared import (
    AUTHORS_TEMPERATURE_1_OVER_N,
    check_temperatures,
    paper_setting_of,
    pyplot,
    resolve_temperature,
    restores_globals,
    temperature_label,
    threads,
)

NAME = "psgld-australian"
SAMPLERS = ("pSGLD", "SGLD")
FIGURE = "fig2_ess_and_weight_error.png"
# "pSGLD generates much larger ESS": a ratio of medians below 1.1 is within the spread of runs that
# barely move (at ε ≤ 1e-5 both samplers' minimum ESS over 4,500 draws is ~1.3, equal to 3 digits)
ESS_MARGIN = 1.1


@dataclass
class Config:
    step_sizes: tuple[float, ...] = (1e-7, 1e-6, 1e-5, 1e-4)  # ε, the paper's range
    num_runs: int = 50  # runs per sampler and step size (vectorised as chains)
    num_steps: int = 5_000  # T
    burn_in: int = 500  # ours (the paper states none): the first 10 % are not averaged
    batch_size: int = 5
    prior_var: float = 100.0  # σ²
    alpha: float = 0.99  # pSGLD's RMSprop decay
    lam: float = 1e-5  # pSGLD's λ
    temperatures: tuple[float | str, ...] = (1.0, "1/N")
    reference_chains: int = 16
    reference_steps: int = 20_000  # per chain, after as many warm-up steps / 10
    reference_leapfrog: int = 8
    reference_step: float = 0.5  # on the Laplace-whitened scale
    data: str = "auto"  # "files", "auto" (synthetic stand-in when missing; tiny only) or "synthetic"
    download: bool = False  # fetch the Statlog file (checksummed) when missing: structmc reproduce --download
    data_dir: str | None = None
    seed: int = 0
    threads: int | None = 1


PRESETS = {
    "tiny": Config(
        step_sizes=(1e-6, 1e-4),
        num_runs=6,
        num_steps=400,
        burn_in=40,
        reference_chains=4,
        reference_steps=1_000,
        data="auto",
    ),
    "quick": Config(num_runs=20, reference_steps=5_000),
    "full": Config(step_sizes=(1e-7, 3e-7, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4), reference_steps=62_500),
}


# ---------------------------------------------------------------------------------------------
# data and reference
# ---------------------------------------------------------------------------------------------
def synthetic_australian(seed: int = 0, n: int = 690, d: int = 14) -> tuple[Tensor, Tensor]:
    """A stand-in of the Statlog set's shape: standardised covariates with correlations, labels
    from a random θ (for tests and a machine without the file)."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d) + torch.eye(d, dtype=torch.float64)
    x = torch.randn(n, d, generator=g, dtype=torch.float64) @ mix
    x = (x - x.mean(0)) / x.std(0, unbiased=False)
    theta = torch.randn(d, generator=g, dtype=torch.float64)
    y = (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid(x @ theta)).to(torch.float64)
    return x.float(), y.float()


def load(cfg: Config) -> tuple[Tensor, Tensor, dict]:
    if cfg.data != "synthetic":
        try:
            d = load_australian(data_dir=cfg.data_dir, download=cfg.download)
            return d.x_train, d.y_train, {"source": "files", "description": f"Statlog Australian ({d.meta['source']})"}
        except DataNotFoundError as err:
            if cfg.data == "files":
                raise
            reason = str(err).splitlines()[0]
    else:
        reason = "data='synthetic'"
    x, y = synthetic_australian(cfg.seed)
    return x, y, {"source": "synthetic", "description": f"synthetic stand-in, 690 x 14 ({reason})"}


def _energy_grad(theta: Tensor, x: Tensor, y: Tensor, prior_var: float) -> tuple[Tensor, Tensor]:
    """Full-data energy U(θ) = −log p(θ | data) + const and ∇U for chains ``theta [C, D]``."""
    logits = theta @ x.T
    u = (
        torch.nn.functional.binary_cross_entropy_with_logits(logits, y.expand_as(logits), reduction="none").sum(1)
        + 0.5 * theta.square().sum(1) / prior_var
    )
    grad = (torch.sigmoid(logits) - y) @ x + theta / prior_var
    return u, grad


def laplace(x: Tensor, y: Tensor, prior_var: float, steps: int = 50) -> tuple[Tensor, Tensor]:
    """MAP (Newton's method) and the Hessian there, float64."""
    x, y = x.double(), y.double()
    theta = torch.zeros(x.shape[1], dtype=torch.float64)
    eye = torch.eye(x.shape[1], dtype=torch.float64) / prior_var
    for _ in range(steps):
        p = torch.sigmoid(x @ theta)
        grad = x.T @ (p - y) + theta / prior_var
        hess = (x.T * (p * (1 - p))) @ x + eye
        theta = theta - torch.linalg.solve(hess, grad)
    p = torch.sigmoid(x @ theta)
    return theta, (x.T * (p * (1 - p))) @ x + eye


def reference_hmc(x: Tensor, y: Tensor, cfg: Config) -> dict:
    """The exact reference: HMC with a Metropolis–Hastings accept step on the full data
    (float64), with the Laplace covariance as inverse mass matrix, ``reference_chains`` chains
    started at the MAP, ``reference_steps`` kept iterations after ``reference_steps // 10``
    warm-up ones. Returns the posterior mean, its Monte Carlo standard error (batch means),
    the acceptance rate and the Laplace quantities."""
    x, y = x.double(), y.double()
    mode, hess = laplace(x, y, cfg.prior_var)
    chol = torch.linalg.cholesky(torch.linalg.inv(hess))  # θ = mode + L z: z is near N(0, I)
    g = torch.Generator().manual_seed(cfg.seed + 99_991)
    C, D, h, L = cfg.reference_chains, x.shape[1], cfg.reference_step, cfg.reference_leapfrog

    def u_grad_z(z: Tensor) -> tuple[Tensor, Tensor]:
        u, grad = _energy_grad(mode + z @ chol.T, x, y, cfg.prior_var)
        return u, grad @ chol

    z = torch.zeros(C, D, dtype=torch.float64)
    u, gz = u_grad_z(z)
    warm = cfg.reference_steps // 10
    total = torch.zeros(D, dtype=torch.float64)
    batches, accepted = [], 0.0
    batch_sum, batch_len = torch.zeros(C, D, dtype=torch.float64), max(1, cfg.reference_steps // 20)
    for it in range(warm + cfg.reference_steps):
        p0 = torch.randn(C, D, generator=g, dtype=torch.float64)
        hh = h * (0.8 + 0.4 * torch.rand((), generator=g, dtype=torch.float64))  # jittered step
        zn, p, gn = z, p0 - 0.5 * hh * gz, gz
        for k in range(L):
            zn = zn + hh * p
            un, gn = u_grad_z(zn)
            if k < L - 1:
                p = p - hh * gn
        p = p - 0.5 * hh * gn
        log_ratio = u - un + 0.5 * (p0.square().sum(1) - p.square().sum(1))
        accept = torch.log(torch.rand(C, generator=g, dtype=torch.float64)) < log_ratio
        z = torch.where(accept[:, None], zn, z)
        u = torch.where(accept, un, u)
        gz = torch.where(accept[:, None], gn, gz)
        if it >= warm:
            accepted += float(accept.double().mean())
            theta = mode + z @ chol.T
            total += theta.sum(0)
            batch_sum += theta
            if (it - warm + 1) % batch_len == 0:
                batches.append(batch_sum / batch_len)
                batch_sum = torch.zeros(C, D, dtype=torch.float64)
    n = cfg.reference_steps * C
    mean = total / n
    bm = torch.stack(batches).reshape(-1, D)  # [batches × chains, D]
    mcse = bm.std(0) / math.sqrt(bm.shape[0])
    return {
        "mean": mean,
        "mcse": mcse,
        "acceptance": accepted / cfg.reference_steps,
        "map": mode,
        "laplace_sd": torch.linalg.inv(hess).diagonal().sqrt(),
        "hessian_max_eigenvalue": float(torch.linalg.eigvalsh(hess)[-1]),
        "draws": n,
    }


# ---------------------------------------------------------------------------------------------
# the runs
# ---------------------------------------------------------------------------------------------
def make_sampler(name: str, step: float, cfg: Config, temperature: float):
    """The paper's eq. (3)/(4) with ε on the summed energy: ``lr = ε`` (see the docstring)."""
    if name == "pSGLD":
        return PSGLD(step, alpha=cfg.alpha, eps=cfg.lam, temperature=temperature)
    if name == "SGLD":
        return SGLD(step, temperature=temperature)
    raise ValueError(f"unknown sampler {name!r}; choose from {list(SAMPLERS)}")


def run_setting(
    name: str, step: float, temperature: float, x: Tensor, y: Tensor, ref_mean: Tensor, cfg: Config
) -> dict:
    """``num_runs`` independent runs (as chains) of one sampler at one step size: per run the
    minimum bulk ESS over the weights and the mean absolute error of the posterior-mean
    estimate against the reference; the wall time per run."""
    energy = LogDensityEnergy(
        dim=x.shape[1],
        log_likelihood=logistic_log_likelihood,
        log_prior=GaussianLogPrior(cfg.prior_var),
        num_data=len(y),
    )
    t0 = time.perf_counter()
    chain = sample(
        energy,
        torch.zeros(cfg.num_runs, x.shape[1]),
        make_sampler(name, step, cfg, temperature),
        cfg.num_steps,
        data=(x, y),
        batch_size=cfg.batch_size,
        num_chains=cfg.num_runs,
        burn_in=cfg.burn_in,
        seed=cfg.seed + 7919 * SAMPLERS.index(name),
        progress=False,
    )
    seconds = (time.perf_counter() - t0) / cfg.num_runs
    draws = chain.samples.double()  # [runs, kept, D]
    min_ess = [float(ess_bulk(draws[k : k + 1]).min()) for k in range(cfg.num_runs)]
    error = (draws.mean(1) - ref_mean).abs().mean(1)  # [runs]
    finite = [e for e in min_ess if math.isfinite(e)]
    return {
        "min_ess_per_run": min_ess,
        "median_min_ess": float(torch.tensor(finite).median()) if finite else float("nan"),
        "weight_error_per_run": error.tolist(),
        "weight_error": float(error.mean()),
        "weight_error_se": float(error.std() / math.sqrt(len(error))) if len(error) > 1 else None,
        "seconds_per_run": seconds,
        "seconds_per_min_ess": seconds / float(torch.tensor(finite).median()) if finite else None,
    }


def comparisons(cfg: Config, results: dict, synthetic: bool = False, setting: str = "") -> list[Comparison]:
    """The paper's claims on ``results[sampler][step] = {"median_min_ess", "weight_error"}``, one
    row per step size of the config (the paper states its range, 1e-7 to 1e-4, not its grid). A
    sampler or step missing from ``results``, or the synthetic stand-in: the rows stay, "not run"
    (issue 35 §3)."""
    stand_in = "the run used a synthetic stand-in for the Statlog file" if synthetic else ""

    def got(m, step, key):
        return results.get(m, {}).get(step, {}).get(key)

    def why(step_list, key) -> str:
        missing = [f"{m} at ε = {st:g}" for st in step_list for m in SAMPLERS if got(m, st, key) is None]
        return stand_in or ("no value from this run: " + ", ".join(missing) if missing else "")

    rows = []
    for step in cfg.step_sizes:
        ess = [got(m, step, "median_min_ess") for m in SAMPLERS]
        rows.append(
            Comparison(
                f"Fig. 2a: median minimum ESS, ε = {step:g} (pSGLD, SGLD)",
                ess,
                "pSGLD > SGLD",
                Claim(
                    f"pSGLD's median minimum ESS at least {ESS_MARGIN:g}x SGLD's ('much larger')",
                    lambda v: v[0] >= ESS_MARGIN * v[1],
                ),
                setting=setting,
                not_run=why([step], "median_min_ess"),
            )
        )
    lo, hi = min(cfg.step_sizes), max(cfg.step_sizes)
    if lo != hi:
        missing = why([lo, hi], "median_min_ess")
        ratio = (
            None
            if missing
            else [
                results["pSGLD"][s]["median_min_ess"] / results["SGLD"][s]["median_min_ess"]
                if results["SGLD"][s]["median_min_ess"] > 0 and results["pSGLD"][s]["median_min_ess"] > 0
                else math.nan  # a ratio of implausible ESS values (≤ 0) is no ratio
                for s in (lo, hi)
            ]
        )
        rows.append(
            Comparison(
                f"Fig. 2a: ESS ratio pSGLD / SGLD at ε = {lo:g} and {hi:g}",
                ratio,
                "larger at the largest step",
                Claim("the pSGLD/SGLD ESS ratio grows from the smallest to the largest step", lambda v: v[1] > v[0]),
                setting=setting,
                valid=(0.0, math.inf),
                not_run=missing,
            )
        )
    for step in cfg.step_sizes:
        err = [got(m, step, "weight_error") for m in SAMPLERS]
        rows.append(
            Comparison(
                f"Fig. 2b: weight error, ε = {step:g} (pSGLD, SGLD)",
                err,
                "pSGLD < SGLD",
                Claim("pSGLD's mean absolute weight error below SGLD's", lambda v: v[0] < v[1]),
                setting=setting,
                valid=(0.0, math.inf),
                not_run=why([step], "weight_error"),
            )
        )
    return rows


def rejudge(report: dict) -> list[Comparison]:
    """The rows of a written report rebuilt from its numbers and config (issue 35 §7)."""
    fields: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in report["config"].items()
        if k in Config.__dataclass_fields__
    }
    cfg = Config(**fields)
    nums = report["numbers"]
    synthetic = nums["data"].get("source") != "files" or bool(report.get("stand_in"))
    by_t = nums["results"]
    several = len(by_t) > 1
    rows = []
    for label, res in by_t.items():
        results = {
            m: {s: by_step[f"{s:g}"] for s in cfg.step_sizes if f"{s:g}" in by_step} for m, by_step in res.items()
        }
        rows += comparisons(cfg, results, synthetic, label if several else "")
    return rows


STAND_IN = "a synthetic stand-in of the Statlog set's shape (690 x 14, correlated covariates, labels from a random θ)"


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/psgld-australian",
    progress: bool | None = None,
    *,
    seed: int | None = None,
    resume: bool = False,
) -> dict:
    """Run the experiment and write ``report.json``, ``report.md`` and the figure to
    ``out_dir``. The runs take seconds to minutes, so ``resume`` recomputes them."""
    cfg, preset = resolve_preset(config, PRESETS, seed)
    check_temperatures(cfg.temperatures)
    if not cfg.step_sizes or min(cfg.step_sizes) <= 0:
        raise ValueError(f"step_sizes must be positive, got {cfg.step_sizes}")
    if cfg.num_runs < 2 or not 0 <= cfg.burn_in < cfg.num_steps - 4:
        raise ValueError("need num_runs >= 2 and 0 <= burn_in < num_steps - 4")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    with threads(cfg.threads):
        x, y, source = load(cfg)
        synthetic = source["source"] != "files"
        ref = reference_hmc(x, y, cfg)
        temperatures = {temperature_label(t): resolve_temperature(t, len(y)) for t in cfg.temperatures}
        several = len(temperatures) > 1
        by_setting: dict = {}
        rows: list[Comparison] = []
        for label, t in temperatures.items():
            res = {
                m: {s: run_setting(m, s, t, x, y, ref["mean"].float(), cfg) for s in cfg.step_sizes} for m in SAMPLERS
            }
            by_setting[label] = res
            rows += comparisons(cfg, res, synthetic, label if several else "")
    paper_setting = paper_setting_of(temperatures, AUTHORS_TEMPERATURE_1_OVER_N)
    figures = [FIGURE] if _plot(out / FIGURE, cfg, by_setting, paper_setting) else []
    lam = ref["hessian_max_eigenvalue"]
    numbers = {
        "data": {**source, "num_data": len(y), "dim": x.shape[1]},
        "reference": {
            "mean": ref["mean"].tolist(),
            "mcse_max": float(ref["mcse"].max()),
            "acceptance": ref["acceptance"],
            "draws": ref["draws"],
            "map": ref["map"].tolist(),
            "laplace_sd": ref["laplace_sd"].tolist(),
            "hessian_max_eigenvalue": lam,
        },
        "temperatures": temperatures,
        "results": {
            label: {m: {f"{s:g}": r for s, r in by_step.items()} for m, by_step in res.items()}
            for label, res in by_setting.items()
        },
    }
    notes = [
        f"data: {source['description']}",
        f"reference: HMC with Metropolis–Hastings, {ref['draws']:,} draws, acceptance {ref['acceptance']:.2f}; the "
        f"largest Monte Carlo standard error of its mean is {float(ref['mcse'].max()):.4f}, against weight errors "
        f"of {min(r[s]['weight_error'] for res in by_setting.values() for r in res.values() for s in cfg.step_sizes):.3f} "
        "and more",
        "ESS: the bulk ESS (Vehtari et al. 2021) of each run's post-burn-in draws, its minimum over the 14 weights; "
        "the median over runs (a run that does not move has an undefined ESS and is left out). Time per minimum ESS "
        "= the wall time per run / that median (pSGLD and SGLD cost about the same per step)",
        "weight error: mean over the 14 weights of |run's posterior-mean estimate − reference mean|, averaged over "
        "runs; the paper's figure shows the same comparison (its exact error measure is not stated)",
    ]
    if synthetic:
        notes.append("the Statlog file was not found: on the stand-in every claim is not run")
    step_sizes = [
        "ε on the summed energy (the paper's eq. 3): SGLD(lr=ε), PSGLD(lr=ε, alpha="
        f"{cfg.alpha}, eps={cfg.lam}); λ_max of the Hessian at the MAP = {lam:.4g}, so the largest ε·λ_max/2 = "
        f"{max(cfg.step_sizes) * lam / 2:.3g} (stable)",
        "temperatures: " + ", ".join(f"{k} (= {v:.3g})" for k, v in temperatures.items()),
    ]
    reductions = []
    if cfg.num_runs < 50 or cfg.num_steps < 5_000:
        reductions.append(f"{cfg.num_runs} runs of {cfg.num_steps:,} steps instead of 50 of 5,000")
    if ref["draws"] < 10**6:
        reductions.append(f"reference: {ref['draws']:,} HMC draws instead of 10⁶ (its error is stated in the notes)")
    return write_report(
        out,
        experiment=REGISTRY.get(NAME),
        preset=preset,
        config=asdict(cfg),
        seed=cfg.seed,
        comparisons=rows,
        numbers=numbers,
        wall_time_s=time.perf_counter() - t_start,
        step_sizes=step_sizes,
        reductions=reductions,
        figures=figures,
        notes=notes,
        paper_setting=paper_setting,
        stand_in=f"{STAND_IN}: {source['description']}" if synthetic else "",
    )


def _plot(path: Path, cfg: Config, by_setting: dict, paper_setting: str | None) -> bool:
    plt = pyplot()
    if plt is None:  # pragma: no cover
        return False
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    steps = list(cfg.step_sizes)
    for label, res in by_setting.items():
        ls = "-" if paper_setting in (None, label) else ":"
        for m, color in zip(SAMPLERS, ("tab:red", "tab:blue")):
            t = [res[m][s]["seconds_per_min_ess"] or float("nan") for s in steps]
            e = [res[m][s]["weight_error"] for s in steps]
            axes[0].plot(steps, t, marker="o", ls=ls, color=color, label=f"{m}, {label}")
            axes[1].plot(steps, e, marker="o", ls=ls, color=color, label=f"{m}, {label}")
    axes[0].set(xscale="log", yscale="log", xlabel="step size ε", ylabel="seconds per minimum ESS", title="(a)")
    axes[1].set(xscale="log", yscale="log", xlabel="step size ε", ylabel="weight error", title="(b)")
    axes[0].legend(fontsize=7)
    fig.suptitle("BLR on Australian (pSGLD Fig. 2, ours)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


__all__ = [
    "Config",
    "PRESETS",
    "run",
    "comparisons",
    "rejudge",
    "reference_hmc",
    "laplace",
    "synthetic_australian",
    "make_sampler",
    "run_setting",
]
