"""Default demo: Bayesian linear regression on scikit-learn's diabetes data, where the exact
posterior is known, sampled by SGLD, pSGLD, SGHMC, SGNHT and SGLD-CV on minibatches.

The model is y = Xw + b + N(0, σ²) with σ fixed at the least-squares residual scale of the
training split and a N(0, σ₀²) prior; the posterior is Gaussian with precision
H = AᵀA/σ² + I/σ₀² (A = [X, 1]) and mean H⁻¹Aᵀy/σ². The report compares every sampler's
posterior means and standard deviations with the exact ones and gives test RMSE / NLL of the
posterior predictive. Features (s1, s2: total and LDL cholesterol) are strongly correlated, so
the posterior is ill-conditioned (condition number ~400) — a realistic small test of mixing.

The library's own demo (``structmc demo``; issue 38): it ships with the ``structmc`` wheel, not
with the papers' reproductions (the companion package ``structmc_papers``, whose registry lists
it as ``demo`` too). ``run(preset_or_config, out_dir)`` as an experiment's.
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import nn

from . import PSGLD, SGHMC, SGLD, SGNHT, ControlVariate, ModuleEnergy, find_map, predictive, sample
from .data.sklearn_sets import load_builtin
from .diagnostics import regression_metrics
from .run import restored_globals


@dataclass
class Config:
    num_steps: int = 20_000
    burn_in: int = 2_000
    thin: int = 10
    num_chains: int = 4
    batch_size: int = 32
    prior_std: float = 1.0
    seed: int = 0
    # step sizes in each sampler's own parameterisation (docs/conventions.md)
    sgld_lr: float = 1e-4
    psgld_lr: float = 1e-5
    sghmc_lr: float = 2e-6
    sghmc_friction: float = 0.05
    sgnht_lr: float = 2e-6
    sgnht_a: float = 0.05
    samplers: tuple[str, ...] = ("SGLD", "pSGLD", "SGHMC", "SGNHT", "SGLD-CV")


PRESETS = {
    "tiny": Config(num_steps=400, burn_in=100, thin=5, num_chains=2),
    "quick": Config(),
    "full": Config(num_steps=200_000, burn_in=20_000, thin=20, num_chains=8),
}


def exact_posterior(x: torch.Tensor, y: torch.Tensor, noise_std: float, prior_std: float):
    """Mean and covariance of the Gaussian posterior over (w, b) of nn.Linear(d, 1)."""
    A = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1).double()
    H = A.T @ A / noise_std**2 + torch.eye(A.shape[1], dtype=A.dtype) / prior_std**2
    cov = torch.linalg.inv(H)
    return cov @ (A.T @ y.double()) / noise_std**2, cov


def _sampler(name: str, cfg: Config):
    return {
        "SGLD": lambda: SGLD(cfg.sgld_lr),
        "SGLD-CV": lambda: SGLD(cfg.sgld_lr),
        "pSGLD": lambda: PSGLD(cfg.psgld_lr),
        "SGHMC": lambda: SGHMC(cfg.sghmc_lr, friction=cfg.sghmc_friction),
        "SGNHT": lambda: SGNHT(cfg.sgnht_lr, a=cfg.sgnht_a),
    }[name]()


def _resolve_preset(config, seed: int | None = None) -> Config:
    """A copy of ``PRESETS[name]`` for a preset name (a run never changes the presets), or the
    config itself; ``seed`` overrides its seed in a copy (``structmc_papers.resolve_preset``'s
    rules for a config without data files)."""
    if isinstance(config, str):
        if config not in PRESETS:
            raise ValueError(f"unknown preset {config!r}; choose from {sorted(PRESETS)}")
        config = replace(PRESETS[config])
    return config if seed is None else replace(config, seed=int(seed))


def _restores_globals(run):
    @functools.wraps(run)
    def wrapper(*args, **kwargs):
        with restored_globals():
            return run(*args, **kwargs)

    setattr(wrapper, "restores_globals", True)  # noqa: B010  (the experiments' mark, tests/experiments/test_shared.py)
    return wrapper


@_restores_globals
def run(config: Config | str = "quick", out_dir: str | Path = "runs/demo", progress: bool | None = None) -> dict:
    """Sample the five samplers, compare them with the exact posterior, write ``report.json``,
    ``report.md`` and ``demo.png`` under ``out_dir``; the report."""
    cfg = _resolve_preset(config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = load_builtin("diabetes", seed=cfg.seed)
    x, y = data.x_train, data.y_train
    A = torch.cat([x, torch.ones(len(x), 1)], 1).double()
    resid = y.double() - A @ torch.linalg.lstsq(A, y.double().unsqueeze(1)).solution.squeeze(1)
    noise_std = float(resid.std())
    mean, cov = exact_posterior(x, y, noise_std, cfg.prior_std)
    exact_sd = cov.diagonal().sqrt()

    torch.manual_seed(cfg.seed)
    energy = ModuleEnergy(nn.Linear(x.shape[1], 1), "gaussian", noise_std=noise_std, prior_std=cfg.prior_std)
    map_estimate = find_map(energy, energy.initial_position(), data=(x, y), batch_size=64, num_steps=3000, lr=1e-2)

    results, chains = {}, {}
    for name in cfg.samplers:
        gradient = ControlVariate(map_estimate) if name.endswith("-CV") else "minibatch"
        t0 = time.perf_counter()
        chain = sample(
            energy,
            map_estimate,
            _sampler(name, cfg),
            cfg.num_steps,
            data=(x, y),
            batch_size=cfg.batch_size,
            burn_in=cfg.burn_in,
            thin=cfg.thin,
            seed=cfg.seed,
            num_chains=cfg.num_chains,
            gradient=gradient,
            progress=progress,
        )
        seconds = time.perf_counter() - t0
        draws = chain.flat_draws().double()
        z_mean = ((draws.mean(0) - mean) / exact_sd).abs()
        sd_ratio = draws.std(0) / exact_sd
        pred = predictive(energy, chain, data.x_test)
        reg = regression_metrics(pred["mean"].double(), pred["var"].double(), data.y_test.double())
        results[name] = {
            "max_abs_mean_error_in_posterior_sd": float(z_mean.max()),
            "sd_ratio_min": float(sd_ratio.min()),
            "sd_ratio_max": float(sd_ratio.max()),
            "sd_ratio_median": float(sd_ratio.median()),
            "test_rmse": reg["rmse"] * data.y_scale,
            "test_nll": reg["nll"],
            "seconds": seconds,
            "ms_per_step": 1e3 * seconds / cfg.num_steps,
        }
        chains[name] = chain
    exact_pred_mean = torch.cat([data.x_test, torch.ones(len(data.x_test), 1)], 1).double() @ mean
    report = {
        "experiment": "demo: Bayesian linear regression, diabetes (scikit-learn)",
        "config": asdict(cfg),
        "noise_std": noise_std,
        "num_train": len(x),
        "num_test": len(data.x_test),
        "exact_test_rmse": float((exact_pred_mean - data.y_test.double()).square().mean().sqrt()) * data.y_scale,
        "samplers": results,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "report.md").write_text(_markdown(report))
    _plot(out / "demo.png", chains, mean, cov, energy)
    return report


def _markdown(report: dict) -> str:
    cfg = report["config"]
    lines = [
        "# structmc demo: Bayesian linear regression (diabetes)",
        "",
        f"{report['num_train']} training / {report['num_test']} test points, 10 features + bias, known noise "
        f"σ = {report['noise_std']:.3f}, prior N(0, {cfg['prior_std']}²). {cfg['num_chains']} chains × "
        f"{cfg['num_steps']} steps (burn-in {cfg['burn_in']}, thin {cfg['thin']}), minibatch {cfg['batch_size']}.",
        "",
        "Exact posterior vs samples (per coordinate, 11 coordinates):",
        "",
        "| sampler | max abs mean error (posterior sd) | sd ratio min / median / max | test RMSE | test NLL | ms/step |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in report["samplers"].items():
        lines.append(
            f"| {name} | {r['max_abs_mean_error_in_posterior_sd']:.3f} | {r['sd_ratio_min']:.2f} / "
            f"{r['sd_ratio_median']:.2f} / {r['sd_ratio_max']:.2f} | {r['test_rmse']:.2f} | "
            f"{r['test_nll']:.3f} | {r['ms_per_step']:.3f} |"
        )
    lines += [
        "",
        f"Exact posterior-mean test RMSE: {report['exact_test_rmse']:.2f}.",
        "",
        "An sd ratio above 1 is the O(ε) discretisation and minibatch-noise inflation of each sampler "
        "(smaller steps shrink it); see docs/conventions.md.",
        "",
        "![demo](demo.png)",
        "",
    ]
    return "\n".join(lines)


def _plot(path: Path, chains: dict, mean: torch.Tensor, cov: torch.Tensor, energy: ModuleEnergy) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - plotting is optional
        return
    i, j = 4, 5  # s1, s2: the most correlated pair
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    for name, chain in chains.items():
        d = chain.flat_draws()
        ax.scatter(d[:, i], d[:, j], s=2, alpha=0.25, label=name)
    evals, evecs = torch.linalg.eigh(cov[[i, j]][:, [i, j]])
    t = torch.linspace(0, 2 * math.pi, 200, dtype=cov.dtype)
    ellipse = (evecs @ (2 * evals.sqrt().unsqueeze(1) * torch.stack([t.cos(), t.sin()]))).T + mean[[i, j]]
    ax.plot(ellipse[:, 0], ellipse[:, 1], "k-", lw=2, label="exact 2σ")
    ax.set(xlabel="w[s1]", ylabel="w[s2]", title="pair plot vs exact posterior")
    ax.legend(markerscale=4, fontsize=8)
    ax = axes[1]
    names = list(chains)
    sd = cov.diagonal().sqrt()
    for _k, name in enumerate(names):
        ratio = chains[name].flat_draws().double().std(0) / sd
        ax.plot(range(len(ratio)), ratio, "o-", label=name, ms=3)
    ax.axhline(1.0, color="k", lw=1)
    ax.set(xlabel="coordinate", ylabel="sample sd / exact sd", title="marginal scales")
    ax.legend(fontsize=8)
    ax = axes[2]
    for name, chain in chains.items():
        ax.plot(chain.draw_steps.numpy(), chain.samples[0, :, i].numpy(), lw=0.6, label=name)
    ax.axhline(float(mean[i]), color="k", lw=1)
    ax.set(xlabel="iteration", ylabel="w[s1], chain 0", title="trace (black: exact mean)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
