r"""MAMBA on probabilistic matrix factorisation of MovieLens-100K: Table 2 of Coullon, South &
Nemeth ("Efficient and generalizable tuning strategies for SGMCMC", Sect. 4.2, Fig. 2,
App. C.2, Tables 6 and 7).

Model (App. C.2.1, the reference code; :class:`structmc.models.PMF` through
``structmc.zoo.energy_for("pmf")``): d = 20 latent dimensions, ratings centred on the training
mean, r_ij ~ N(U_iᵀV_j, 1/α) with α = 3, U_i ~ N(μ_U, diag(e^{λ_U})⁻¹), μ_U ~ N(0,
diag(e^{λ_U})⁻¹), e^{λ} ~ Gamma(4, rate 5) (sampled on the log scale, with its Jacobian); the
same for V. θ has 52,580 numbers for MovieLens-100K. Data: the 100,000 ratings of
``movielens-100k/u.data`` (``Config.data_dir``, ``$STRUCTMC_DATA``, a source checkout's
``../shared/data``, or the cache; never downloaded unless ``Config.download``), shuffled 80 % / 20 % with the
data seed (the paper uses one of GroupLens' 80/20 folds; our copy has ``u.data`` only). When
the files are absent (``data="auto"``) a simulated low-rank rating set of the same shape is
used instead (:func:`simulated_ratings`) and the report says so.

Methods, for each of SGLD, SGLD-CV, SGHMC, SGHMC-CV, SGNHT, SGNHT-CV (see
:mod:`structmc_papers._mamba`): MAMBA-KSD over log10 h ∈ {−2, −2.5, ..., −7.5} × batch
{100, 10, 1} % (80,000 / 8,000 / 800 ratings) (× L ∈ {5, 10} for SGHMC): 36 arms (72), with
R = 10 s for the surviving arm (T ≈ 83 s, ≈ 166 s for 72 arms); grid search over the same
steps (× L) at batch 10 %, 2,000 iterations per arm from the MAP plus N(0, 1) noise, ranked
by test RMSE (App. B.1, C.2.2); the heuristic h = 1/N = 10^-4.9 at batch 10 % (L = 10). The
MAP (Adam, lr 1e-2, batch 10 %) is the start of every run and the CV centre. Each chosen arm
runs from the MAP for 20 s; the first 10 % of that budget is burn-in; we report the KSD
(every 10th draw, full-data scores), ξ(σ̂) over all 52,580 coordinates against a reference
chain, the test RMSE (posterior-mean prediction clipped to [1, 5]) and the number of
iterations (Table 7).

Reference posterior: the paper's is NUTS (10,000 draws after 1,000 warm-up, six hours on a
laptop). We use a long SGLD-CV chain instead — batch 10 %, a small step (h = 10^-5.5 in the
paper's units; ``Config.ref_log10_h``), ``ref_iterations`` iterations from the MAP with the
first ``ref_burn_in`` discarded — whose standard deviations carry its own discretisation
and mixing errors (the slow directions of PMF — the precisions λ and the scale of U and V —
need far longer chains than the presets run). It is cached on disk, keyed by the data, d
and the chain settings (``$STRUCTMC_CACHE/mamba-reference``). ξ is therefore agreement with a
long small-step chain, not with the exact posterior; the report says so.

Verdicts compare orderings (see :mod:`~structmc_papers._mamba`); magnitudes are
comparable with Table 2 only in the ``full`` preset on the MovieLens files.

Presets: ``tiny`` (a simulated 60 × 80 rating set, d = 4, 3 step sizes, iteration budgets;
seconds, for CI), ``quick`` (MovieLens-100K with the paper's grids, R = 1.5 s with every draw
kept for the metric (thin 1), 60 iterations per grid arm, 3 s evaluations, a 12,000-iteration
reference: about 5 minutes on a 2-core CPU), ``converged`` (the paper's settings on SGLD, SGLD-CV, SGHMC, SGNHT
and SGNHT-CV, without SGHMC-CV: about 65 minutes, 48 with the reference cached), ``full`` (the paper's settings:
R = 10 s, 2,000 iterations per grid arm, 20 s evaluations, a 200,000-iteration reference; not run here).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from structmc import Budget, find_map
from structmc.data.base import Dataset
from structmc.tuning import Arm, FunctionMetric, Problem
from structmc.zoo import energy_for

from . import _mamba as M
from . import resolve_preset
from ._shared import default_data_dir, progress_log, restores_globals, save_cache

PAPER_R = 10.0  # seconds, App. C.2.3
METHODS = ("MAMBA", "Grid", "Heuristic")

# Table 6: (log10 h, batch %, L) chosen by each method in the paper
PAPER_TABLE6 = {
    "SGLD": {"MAMBA": (-5, 1), "Grid": (-3.5, 10), "Heuristic": (-4.9, 10)},
    "SGLD-CV": {"MAMBA": (-5, 1), "Grid": (-3.5, 10), "Heuristic": (-4.9, 10)},
    "SGHMC": {"MAMBA": (-6, 1, 5), "Grid": (-5, 10, 10), "Heuristic": (-4.9, 10, 10)},
    "SGHMC-CV": {"MAMBA": (-6, 1, 5), "Grid": (-5, 10, 10), "Heuristic": (-4.9, 10, 10)},
    "SGNHT": {"MAMBA": (-5, 10), "Grid": (-5.5, 10), "Heuristic": (-4.9, 10)},
    "SGNHT-CV": {"MAMBA": (-5, 10), "Grid": (-5.5, 10), "Heuristic": (-4.9, 10)},
}
# Table 7: test RMSE and number of samples of the 20 s evaluation runs
PAPER_RMSE = {
    "MAMBA": [1.13, 1.13, 1.13, 1.10, 1.12, 1.12],
    "Grid": [1.25, 1.25, 1.25, 1.25, 1.15, 1.16],
    "Heuristic": [1.13, 1.13, 1.25, 1.25, 1.11, 1.11],
}
PAPER_SAMPLES = {
    "MAMBA": [15681, 11774, 3503, 2045, 9687, 6527],
    "Grid": [10099, 6827, 1184, 848, 9743, 5930],
    "Heuristic": [9946, 6897, 1021, 847, 9683, 6546],
}


@dataclass
class Config:
    data: str = "auto"  # "auto" (MovieLens files if found, else simulated), "files", "simulated"
    data_dir: str | None = None  # default: $STRUCTMC_DATA, else a checkout's ../shared/data, else the cache
    download: bool = False  # let the loader download the GroupLens archive when no local copy exists
    data_seed: int = 0  # the 80/20 split (and the simulator)
    test_fraction: float = 0.2
    sim_users: int = 943  # shape of the simulated stand-in (MovieLens-100K's)
    sim_items: int = 1682
    sim_ratings: int = 100_000
    sim_rank: int = 5
    latent_dim: int = 20  # d (App. C.2.1)
    samplers: tuple = M.SAMPLER_LABELS
    methods: tuple = METHODS
    log10_h: tuple = M.PMF_LOG10_H
    batches: tuple = M.PMF_BATCHES
    R: float = PAPER_R
    budget_kind: str = "seconds"
    eta: int = 3
    grid_iterations: int = 2000  # App. C.2.2
    grid_noise: float = 1.0  # the grid search starts from the MAP plus N(0, 1) noise (App. C.2.2)
    grid_metric: str = "test"  # "test": test RMSE (the paper's), "ksd"
    thin: int = 10
    max_samples: int = 256
    min_samples: int = 10
    metric_cost: float | None = 0.25
    restart: str = "state"
    batching: str = "with_replacement"
    eval_budget: float = 20.0  # Sect. 4.2: 20 s per chosen arm
    eval_kind: str = "seconds"
    eval_burn_in: float = 0.1  # fraction of the evaluation budget discarded before the moments
    eval_thin: int = 10
    eval_ksd_samples: int | None = 1000
    map_steps: int = 5000
    map_lr: float = 1e-2
    map_batch: float = 0.1
    ref_log10_h: float = -5.5  # reference chain: SGLD-CV, batch ref_batch, h in the paper's units
    ref_batch: float = 0.1
    ref_iterations: int = 200_000
    ref_burn_in: int = 20_000
    reference_cache: str | None = "auto"
    plot_traces: bool = True  # metric-by-round plot of every tuning run (tuning/<sampler>/<method>/)
    executor: str | None = None
    threads: int | None = 1
    seed: int = 0
    wall_target: float = 1.5
    factor: float = 1.5  # verdicts: KSD / ξ within x1.5 of the best method
    rmse_factor: float = 1.02  # verdicts: RMSE within 2 % of the best method
    value_k: float = 3.0  # issue 35 §1: a published value reproduced when |ours - paper| <= value_k combined SEs


PRESETS = {
    "tiny": Config(
        data="simulated",
        sim_users=40,
        sim_items=50,
        sim_ratings=800,
        sim_rank=3,
        latent_dim=3,
        log10_h=(-3.0, -4.0, -5.0),
        batches=(1.0, 0.1, 0.01),
        R=8,
        budget_kind="iterations",
        grid_iterations=12,
        thin=1,
        min_samples=2,
        max_samples=32,
        eval_budget=40,
        eval_kind="iterations",
        eval_thin=2,
        eval_ksd_samples=20,
        map_steps=100,
        plot_traces=False,
        ref_log10_h=-4.0,
        ref_iterations=400,
        ref_burn_in=100,
    ),
    "quick": Config(
        R=1.5,
        thin=1,
        grid_iterations=60,
        eval_budget=3.0,
        eval_ksd_samples=150,
        map_steps=2000,
        ref_iterations=12_000,
        ref_burn_in=2000,
    ),
    # converged (issue 24): the paper's run length for Table 2's rows -- MovieLens-100K, R = 10 s, the 12 x 3
    # grids (x L), 2,000 grid-search iterations per arm, 20 s evaluation runs, the 200,000-iteration reference
    # -- on five samplers. Cut: SGHMC-CV (its grid search alone, 24 arms x 2,000 iterations of L = 5 or 10
    # CV leapfrog steps at batch 10 %, takes ~33 min). Estimate for one torch thread on a core of its own, from
    # CPU times measured on the MovieLens files (OMP_NUM_THREADS=1, nice 10, load ~5 on the 2 cores, so CPU
    # time stands for the uncontended wall time; wall was ~2.5x): batch-10 % iterations SGLD 2.9 ms, SGLD-CV
    # 5.3 ms, SGNHT 3.0 ms, SGHMC L = 10 28.5 ms (SGHMC-CV 54.5 ms); a full-data score 27 ms per draw: grid
    # search ~24 min (SGHMC 17 of them), MAMBA ~13 min (1.5 T: 4 x 83 s + 166 s), evaluation 15 x (20 s + up to
    # 1,000 scored draws) <= 12 min, reference chain 200,000 x 5.3 ms ~ 18 min (cached after the first run),
    # MAP 15 s: ~65 min in all (~48 min with the reference cached; full, with SGHMC-CV: ~105 min).
    "converged": Config(samplers=("SGLD", "SGLD-CV", "SGHMC", "SGNHT", "SGNHT-CV")),
    "full": Config(),
}


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------


def simulated_ratings(
    num_users: int = 943,
    num_items: int = 1682,
    num_ratings: int = 100_000,
    *,
    rank: int = 5,
    noise_sd: float = 0.9,
    test_fraction: float = 0.2,
    seed: int = 0,
) -> Dataset:
    """A MovieLens-shaped stand-in: low-rank ratings ``clip(round(3.5 + aᵢᵀbⱼ + ε), 1, 5)`` with
    aᵢ, bⱼ ~ N(0, I/√rank), ε ~ N(0, noise_sd²), on ``num_ratings`` distinct (user, item) pairs
    drawn with Zipf-like user activity and item popularity (every user rates at least one
    item), shuffled into train/test like :func:`structmc.data.load_movielens_100k`."""
    if num_ratings > num_users * num_items // 2:
        raise ValueError("num_ratings must be at most half of num_users x num_items")
    g = torch.Generator().manual_seed(int(seed) + 9173)
    a = torch.randn(num_users, rank, generator=g, dtype=torch.float64) / rank**0.25
    b = torch.randn(num_items, rank, generator=g, dtype=torch.float64) / rank**0.25
    w_u = 1.0 / torch.arange(1, num_users + 1, dtype=torch.float64) ** 0.6
    w_i = 1.0 / torch.arange(1, num_items + 1, dtype=torch.float64) ** 0.9
    w_u, w_i = w_u[torch.randperm(num_users, generator=g)], w_i[torch.randperm(num_items, generator=g)]
    first = torch.arange(num_users) * num_items + torch.multinomial(w_i, num_users, True, generator=g)  # one per user
    rest = torch.empty(0, dtype=torch.long)
    need = num_ratings - num_users
    while rest.numel() < need:
        n = 2 * (need - rest.numel()) + 100
        cand = torch.multinomial(w_u, n, True, generator=g) * num_items + torch.multinomial(w_i, n, True, generator=g)
        rest = torch.unique(torch.cat([rest, cand]))
        rest = rest[~torch.isin(rest, first)]
    rest = rest[torch.randperm(rest.numel(), generator=g)[:need]]
    keys = torch.cat([first, rest])
    keys = keys[torch.randperm(keys.numel(), generator=g)]
    users, items = keys // num_items, keys % num_items
    r = 3.5 + (a[users] * b[items]).sum(1) + noise_sd * torch.randn(keys.numel(), generator=g, dtype=torch.float64)
    r = r.round().clamp(1, 5).to(torch.float32)
    x = torch.stack([users, items], 1)
    n_te = int(round(test_fraction * keys.numel()))
    n_tr = keys.numel() - n_te
    meta = {
        "source": "simulated",
        "num_users": num_users,
        "num_items": num_items,
        "mean_rating": float(r[:n_tr].double().mean()),
        "seed": seed,
        "rank": rank,
        "noise_sd": noise_sd,
        "split": f"random {1 - test_fraction:.0%}/{test_fraction:.0%} (seed {seed})",
    }
    return Dataset("movielens-simulated", "ratings", x[:n_tr], r[:n_tr], x[n_tr:], r[n_tr:], meta=meta)


def load_data(cfg: Config) -> tuple[Dataset, dict]:
    """``(dataset, source)``: MovieLens-100K from the local files when found (``cfg.data``
    "auto" / "files"), else the simulated stand-in; ``source`` says which and why."""
    from structmc.data import DataError, load_movielens_100k

    if cfg.data not in ("auto", "files", "simulated"):
        raise ValueError(f"Config.data must be 'auto', 'files' or 'simulated', got {cfg.data!r}")
    reason = "Config.data='simulated'"
    if cfg.data != "simulated":
        root = Path(cfg.data_dir).expanduser() if cfg.data_dir else default_data_dir()
        try:
            if root is None and not cfg.download:
                raise DataError("no data folder: set STRUCTMC_DATA or Config.data_dir")
            ds = load_movielens_100k(
                data_dir=root, download=cfg.download, test_fraction=cfg.test_fraction, seed=cfg.data_seed
            )
            return ds, {
                "source": "files",
                "where": ds.meta.get("source"),
                "split": ds.meta.get("split"),
                "description": "MovieLens-100K u.data (GroupLens), 943 users x 1,682 movies",
            }
        except (DataError, OSError) as err:
            if cfg.data == "files":
                raise
            reason = f"MovieLens files not found ({err})"
    ds = simulated_ratings(
        cfg.sim_users,
        cfg.sim_items,
        cfg.sim_ratings,
        rank=cfg.sim_rank,
        test_fraction=cfg.test_fraction,
        seed=cfg.data_seed,
    )
    return ds, {
        "source": "simulated",
        "reason": reason,
        "split": ds.meta["split"],
        "description": f"simulated low-rank ratings (rank {cfg.sim_rank}), {cfg.sim_users} users x "
        f"{cfg.sim_items} items, {cfg.sim_ratings:,} ratings (mamba_pmf.simulated_ratings)",
    }


def heldout_rmse(samples: Tensor, problem) -> float:
    """Grid search's metric (App. B.1): RMSE of the posterior-mean rating (clipped to [1, 5])
    on ``problem.validation`` (the test set, as the paper)."""
    x, r = problem.validation
    return problem.energy.model.rmse(samples, x[:, 0], x[:, 1], r)


# ---------------------------------------------------------------------------------------------
# reference chain
# ---------------------------------------------------------------------------------------------
def _cache_dir(cfg: Config) -> Path | None:
    if cfg.reference_cache is None:
        return None
    if cfg.reference_cache != "auto":
        return Path(cfg.reference_cache).expanduser()
    root = os.environ.get("STRUCTMC_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "structmc"
    return base / "mamba-reference"


def reference_chain(cfg: Config, problem: Problem, source: dict, shape: tuple) -> dict:
    """Standard deviations (and means) of a long SGLD-CV chain from the MAP (see the module
    docstring); cached on disk."""
    key = (
        f"pmf_{source['source']}_{'x'.join(map(str, shape))}_d{cfg.latent_dim}_seed{cfg.data_seed}"
        f"_h{cfg.ref_log10_h:g}_b{cfg.ref_batch:g}_i{cfg.ref_iterations}_w{cfg.ref_burn_in}_map{cfg.map_steps}"
        f"_{cfg.batching}.pt"
    )
    folder = _cache_dir(cfg)
    path = None if folder is None else folder / key
    if path is not None and path.is_file():
        try:
            ref = torch.load(path, weights_only=False)
            ref["cached"], ref["path"] = True, str(path)
            return ref
        except Exception:
            pass
    spec = M.SAMPLERS["SGLD-CV"]
    arm = Arm(spec.config(10.0**cfg.ref_log10_h), cfg.ref_batch, "cv")
    burn = cfg.ref_burn_in / cfg.ref_iterations
    t0 = time.perf_counter()
    ev = M.evaluate_arm(
        problem,
        arm,
        Budget(iterations=cfg.ref_iterations),
        seed=cfg.seed + 555,
        thin=100,
        max_ksd_samples=None,
        burn_in=burn,
    )
    if ev["error"] is not None or ev["sd"] is None:
        raise FloatingPointError(f"the reference chain failed: {ev['error']}")
    ref = {
        "method": "sgld-cv",
        "description": (
            f"long SGLD-CV chain (batch {100 * cfg.ref_batch:g} %, h = 10^{cfg.ref_log10_h:g} in the "
            f"paper's units, lr = {arm.sampler['lr']:.3g}), {cfg.ref_iterations:,} iterations from the "
            f"MAP, first {cfg.ref_burn_in:,} discarded; not NUTS (the paper's, six hours): its standard "
            "deviations carry its own discretisation and mixing error"
        ),
        "sd": ev["sd"],
        "mean": ev["mean"],
        "num_samples": ev["iterations"],
        "ksd": ev["ksd"],
        "seconds": time.perf_counter() - t0,
    }
    ref["cached"], ref["path"] = False, None if path is None else str(path)
    if path is not None and not save_cache({k: v for k, v in ref.items() if k not in ("cached", "path")}, path):
        ref["path"] = None  # a read-only cache is not an error
    return ref


# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/mamba-pmf",
    progress: bool | None = None,
    *,
    seed: int | None = None,
    resume: bool = False,
) -> dict:
    """Run the experiment; write ``report.json``, ``report.md`` (the common format of
    :mod:`structmc_papers._report`; every number under ``numbers``), the figures and the
    tuning traces (``tuning/<sampler>/<method>/trace.json``) to ``out_dir``; return the report.
    ``seed`` overrides the config's. Every tuner's outcome and evaluation run is saved under
    ``out_dir/units`` when it ends; ``resume=True`` reads back the finished ones of a run cut
    short (same config, else :class:`~._mamba.ResumeMismatch`) and runs the rest."""
    cfg, preset = resolve_preset(config, PRESETS, seed)
    unknown = [s for s in cfg.samplers if s not in M.SAMPLERS] + [m for m in cfg.methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown sampler(s)/method(s) {unknown}; methods are {METHODS}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log = progress_log("mamba-pmf", progress)
    units = M.Units(out, asdict(cfg), resume=resume)
    with M.Threads(cfg.threads):
        return _run(cfg, preset, out, log, units)


def _run(cfg: Config, preset, out: Path, log, units: M.Units | None = None) -> dict:
    t_all = time.perf_counter()
    phases = {}
    say = log or (lambda msg: None)

    t0 = time.perf_counter()
    ds, source = load_data(cfg)
    x, y, x_te, y_te = ds.x_train, ds.y_train, ds.x_test, ds.y_test
    assert x_te is not None and y_te is not None  # load_data always splits off the test ratings
    n_train = int(y.shape[0])
    energy = energy_for(
        "pmf",
        num_data=n_train,
        num_users=ds.meta["num_users"],
        num_items=ds.meta["num_items"],
        dim=cfg.latent_dim,
        mean_rating=ds.meta["mean_rating"],
    )
    pmf = energy.model
    phases["data"] = time.perf_counter() - t0
    say(f"data: {source['source']}, {n_train:,} train ratings, {pmf.dim:,} parameters")

    t0 = time.perf_counter()
    theta_map = find_map(
        energy,
        pmf.init(seed=cfg.seed),
        data=(x, y),
        batch_size=max(1, int(cfg.map_batch * n_train)),
        num_steps=cfg.map_steps,
        lr=cfg.map_lr,
        seed=cfg.seed,
    )
    phases["map"] = time.perf_counter() - t0
    map_rmse = pmf.rmse(theta_map, x_te[:, 0], x_te[:, 1], y_te)
    say(f"MAP in {phases['map']:.1f} s, test RMSE {map_rmse:.3f}")

    problem = Problem(
        energy, theta_map, data=(x, y), centre=theta_map, batching=cfg.batching, validation=(x_te, y_te), seed=cfg.seed
    )
    t0 = time.perf_counter()
    ref = reference_chain(cfg, problem, source, (ds.meta["num_users"], ds.meta["num_items"], n_train))
    phases["reference"] = time.perf_counter() - t0
    ref_sd = torch.tensor(ref["sd"], dtype=torch.float64)
    say(f"reference chain{' (cached)' if ref['cached'] else ''} in {phases['reference']:.1f} s")

    g = torch.Generator().manual_seed(cfg.seed + 13)
    noisy = theta_map + cfg.grid_noise * torch.randn(theta_map.shape, generator=g)
    grid_problem = Problem(
        energy, noisy, data=(x, y), centre=theta_map, batching=cfg.batching, validation=(x_te, y_te), seed=cfg.seed
    )
    grid_metric = FunctionMetric(heldout_rmse, "test_rmse") if cfg.grid_metric == "test" else "ksd"
    settings = M.TuningSettings(
        log10_h=cfg.log10_h,
        batch_fractions=cfg.batches,
        R=cfg.R,
        budget_kind=cfg.budget_kind,
        grid_budget=Budget(iterations=cfg.grid_iterations),
        grid_metric=grid_metric,
        eta=cfg.eta,
        thin=cfg.thin,
        max_samples=cfg.max_samples,
        min_samples=cfg.min_samples,
        metric_cost=cfg.metric_cost,
        restart=cfg.restart,
        executor=cfg.executor,
        seed=cfg.seed,
    )
    t0 = time.perf_counter()
    tuned = M.tune_all(
        cfg.samplers,
        cfg.methods,
        settings,
        problem=problem,
        grid_problem=grid_problem,
        out_dir=out,
        log=log,
        plot_traces=cfg.plot_traces,
        units=units,
    )
    phases["tuning"] = time.perf_counter() - t0

    def extra(draws: Tensor) -> dict:
        return {"test_rmse": pmf.rmse(draws, x_te[:, 0], x_te[:, 1], y_te)}

    eval_budget = (
        Budget(seconds=float(cfg.eval_budget))
        if cfg.eval_kind == "seconds"
        else Budget(iterations=int(cfg.eval_budget))
    )
    t0 = time.perf_counter()
    evals = M.evaluate_all(
        tuned,
        problem,
        eval_budget,
        seed=cfg.seed,
        log=log,
        thin=cfg.eval_thin,
        max_ksd_samples=cfg.eval_ksd_samples,
        burn_in=cfg.eval_burn_in,
        reference_sd=ref_sd,
        extra=extra,
        units=units,
        drop=("sd", "mean"),  # the moments of 52,580 numbers: keep the report small
    )
    phases["evaluation"] = time.perf_counter() - t0
    if units is not None and units.resumed:  # compute seconds over every sitting, not this one's
        phases["tuning"], phases["evaluation"] = units.seconds("tuning"), units.seconds("evaluation")

    comparable = preset == "full" and source["source"] == "files"
    rows = _rows(cfg, tuned, evals, comparable, int(y_te.shape[0]))
    report = {
        "experiment": "mamba-pmf: MAMBA vs grid search vs heuristic on PMF of MovieLens-100K (Coullon et al., Table 2)",
        "preset": preset,
        "config": asdict(cfg),
        "seed": cfg.seed,
        "data": source,
        "num_train": n_train,
        "num_test": int(y_te.shape[0]),
        "num_users": ds.meta["num_users"],
        "num_items": ds.meta["num_items"],
        "num_params": pmf.dim,
        "map_test_rmse": map_rmse,
        "reference": {k: v for k, v in ref.items() if k not in ("sd", "mean")},
        "samplers": list(cfg.samplers),
        "methods": list(cfg.methods),
        "tuning": M.tuned_json(tuned, n_train),
        "evaluation": evals,
        "rows": rows,
        "verdicts": {v: sum(r["verdict"] == v for r in rows) for v in ("agrees", "differs", "n/a")},
        "comparable": comparable,
        "reduced": _reduced(cfg, source),
        "phases_seconds": phases,
        "versions": M.versions(),
        "figures": dict(FIGURES),
    }
    try:
        M.plot_ksd_curves(out / FIGURES["fig2"], evals, "Fig. 2 (ours): KSD of the evaluation runs, PMF")
        M.plot_tuning_time(out / FIGURES["tuning_time"], tuned, cfg.wall_target)
    except ImportError:  # pragma: no cover
        pass
    M.set_wall_seconds(report, t_all, units)
    notes = [
        "Method rows compare orderings, not magnitudes: per sampler, whether a method is within the factor of "
        "the best method, ours against the paper's, on every sampler; magnitudes are on the paper's scale only in the full "
        "preset on the MovieLens files" + (" (this run)." if comparable else " (not this run).")
    ]
    stand_in = ""
    if source.get("source") != "files":
        notes.append(f"DATA: {source.get('description', source.get('source'))} — not MovieLens-100K itself.")
        stand_in = f"{source.get('description', source.get('source'))}, not MovieLens-100K"
    return M.write_rows_report(  # ordering-aware (_mamba.comparison)
        out,
        "mamba-pmf",
        preset=preset,
        cfg=asdict(cfg),
        seed=cfg.seed,
        legacy=report,
        rows=rows,
        wall_time_s=report["wall_seconds"],
        compute_time_s=report.get("compute_seconds"),
        reductions=report["reduced"],
        figures=list(FIGURES.values()),
        markdown=lambda r: _markdown(r, tuned, n_train),
        step_sizes=M.step_size_lines(n_train, cfg.samplers),
        notes=notes,
        stand_in=stand_in,
    )


FIGURES = {"fig2": "fig2_ksd_curves.png", "tuning_time": "tuning_time.png"}


# ---------------------------------------------------------------------------------------------
# verdicts and report
# ---------------------------------------------------------------------------------------------
def _published() -> Mapping[str, Any]:
    from . import REGISTRY

    return REGISTRY.get("mamba-pmf").published


def numbers_of(tuned, evals, methods, num_test: int | None = None) -> dict:
    """What the verdicts read from a run: ``{"ksd" | "xi" | "test_rmse": {method: [value per
    sampler of Table 2's order, None where missing]}, "tuning": {sampler: {method:
    {"wall_over_T"}}}}`` and ``"num_test"`` (the held-out ratings) when given."""
    samplers = list(_published()["samplers"])
    full = {s: (evals.get(s) or {}) for s in samplers}
    out: dict[str, Any] = {k: M.values_table(full, k, methods, samplers) for k in ("ksd", "xi", "test_rmse")}
    out["tuning"] = {
        s: {m: {"wall_over_T": r.get("wall_over_T")} for m, r in by_m.items()} for s, by_m in tuned.items()
    }
    out["chosen"] = M.chosen_of(tuned, samplers)
    if num_test is not None:
        out["num_test"] = int(num_test)
    return out


def _rows(cfg: Config, tuned, evals, comparable: bool, num_test: int | None = None) -> list[dict]:
    methods = [m for m in METHODS if m in cfg.methods]
    return rows(cfg, numbers_of(tuned, evals, methods, num_test), comparable)


def comparisons(cfg: Config, numbers: dict, comparable: bool = False) -> list:
    """The report's rows (:func:`rows`) as :class:`._report.Comparison` s, each under its rule."""
    return [M.comparison(r) for r in rows(cfg, numbers, comparable)]


def rejudge(report: dict) -> list:
    """The rows of a written report rebuilt from its ``numbers`` and ``config`` under today's rules
    (issue 35 §7; ``docs/results/rejudge.py``)."""
    from dataclasses import fields

    names = {f.name for f in fields(Config)}
    given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in report["config"].items()}
    cfg = Config(**{k: v for k, v in given.items() if k in names})
    num = report["numbers"]
    methods = [m for m in METHODS if m in cfg.methods]
    numbers = numbers_of(num["tuning"], num["evaluation"], methods, num.get("num_test"))
    return comparisons(cfg, numbers, comparable=bool(num.get("comparable")))


def value_rows(cfg: Config, numbers: dict, samplers, run, methods) -> list[dict]:
    """Table 2's KSD and ξ(σ̂)×10² and Table 7's test RMSE, cell by cell, each judged on the noise
    of both sides (issue 35 §1; :func:`._mamba.value_rows`). One evaluation run per arm: no spread
    of ours over runs (SE_ours 0 for KSD and ξ: the record has none; a rerun with several seeds
    would give it), the RMSE's test-set SE RMSE/√(2n) (Gaussian residuals); SE_paper the rounding of
    the published value (the paper gives no spread)."""
    pub = _published()
    n_test = int(numbers.get("num_test") or 0)
    one = "SE_ours 0: one evaluation run per arm, no spread over runs in the record"
    ours = {k: {m: numbers[k][m] for m in methods if m in numbers.get(k, {})} for k in ("ksd", "xi", "test_rmse")}
    rmse_se = (lambda v: abs(v) / math.sqrt(2.0 * n_test)) if n_test else None
    return [
        *M.value_rows(
            "ksd",
            "KSD",
            "Table 2",
            ours["ksd"],
            {m: pub["ksd"][m] for m in METHODS},
            samplers,
            run,
            resolution=1.0,
            valid=(0.0, math.inf),
            k=cfg.value_k,
            se_source=one,
        ),
        *M.value_rows(
            "xi",
            "xi(sigma) x 10^2",
            "Table 2",
            ours["xi"],
            {m: pub["sd_rel_error_x100"][m] for m in METHODS},
            samplers,
            run,
            resolution=0.1,
            scale=100.0,
            valid=(0.0, math.inf),
            k=cfg.value_k,
            se_source=one,
        ),
        *M.value_rows(
            "rmse",
            "test RMSE",
            "Table 7 (App. C.2)",
            ours["test_rmse"],
            PAPER_RMSE,
            samplers,
            run,
            extra_se=rmse_se,
            resolution=0.01,
            valid=(0.0, 4.0),
            k=cfg.value_k,
            se_source=f"SE_ours: the test-set SE of an RMSE on {n_test:,} held-out ratings, RMSE/√(2n) (Gaussian "
            "residuals; one evaluation run, no spread over runs)",
            note="plausible range [0, 4]: ratings lie in 1..5",
        ),
    ]


def rows(cfg: Config, numbers: dict, comparable: bool = False) -> list[dict]:
    """The report's rows from ``numbers`` (:func:`numbers_of`), without running anything: per
    method and metric of Tables 2 and 7, whether it is within the factor of the best method on
    each sampler as in the paper (:func:`._mamba.method_rows`); the tables' values cell by cell on
    their noise (:func:`value_rows`); the claims of Sect. 4.2, each judged sampler by sampler
    (issue 26 §1: no "ours >= paper - 1" count); every claim the preset does not run (a sampler,
    a method, Fig. 4/5's PMF panels) a row "not run" (issue 35 §3); and the wall-time target of
    ours as a check."""
    pub = _published()
    samplers = list(pub["samplers"])
    methods = [m for m in METHODS if m in cfg.methods and m in numbers["ksd"]]
    paper_ksd = {m: pub["ksd"][m] for m in methods}
    paper_rmse = {m: PAPER_RMSE[m] for m in methods}
    ours_ksd, ours_xi, ours_rmse = numbers["ksd"], numbers["xi"], numbers["test_rmse"]
    out = []
    for m_rows, label in (
        (
            M.method_rows(
                "ksd",
                "KSD",
                "Table 2",
                {m: ours_ksd[m] for m in methods},
                {m: pub["ksd"][m] for m in METHODS},
                samplers,
                factor=cfg.factor,
                comparable=comparable,
            ),
            "KSD",
        ),
        (
            M.method_rows(
                "xi",
                "xi(sigma) x 10^2",
                "Table 2",
                {m: ours_xi[m] for m in methods if m in ours_xi},
                {m: pub["sd_rel_error_x100"][m] for m in METHODS},
                samplers,
                factor=cfg.factor,
                scale=100.0,
                comparable=comparable,
            ),
            "ξ(σ̂)×10²",
        ),
        (
            M.method_rows(
                "rmse",
                "test RMSE",
                "Table 7 (App. C.2)",
                {m: ours_rmse[m] for m in methods if m in ours_rmse},
                dict(PAPER_RMSE),
                samplers,
                factor=cfg.rmse_factor,
                comparable=comparable,
            ),
            "test RMSE",
        ),
    ):
        for r in m_rows:
            r["metric_label"] = label
            if r.get("not_run") and r["method"] not in cfg.methods:
                r["not_run"] = f"the preset runs {', '.join(cfg.methods)} only, not {r['method']}"
        out += m_rows
    run = [s for s in samplers if s in cfg.samplers]
    for key, name, source, table in (
        ("ksd", "KSD", "Table 2", pub["ksd"]),
        ("xi", "xi(sigma) x 10^2", "Table 2", pub["sd_rel_error_x100"]),
        ("rmse", "test RMSE", "Table 7 (App. C.2)", PAPER_RMSE),
    ):
        out += M.cut_sampler_rows(key, name, source, {m: table[m] for m in METHODS}, samplers, run)
    out += value_rows(cfg, numbers, samplers, run, methods)
    out += M.choice_rows(
        PAPER_TABLE6, numbers.get("chosen") or {}, samplers, run, methods, source="Table 6", configured=cfg.methods
    )
    idx = range(len(samplers))

    def lacking(*ms: str) -> str:
        gone = [m for m in ms if m not in methods]
        cut = [m for m in gone if m not in cfg.methods]
        if cut:
            return f"the preset runs {', '.join(cfg.methods)} only, not {', '.join(cut)}"
        return f"no value from this run for {', '.join(gone)}" if gone else ""

    def below(table, a, b, j):  # strictly: equal values (a constant answer) show neither
        x, y = table[a][j], table[b][j]
        return None if x is None or y is None else M._clean(x) < M._clean(y)

    def every(flags):  # [(name, ours, required)]: ours as required on every one with a value
        known = [(s, o, p) for s, o, p in flags if o is not None]
        differ = [s for s, o, p in known if o != p]
        text = f"{sum(bool(o) for _, o, _ in known)} of {len(known)}" + (
            f"; not on {', '.join(differ)}" if differ else ""
        )
        return (None if not known else not differ), text

    lowest_claim = ("claim_mamba_lowest", "MAMBA consistently gives the lowest KSD", "Sect. 4.2, Fig. 2")
    sd_claim = (
        "claim_heuristic_sd",
        "for some samplers the heuristic has a lower sd error than MAMBA: SGHMC and SGHMC-CV",
        "Sect. 4.2, Table 2",
        "2 of 2 (50.3 vs 79.9, 53.2 vs 83.7; SGNHT's 40.6 vs 40.8 is within one run's noise)",
    )
    sghmc_claim = (
        "claim_heuristic_sghmc",
        "heuristic SGHMC / SGHMC-CV (L = 10): KSD at least 3x MAMBA's",
        "Table 2",
        "2 of 2 (3,942 vs 438; 4,546 vs 543)",
    )
    rmse_claim = ("claim_rmse_vs_grid", "MAMBA's test RMSE below grid search's", "Table 7")
    sghmc_run = [s for s in ("SGHMC", "SGHMC-CV") if s in cfg.samplers]
    if "MAMBA" not in methods or len(methods) < 2:
        why = lacking("MAMBA") or lacking("Grid", "Heuristic")
        out.append(M.not_run_row(*lowest_claim, "6 of 6 samplers", why))
    if "MAMBA" not in methods or "Heuristic" not in methods or not sghmc_run:
        why = lacking("MAMBA", "Heuristic") or f"the preset runs {', '.join(cfg.samplers)} only, not SGHMC and SGHMC-CV"
        out.append(M.not_run_row(*sd_claim, why))
        out.append(M.not_run_row(*sghmc_claim, why))
    if "MAMBA" not in methods or "Grid" not in methods:
        out.append(M.not_run_row(*rmse_claim, "6 of 6 samplers", lacking("MAMBA", "Grid")))
    if "MAMBA" in methods and len(methods) > 1:
        others = [m for m in methods if m != "MAMBA"]

        def lowest(table, j):
            o = min(M._clean(table[m][j]) for m in others)
            x = table["MAMBA"][j]
            return None if x is None else M._clean(x) < o

        holds, text = every([(samplers[j], lowest(ours_ksd, j), True) for j in idx])
        out.append(
            M.claim_row(
                *lowest_claim,
                f"{sum(bool(lowest(paper_ksd, j)) for j in idx)} of 6 samplers (SGNHT: 163 vs 164, SGNHT-CV: 205 vs "
                "210, margins of 0.6 % and 2.4 %)",
                text,
                holds,
                "every sampler, strictly (was: ours >= paper - 1)",
            )
        )
        if "Heuristic" in methods and sghmc_run:
            hs = [j for j, s in enumerate(samplers) if s in sghmc_run]
            holds, text = every([(samplers[j], below(ours_xi, "Heuristic", "MAMBA", j), True) for j in hs])
            out.append(
                M.claim_row(
                    *sd_claim,
                    text + ("" if len(hs) == 2 else f" (run: {', '.join(sghmc_run)})"),
                    holds,
                    "both, strictly, those run (was: ours >= 1 on any sampler)",
                )
            )
            known = [  # a diverged run (None) ranks worst
                M._clean(ours_ksd["Heuristic"][j]) >= 3 * M._clean(ours_ksd["MAMBA"][j]) for j in hs
            ]
            o = sum(known)
            out.append(
                M.claim_row(
                    *sghmc_claim,
                    f"{o} of {len(known)}" + ("" if len(known) == 2 else f" (SGHMC / SGHMC-CV run: {len(known)})"),
                    None if not known else o == len(known),
                    "both (those run)",
                )
            )
        if "Grid" in methods:
            holds, text = every([(samplers[j], below(ours_rmse, "MAMBA", "Grid", j), True) for j in idx])
            out.append(
                M.claim_row(
                    *rmse_claim,
                    f"{sum(bool(below(paper_rmse, 'MAMBA', 'Grid', j)) for j in idx)} of 6 samplers",
                    text,
                    holds,
                    "every sampler, strictly (was: at most, ours >= paper - 1)",
                )
            )
    # App. B.2's Fig. 4 / 5 (stochastic vs full-batch KSD over SGLD's step sizes / batch sizes): the PMF panels
    for fig, over_what in (("Fig. 4", "step sizes (batch 1 %)"), ("Fig. 5", "batch sizes (h = 10^-4.5)")):
        out.append(
            M.not_run_row(
                f"claim_stochastic_ksd_{fig[-1]}",
                f"{fig}, PMF panel: the stochastic KSD of SGLD's draws follows the full-batch KSD over its {over_what}",
                f"App. B.2, {fig}",
                "follows the fullbatch KSD well (no number given)",
                "mamba-pmf does not run App. B.2's comparison of stochastic and full-batch KSD (mamba-logreg runs "
                "Fig. 4's logistic-regression panel only)",
            )
        )
    out.append(M.wall_claim(numbers.get("tuning", {}), cfg.wall_target))  # ours, a check: not tallied
    return out


def _reduced(cfg: Config, source: dict) -> list[str]:
    full = PRESETS["full"]
    notes = []
    if tuple(cfg.samplers) != tuple(full.samplers):
        cut = [s for s in full.samplers if s not in cfg.samplers]
        notes.append(
            f"samplers {', '.join(cfg.samplers)} only, not {', '.join(cut)} (paper: all six): the claims count "
            "over the samplers run."
        )
    if source["source"] != "files":
        notes.append(
            f"simulated ratings instead of MovieLens-100K ({source.get('reason', '')}): numbers are not "
            "comparable with the paper's at all."
        )
    if cfg.latent_dim != full.latent_dim:
        notes.append(f"d = {cfg.latent_dim} latent dimensions (paper: 20).")
    if tuple(cfg.log10_h) != tuple(full.log10_h) or tuple(cfg.batches) != tuple(full.batches):
        notes.append(
            f"reduced grids: log10 h in {list(cfg.log10_h)}, batches {list(cfg.batches)} "
            f"(paper: 12 step sizes x 3 batches)."
        )
    if cfg.budget_kind != "seconds" or cfg.R != full.R:
        notes.append(
            f"MAMBA budget R = {cfg.R:g} {cfg.budget_kind} per surviving arm (paper: R = 10 s), so each "
            "first-round arm samples for only a fraction of a second and its KSD is scored on few draws."
        )
    if cfg.thin != full.thin and cfg.budget_kind == "seconds":
        notes.append(
            f"the tuner starts from thin {cfg.thin} (then thins evenly past {2 * cfg.max_samples} draws) "
            f"instead of keeping every {full.thin}th draw: at this R most first-round SGHMC arms run fewer than "
            f"{full.thin} iterations and would keep no draw at all (with thin 10 every SGHMC-CV arm failed "
            "its first round in a trial run)."
        )
    if cfg.grid_iterations != full.grid_iterations:
        notes.append(
            f"grid search runs {cfg.grid_iterations:,} iterations per arm (paper: 2,000), from the MAP plus "
            "N(0, 1) noise: with so few iterations the arms barely leave the noisy start, which favours "
            "large step sizes."
        )
    if cfg.eval_kind != "seconds" or cfg.eval_budget != full.eval_budget:
        notes.append(
            f"evaluation runs of {cfg.eval_budget:g} {cfg.eval_kind} (paper: 20 s), KSD on at most "
            f"{cfg.eval_ksd_samples} draws (the V-statistic's upward bias shrinks with the number of draws)."
        )
    if cfg.ref_iterations != full.ref_iterations:
        notes.append(f"reference chain of {cfg.ref_iterations:,} iterations (full preset: 200,000; paper: NUTS).")
    return notes


def _markdown(report: dict, tuned, n_train: int) -> str:
    cfg, ref, src = report["config"], report["reference"], report["data"]
    samplers = report["samplers"]
    rows = report["rows"]
    v = report["verdicts"]
    data_line = (
        f"MovieLens-100K (`{src['where']}`, {src['split']})"
        if src["source"] == "files"
        else f"**simulated** ratings ({src['description']}; {src['reason']})"
    )
    lines = [
        "# MAMBA on probabilistic matrix factorisation (Coullon, South & Nemeth, Table 2)",
        "",
        f"Preset `{report['preset'] or 'custom'}`; data: {data_line}; {report['num_train']:,} training / "
        f"{report['num_test']:,} test ratings, {report['num_users']} users x {report['num_items']} items, "
        f"d = {cfg['latent_dim']} ({report['num_params']:,} parameters). MAP by Adam (lr {cfg['map_lr']:g}, batch "
        f"{100 * cfg['map_batch']:g} %, {cfg['map_steps']:,} steps; test RMSE {report['map_test_rmse']:.3f}) as start "
        f"and CV centre. MAMBA-KSD: eta = {cfg['eta']}, R = {cfg['R']:g} "
        f"{'s' if cfg['budget_kind'] == 'seconds' else cfg['budget_kind']} per surviving arm; grid "
        f"search: {cfg['grid_iterations']:,} iterations per arm at batch 10 % from the MAP + N(0, "
        f"{cfg['grid_noise']:g}²), ranked by {'test RMSE' if cfg['grid_metric'] == 'test' else 'KSD'}; heuristic "
        f"h = 1/N = {1 / n_train:.3g}. Evaluation: {cfg['eval_budget']:g} {cfg['eval_kind']} from the MAP, the "
        f"first {100 * cfg['eval_burn_in']:g} % discarded; KSD on the draws thinned by {cfg['eval_thin']} (at most "
        f"{cfg['eval_ksd_samples']}), full-data scores.",
        "",
        f"**Reference posterior**: {ref['description']}{' (read from the cache)' if ref.get('cached') else ''}.",
        "",
        M.wall_line(report),
        "",
        "## Table 2 (and Table 7's RMSE): ours (paper)",
        "",
        "Cells are `ours (paper)`. Verdict: an ordering check — on how many samplers the method is within "
        f"x{cfg['factor']:g} (RMSE: x{cfg['rmse_factor']:g}) of the best of the three methods, ours vs the paper's "
        "count, agreeing within one sampler. "
        + (
            "Magnitudes are on the paper's scale (full preset, MovieLens files)."
            if report["comparable"]
            else "**Magnitudes are not comparable at this scale** (budgets, the number of draws and the reference "
            "differ from the paper's)."
        ),
        "",
        *M.markdown_report_table(rows, samplers),
        "",
        "## The paper's claims",
        "",
        *M.markdown_claims(rows),
        "",
        f"Verdicts: {v['agrees']} agree, {v.get('tied', 0)} tied, {v['differs']} differ, {v['n/a']} n/a.",
        "",
    ]
    if report["reduced"]:
        lines += ["## Reduced run", "", *[f"- {n}" for n in report["reduced"]], ""]
    lines += [
        "## Chosen hyperparameters: ours (paper, Table 6)",
        "",
        *M.markdown_choices(tuned, n_train, PAPER_TABLE6),
        "",
    ]
    ev = report["evaluation"]
    lines += [
        "## Evaluation runs: iterations after burn-in, ours (paper's samples, Table 7)",
        "",
        "| method | " + " | ".join(samplers) + " |",
        "|---|" + "---|" * len(samplers),
    ]
    for m in report["methods"]:
        cells = []
        for j, s in enumerate(samplers):
            e = (ev.get(s) or {}).get(m)
            cells.append(f"{e['iterations']:,} ({PAPER_SAMPLES[m][j]:,})" if e else "-")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Tuning wall time (the tuner's split, seconds)",
        "",
        f"Issue target: whole MAMBA tuning wall time <= {cfg['wall_target']:g} x T. Grid search rows: T is "
        "iterations per arm (no seconds budget).",
        "",
        *M.markdown_timing(tuned, cfg["wall_target"]),
        "",
        "## Errors",
        "",
    ]
    errs = [f"- {s} {m}: tuning: {r['error']}" for s, by in tuned.items() for m, r in by.items() if r["error"]]
    errs += [f"- {s} {m}: evaluation: {e['error']}" for s, by in ev.items() for m, e in by.items() if e and e["error"]]
    lines += errs or ["none"]
    lines += [
        "",
        "Figures: "
        + ", ".join(f"`{f}`" for f in report["figures"].values())
        + "; tuning traces in `tuning/<sampler>/<method>/`.",
        "",
    ]
    return "\n".join(lines)
