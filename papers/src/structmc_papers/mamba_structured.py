"""Beyond both papers: MAMBA (Coullon, South & Nemeth 2023) choosing the structure of
structured-dropout pSGLD (Sd-pSGLD, Alexos, Boyd & Mandt 2022) — the dropout rate ρ, the
number of Monte Carlo copies K and the number of parameter groups M — on an MNIST MLP, and
the chosen configuration compared with the structured paper's defaults (and plain pSGLD)
under the same sampling budget.

Setting:

* model: the structured paper's MNIST network, ``structmc.zoo.energy_for("mlp_mnist")`` =
  MLP(784, 50, 50, 10), ReLU, categorical likelihood, N(0, 0.3²) prior (the authors' code);
  42,310 parameters (the paper's "42,200" counts weights only). Images in [0, 1], flattened;
  the last ``num_val`` training images are held out as a validation set.
* start: the MAP (Adam, ``map_steps``), as in MAMBA; every run starts there.
* sampler: pSGLD (α = 0.99, λ = 1e-5), batch 500 (the structured paper's MNIST batch), a
  fixed step ε = 2·``psgld_step``/N (the RMSprop-equivalent per-datum step ``psgld_step`` =
  1e-3, the pSGLD paper's conversion, :mod:`structmc.samplers.psgld`); the step is not
  tuned, so that MAMBA's choice and the defaults differ only in their structure.
* structure: Sd-pSGLD with Bernoulli(ρ) masks, K copies and M groups assigned round-robin
  (parameters evenly spread over the groups, the paper's grouping; M = P is fully
  factorised), θ̃ drawn from a window of the last ``history`` positions of the chain.
* MAMBA arms: ρ × K × M (plus plain pSGLD when ``include_plain``), η = 3, budget in
  sampling seconds with the surviving arm sampling for ``mamba_R`` seconds
  (T = R · rounds / Σ 1/|S_i|, as in ``mamba-bnn``). A larger K costs K forward/backward
  passes per step, so under a time budget MAMBA weighs mixing per step against steps.
* metric: **validation NLL** — the negative log-likelihood of the posterior predictive of
  the round's (thinned) samples on the validation set, lower is better. KSD is not used:
  Sd-SGMCMC samples a factorised approximation q of the posterior, not the posterior, so a
  Stein discrepancy against the exact posterior penalises the structure itself and would
  favour ρ → 1 (plain pSGLD) by construction; the structured paper evaluates by predictive
  accuracy, which the validation NLL follows without touching the test set.
  ``metric="ksd"`` is available for comparison (scored with the paper's stochastic KSD, App.
  B.2: each draw on its own minibatch of ``score_data`` = 2,000 rows; before the library's
  per-draw default, one fixed subset of 2,000 rows for every draw, so its choices differ).
* defaults (what MAMBA is compared with): ρ = 0.5 and M = 32 — the structured paper's best
  MNIST result (Sect. 9.1: 96.3 % with 32 groups and ρ = 0.5, against 94.2 % for pSGLD) —
  and K = 16, the authors' driver default (the paper's appendix states K = 300 forward passes
  for MNIST, out of reach on a CPU).
* evaluation: MAMBA's choice, the defaults and plain pSGLD each run from the MAP for
  ``eval_seconds`` of sampling (same seed); first ``eval_burn_in`` of the iterations dropped,
  at most ``eval_max_draws`` draws averaged; test accuracy, NLL, ECE and MCE (10 fixed bins)
  and the number of iterations.

This experiment has **no claim of a paper** (0 claims; issue 35 §3): MAMBA's paper says
nothing about structured SGMCMC, and the structured paper's two MNIST accuracies (250,000
iterations, 100,000 samples) and their ordering (Sd-pSGLD above pSGLD) are counted in
``ssgmcmc-mnist-groups``; here they are reported next to ours with a verdict as checks (a claim
is counted once). The rows about MAMBA are hypotheses of this experiment (verdict ``holds`` /
``fails``), checks "beyond the paper". Presets: ``tiny`` (seconds, tests: 400 images, a 16-16 network, iteration budgets),
``quick`` (49 arms, R = 20 s, 40 s evaluations; 384 s on the shared 2-core development
machine, one torch thread), ``converged`` (full's budgets with one torch thread: about 55-65 min), ``full``
(126 arms, R = 120 s, 600 s evaluations; about 1 h).

Measured (``quick``, seed 0): MAMBA kept the arms closest to plain pSGLD (ρ = 0.9, K = 1) and
chose plain pSGLD itself; under the same 40 s, pSGLD reached 97.8 % test accuracy and NLL
0.073, the defaults (ρ = 0.5, M = 32, K = 16: 1,343 steps against 22,558) 96.6 % and 0.117.
From the MAP and on this time scale structure did not help; the paper's gain (96.3 % vs
94.2 %) is after 250,000 iterations from a random start.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from structmc.diagnostics.calibration import classification_metrics
from structmc.predictive import predictive
from structmc.run import Budget
from structmc.tuning import Arm, Problem, mamba
from structmc.tuning.metrics import KSD, FunctionMetric
from structmc.zoo import energy_for

from . import resolve_preset
from ._common import evaluate_configured_arm, load_data, log_loss_metric, mamba_budget
from ._mamba import Units, resumed_phrase, set_wall_seconds
from ._shared import jsonable as _jsonable
from ._shared import pyplot, restores_globals
from ._shared import threads as torch_threads
from ._shared import versions as _versions

#: Alexos, Boyd & Mandt (2022), Sect. 9.1 (MNIST, 784-50-50-10, 100,000 samples after 150,000 burn-in).
PAPER_ACCURACY = {"defaults": 96.3, "pSGLD": 94.2}
DEFAULTS = {"rho": 0.5, "num_groups": 32, "num_copies": 16}
CONFIGS = ("MAMBA", "MAMBA-Sd", "defaults", "pSGLD")  # MAMBA-Sd: only when MAMBA's choice is plain pSGLD
FIGURES = {"round0": "round0_by_structure.png", "eval": "eval_curves.png"}


@dataclass
class Config:
    data: str = "auto"  # "files", "auto" (files, else synthetic), "synthetic"
    data_dir: str | None = None
    num_train: int | None = None  # training subset before the validation split (None: 60,000)
    num_test: int | None = None
    num_val: int = 5_000  # the last num_val training images: the validation set
    val_points: int | None = None  # score the metric on the first val_points of it (None: all)
    hidden: tuple[int, ...] = (50, 50)
    prior_std: float = 0.3
    map_steps: int = 2_000
    map_lr: float = 1e-3
    map_batch: float = 500 / 60_000
    # sampler
    psgld_step: float = 1e-3  # ε = 2 psgld_step / N
    alpha: float = 0.99
    batch_size: int = 500
    history: int = 200
    # MAMBA's grid
    rho: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
    num_copies: tuple[int, ...] = (1, 2, 4, 8, 16)
    num_groups: tuple[int | str, ...] = (4, 32, 512, 4096, "all")  # "all": one group per parameter
    include_plain: bool = True  # plain pSGLD as one more arm
    defaults: tuple[float, int, int] = (0.5, 32, 16)  # (rho, M, K) compared with MAMBA's choice
    metric: str = "val_nll"  # "val_nll" or "ksd"
    score_data: int | None = 2_000  # KSD only: each scored draw on its own minibatch of this many rows (App. B.2)
    budget: str = "seconds"
    mamba_R: float = 120.0
    eta: int = 3
    thin: int = 5
    max_samples: int = 50
    warmup: int = 1
    # evaluation
    eval_seconds: float | None = 600.0
    eval_iterations: int | None = None
    eval_thin: int = 10
    eval_burn_in: float = 0.1
    eval_max_draws: int = 100
    ece_bins: int = 10
    curve_points: int = 10
    seed: int = 0
    num_threads: int | None = None
    # |ours - paper| <= tol for the structured paper's two MNIST accuracies (96.3 %, 94.2 %): below
    # half their 2.1 pp gap (0.45 x 2.1), so no single number passes as both (issue 26 §1; was 2.0,
    # which a constant 95.25 % passed twice)
    tol_acc_pp: float = 0.945


PRESETS = {
    "tiny": Config(
        num_train=400,
        num_test=200,
        num_val=100,
        hidden=(16, 16),
        map_steps=30,
        batch_size=50,
        history=20,
        rho=(0.3, 0.7),
        num_copies=(1, 2),
        num_groups=(4, "all"),
        budget="iterations",
        mamba_R=36,
        thin=1,
        max_samples=6,
        warmup=0,
        eval_seconds=None,
        eval_iterations=30,
        eval_thin=2,
        eval_max_draws=8,
        curve_points=4,
        num_threads=1,
    ),
    "quick": Config(
        map_steps=1_000,
        history=100,
        rho=(0.1, 0.3, 0.5, 0.9),
        num_copies=(1, 4, 16),
        num_groups=(4, 32, 1024, "all"),
        val_points=2_000,
        mamba_R=20.0,
        max_samples=20,
        eval_seconds=40.0,
        eval_max_draws=40,
        num_threads=1,
    ),
    # converged (issue 24): full's budgets unchanged -- the 126 arms (5 rho x 5 K x 5 M + pSGLD), R = 120 s
    # (T = 1,359 s over 4 rounds), the 5,000 validation images, 600 s evaluation runs -- with one torch thread
    # (full leaves the thread count as is). Cuts nothing of full; the structured paper's own run (250,000
    # iterations from a random start) stays out of reach, as the evaluation note says. Estimate, one thread on
    # a core of its own (CPU times measured with OMP_NUM_THREADS=1, nice 10, load ~5 on the 2 cores): the
    # seconds budgets fix most of it -- tuning T = 1,359 s + validation NLL 0.45 s per arm and round (50
    # draws) x 186 arm-rounds ~ 85 s, evaluation 3-4 configurations x 600 s (MAMBA, MAMBA-Sd when MAMBA chose
    # plain pSGLD, the defaults, pSGLD), MAP 2,000 steps at 1.5 ms: ~55-65 min in all.
    "converged": Config(num_threads=1),
    "full": Config(),
}


def make_energy(cfg: Config, num_data: int):
    return energy_for("mlp_mnist", num_data=num_data, hidden=tuple(cfg.hidden), prior_std=cfg.prior_std, seed=cfg.seed)


def _groups(m, dim: int | None) -> int:
    if m == "all":
        assert dim is not None, "num_groups='all' needs the dimension"
        return dim
    return int(m)


def psgld_arm(cfg: Config, num_data: int, structure: dict | None = None, dim: int | None = None) -> Arm:
    """pSGLD at the experiment's step and batch; ``structure`` = ``{"rho", "num_groups",
    "num_copies"}`` makes it Sd-pSGLD (round-robin groups, Bernoulli masks)."""
    sampler = {"name": "psgld", "lr": 2.0 * cfg.psgld_step / num_data, "alpha": cfg.alpha}
    if structure is None:
        return Arm(sampler, cfg.batch_size)
    s = {
        "partition": "round_robin",
        "num_groups": _groups(structure["num_groups"], dim),
        "mask": "bernoulli",
        "rho": float(structure["rho"]),
        "num_copies": int(structure["num_copies"]),
        "history": int(cfg.history),
        "seed": int(cfg.seed),
    }
    return Arm(sampler, cfg.batch_size, structured=s)


def structure_of(arm: Arm, dim: int) -> dict:
    if arm.structured is None:
        return {"kind": "pSGLD", "rho": 1.0, "num_groups": None, "num_copies": 1, "label": "plain pSGLD"}
    s = arm.structured
    M = int(s["num_groups"])
    return {
        "kind": "Sd-pSGLD",
        "rho": float(s["rho"]),
        "num_groups": M,
        "num_copies": int(s["num_copies"]),
        "fully_factorised": M == dim,
        "label": f"Sd-pSGLD rho={float(s['rho']):g} K={int(s['num_copies'])} M={'P' if M == dim else M}",
    }


def mamba_arms(cfg: Config, num_data: int, dim: int) -> list[Arm]:
    arms = [
        psgld_arm(cfg, num_data, {"rho": r, "num_groups": m, "num_copies": k}, dim)
        for r in cfg.rho
        for k in cfg.num_copies
        for m in cfg.num_groups
    ]
    if cfg.include_plain:
        arms.append(psgld_arm(cfg, num_data))
    return arms


@restores_globals
def run(
    config: Config | str = "quick",
    out_dir: str | Path = "runs/mamba-structured",
    progress: bool | None = None,
    *,
    seed: int | None = None,
    resume: bool = False,
) -> dict:
    """Run the experiment; write ``report.json`` and ``report.md`` in the common report format
    (structmc_papers._report; this experiment's own record under ``numbers``), the
    figures and MAMBA's trace (``tuning/trace.json``, ``tuning/metric_by_round.png``) to
    ``out_dir``. ``seed`` overrides the config's. MAMBA commits its progress every round and
    each evaluation run is saved under ``out_dir/units`` when it ends; ``resume=True``
    continues a run cut short (same config, else :class:`~._mamba.ResumeMismatch`): MAMBA from
    its last round, the finished evaluations read back."""
    cfg, preset = resolve_preset(config, PRESETS, seed)
    if cfg.metric not in ("val_nll", "ksd"):
        raise ValueError(f"metric must be 'val_nll' or 'ksd', got {cfg.metric!r}")
    if cfg.budget not in ("seconds", "iterations"):
        raise ValueError(f"budget must be 'seconds' or 'iterations', got {cfg.budget!r}")
    if cfg.num_val < 1:
        raise ValueError(f"num_val must be >= 1 (the validation images the arms are scored on), got {cfg.num_val}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    units = Units(out, asdict(cfg), resume=resume)
    t0 = time.perf_counter()
    with torch_threads(cfg.num_threads):
        report = _run(cfg, preset, out, progress, units)
    set_wall_seconds(report, t0, units)
    from . import REGISTRY
    from ._report import write_report

    return write_report(
        out,
        experiment=REGISTRY.get("mamba-structured"),
        preset=preset,
        config=asdict(cfg),
        seed=cfg.seed,
        comparisons=comparisons(cfg, report["evaluation"], report["tuning"], report["num_test"]),
        numbers=_jsonable(report),
        wall_time_s=report["wall_seconds"],
        compute_time_s=report.get("compute_seconds"),
        step_sizes=[
            f"pSGLD ε = {cfg.psgld_step:g} on the per-datum loss → PSGLD(lr = 2ε/N = "
            f"{report['lr']:.3g}); MAMBA's arms keep this lr and vary rho, K and M"
        ],
        reductions=report["reduced"],
        figures=[*FIGURES.values(), "tuning/metric_by_round.png"],
        notes=[
            "beyond the papers: 0 claims of a paper. MAMBA's paper says nothing about structured SGMCMC; the "
            "structured paper's MNIST accuracies and ordering are counted in ssgmcmc-mnist-groups and shown here as "
            "checks; the rows marked 'hypothesis' are this experiment's"
        ],
        stand_in=report["data"]["description"] if report["data"]["source"] != "files" else "",
        extra_md=_markdown(report),
    )


#: why the structured paper's MNIST rows are checks here (issue 35 §3: a claim is counted once)
COUNTED_ELSEWHERE = (
    "a claim of Alexos et al. (2022, Sect. 9.1) counted in ssgmcmc-mnist-groups (its protocol: 500 epochs from a "
    "random start); here on this experiment's protocol (sampling from the MAP for a fixed time), shown for reference"
)
#: why this experiment's hypotheses are checks: neither paper states them
BEYOND = (
    "beyond the paper: this experiment's hypothesis about MAMBA (Coullon et al. 2023) choosing the structure of "
    "Sd-pSGLD (Alexos et al. 2022), which neither paper states"
)


def comparisons(cfg: Config, evals: dict, tuning: dict, num_test: int = 10_000) -> list:
    """The report's rows from the evaluations ``evals`` ({configuration: {"metrics": {"accuracy",
    "nll", "ece", ...} or None}}) and MAMBA's ``tuning`` record ({"chosen": {"label", "kind"}}),
    without running anything. Every row is a **check** (issue 35 §3): MAMBA's paper makes no claim
    about structured SGMCMC, so this experiment has no claim of a paper of its own (0 claims);
    the structured paper's two MNIST accuracies and their ordering are counted in
    ``ssgmcmc-mnist-groups`` and shown here for reference (within 3 binomial SEs of one run on
    ``num_test`` images, the paper's SE 0), and this experiment's hypotheses are "beyond the
    paper"."""
    from ._report import Claim, Comparison, Ordering, WithinNoise, binomial_se

    out = []
    for r in _rows(evals, tuning, cfg):
        if r["key"] in ("acc_defaults", "acc_psgld"):
            ours = r["ours"]
            p = ours / 100 if ours is not None and math.isfinite(ours) and 0 <= ours <= 100 else r["paper"] / 100
            out.append(
                Comparison(
                    r["quantity"],
                    ours,
                    r["paper"],
                    WithinNoise(
                        100 * binomial_se(p, num_test),
                        0.0,
                        3.0,
                        f"SE: binomial, one run on {num_test:,} test images; the paper gives no spread",
                    ),
                    unit="%",
                    note=r["source"],
                    check=True,
                    check_reason=COUNTED_ELSEWHERE,
                    valid=(5.0, 100.0),
                )
            )
        elif r["key"] == "order_sd_above_psgld":
            d, p = _pct(evals["defaults"], "accuracy"), _pct(evals["pSGLD"], "accuracy")
            out.append(
                Comparison(
                    r["quantity"],
                    None if d is None or p is None else [d, p],
                    [PAPER_ACCURACY["defaults"], PAPER_ACCURACY["pSGLD"]],
                    Ordering(("Sd-pSGLD", "pSGLD"), lower_is_better=False, margin=0.0),
                    unit="%",
                    note=r["source"],
                    not_run="" if d is not None and p is not None else "no accuracy of the defaults or of pSGLD",
                    check=True,
                    check_reason=COUNTED_ELSEWHERE,
                    valid=(5.0, 100.0),
                )
            )
        else:
            holds = {"holds": True, "fails": False}.get(r["verdict"])

            def test(_, h=holds):
                if h is None:
                    raise ValueError("no value to test")
                return h

            out.append(
                Comparison(
                    r["quantity"],
                    r["ours"],
                    "hypothesis (not in the papers)",
                    Claim(f"{r['rule']} (this experiment's hypothesis)", test),
                    check=True,
                    check_reason=BEYOND,
                )
            )
    return out


def rejudge(report: dict) -> list:
    """The rows of a written report rebuilt from its numbers and config under today's rules
    (issue 35 §7; ``docs/results/rejudge.py``)."""
    c = dict(report["config"])
    for k in ("hidden", "rho", "num_copies", "num_groups", "defaults"):
        c[k] = tuple(c[k])
    cfg = Config(**{k: v for k, v in c.items() if k in Config.__dataclass_fields__})
    n = report["numbers"]
    return comparisons(cfg, n["evaluation"], n["tuning"], int(n.get("num_test") or 10_000))


def _digest_of(arm: Arm) -> str:
    import hashlib
    import json

    return hashlib.blake2b(json.dumps(arm.to_dict(), sort_keys=True).encode(), digest_size=6).hexdigest()


def _run(cfg: Config, preset, out: Path, progress, units: Units | None = None) -> dict:
    data = load_data(cfg, num_val=cfg.num_val)
    N = len(data.y_train)
    energy = make_energy(cfg, N)
    dim = energy.space.dim
    from structmc.optimize import find_map

    t0 = time.perf_counter()
    b = max(1, int(cfg.map_batch * N))
    theta_map = find_map(
        energy,
        energy.initial_position(),
        data=(data.x_train, data.y_train),
        batch_size=b if b < N else None,
        num_steps=cfg.map_steps,
        lr=cfg.map_lr,
        seed=cfg.seed,
    )
    map_s = time.perf_counter() - t0
    map_test = classification_metrics(
        predictive(energy, theta_map[None], data.x_test)["probs"], data.y_test, cfg.ece_bins
    )
    xv, yv = data.validation()
    if cfg.val_points is not None:
        xv, yv = xv[: cfg.val_points], yv[: cfg.val_points]
    train = (data.x_train, data.y_train)
    metric = FunctionMetric(log_loss_metric, "validation NLL") if cfg.metric == "val_nll" else KSD()
    problem = Problem(
        energy,
        theta_map,
        data=train,
        validation=(xv, yv),
        seed=cfg.seed,
        score_data=cfg.score_data if cfg.metric == "ksd" else None,
    )
    arms = mamba_arms(cfg, N, dim)
    budget = mamba_budget(cfg, len(arms))
    t0 = time.perf_counter()
    res = mamba(
        None,
        None,
        arms,
        budget,
        problem=problem,
        eta=cfg.eta,
        metric=metric,
        seed=cfg.seed,
        thin=cfg.thin,
        max_samples=cfg.max_samples,
        metric_cost=None,
        warmup=cfg.warmup,
        out_dir=out / "tuning",
        progress=progress,
        resume=units is not None and units.resume,  # from its last committed round
    )
    tuning_s = time.perf_counter() - t0
    if units is not None and units.resume:  # the tuner's own clock counts its earlier sittings
        units.credit(float(res.timing.get("wall_earlier_sittings", 0.0)))
        tuning_s = float(res.timing.get("wall", tuning_s))
    first = res.rounds[0]
    round0 = [
        {
            **structure_of(arms[r["index"]], dim),
            "metric": r["metric"],
            "iterations": r["iterations"],
            "error": r["error"],
        }
        for r in first["results"]
    ]
    ranking = sorted(res.rounds[-1]["results"], key=lambda r: r["metric"])
    best = res.best
    assert best is not None  # mamba() raises when every arm fails
    tuning = {
        "chosen": structure_of(best, dim),
        "chosen_arm": best.to_dict(),
        "num_arms": len(arms),
        "round_sizes": [len(r["arms"]) for r in res.rounds],
        "budget": {k: getattr(budget, k) for k in ("seconds", "iterations") if getattr(budget, k)},
        "metric": metric.name if hasattr(metric, "name") else cfg.metric,
        "seconds": tuning_s,
        "timing": res.timing,
        "final_round": [
            {**structure_of(arms[r["index"]], dim), "metric": r["metric"], "iterations": r["iterations"]}
            for r in ranking
        ],
        "round0": round0,
        "failed": sum(1 for r in res.rounds for x in r["results"] if x["error"]),
        "summary": res.summary(),
    }
    rho, M, K = cfg.defaults
    configs = {"MAMBA": best}
    if best.structured is None:
        # MAMBA preferred no structure: also evaluate its best Sd-pSGLD arm of the last round that had one
        for rnd in reversed(res.rounds):
            sd = [r for r in sorted(rnd["results"], key=lambda r: r["metric"]) if arms[r["index"]].structured]
            if sd:
                configs["MAMBA-Sd"] = arms[sd[0]["index"]]
                tuning["best_structured"] = {
                    **structure_of(arms[sd[0]["index"]], dim),
                    "round": rnd["round"],
                    "metric": sd[0]["metric"],
                }
                break
    configs["defaults"] = psgld_arm(cfg, N, {"rho": rho, "num_groups": M, "num_copies": K}, dim)
    configs["pSGLD"] = psgld_arm(cfg, N)
    p_eval = Problem(energy, theta_map, data=train, seed=cfg.seed)
    eval_budget = (
        Budget(seconds=cfg.eval_seconds) if cfg.budget == "seconds" else Budget(iterations=cfg.eval_iterations)
    )
    evals = {}
    for name, arm in configs.items():

        def one(arm=arm) -> dict:
            return evaluate_configured_arm(p_eval, arm, eval_budget, cfg, data, cfg.seed * 1000 + 1)

        # the piece's key names the arm too: a resumed MAMBA that chose differently evaluates anew
        key = f"evaluation/{name}/{_digest_of(arm)}"
        e = one() if units is None else units.get_or_run(key, one)
        e["structure"] = structure_of(arm, dim)
        # the tuning metric on the validation set, for the same draws' configuration
        evals[name] = e
    rows = _rows(evals, tuning, cfg)
    report = {
        "experiment": "mamba-structured: MAMBA choosing rho, K and M of Sd-pSGLD on an MNIST MLP (beyond the papers)",
        "preset": preset,
        "config": asdict(cfg),
        "seed": cfg.seed,
        "data": data.source,
        "num_train": N,
        "num_val": len(data.validation()[1]),
        "val_points": len(yv),
        "num_test": len(data.y_test),
        "dim": dim,
        "model": f"MLP(784, {', '.join(map(str, cfg.hidden))}, 10), ReLU, N(0, {cfg.prior_std:g}²) prior",
        "lr": 2.0 * cfg.psgld_step / N,
        "map": {"steps": cfg.map_steps, "seconds": map_s, "test": map_test},
        "tuning": tuning,
        "evaluation": evals,
        "rows": rows,
        "verdicts": {v: sum(r["verdict"] == v for r in rows) for v in ("agrees", "differs", "holds", "fails", "n/a")},
        "reduced": _reduced(cfg),
        "versions": _versions(),
        "figures": dict(FIGURES),
        "paper": {"accuracy_pct": PAPER_ACCURACY, "defaults": DEFAULTS},
    }
    _plot(out, report)
    return report


def _pct(e: dict, k: str):
    m = e.get("metrics")
    return None if m is None else 100.0 * float(m[k])


def _rows(evals: dict, tuning: dict, cfg: Config) -> list[dict]:
    rows = []
    for key, name in (("defaults", "Sd-pSGLD, rho = 0.5, M = 32 (the paper's best MNIST setting)"), ("pSGLD", "pSGLD")):
        ours = _pct(evals[key], "accuracy")
        paper = PAPER_ACCURACY[key]
        verdict = "n/a" if ours is None else ("agrees" if abs(ours - paper) <= cfg.tol_acc_pp + 1e-9 else "differs")
        rows.append(
            {
                "key": f"acc_{key}".lower(),
                "quantity": f"{name}: test accuracy (%)",
                "source": "Alexos et al. (2022), Sect. 9.1, Fig. 3a (counted in ssgmcmc-mnist-groups)",
                "paper": paper,
                "ours": ours,
                "rule": f"abs(ours - paper) <= {cfg.tol_acc_pp:g} pp",
                "verdict": verdict,
                "kind": "paper",
            }
        )
    d, p = _pct(evals["defaults"], "accuracy"), _pct(evals["pSGLD"], "accuracy")
    holds = None if d is None or p is None else d > p
    rows.append(
        {
            "key": "order_sd_above_psgld",
            "quantity": "Sd-pSGLD (rho = 0.5, M = 32) accuracy above pSGLD's",
            "source": "Alexos et al. (2022), Sect. 9.1 (counted in ssgmcmc-mnist-groups)",
            "paper": "96.3 > 94.2",
            "ours": "-" if holds is None else f"{d:.2f} {'>' if d > p else '<='} {p:.2f}",
            "rule": "same ordering",
            "verdict": "n/a" if holds is None else ("agrees" if holds else "differs"),
            "kind": "paper",
        }
    )

    def hyp(key, quantity, ours_text, holds, rule):
        rows.append(
            {
                "key": key,
                "quantity": quantity,
                "source": "this experiment (hypothesis)",
                "paper": "-",
                "ours": ours_text,
                "rule": rule,
                "verdict": "n/a" if holds is None else ("holds" if holds else "fails"),
                "kind": "hypothesis",
            }
        )

    for q, label in (("nll", "test NLL"), ("ece", "test ECE")):
        m, dflt = _pct(evals["MAMBA"], q), _pct(evals["defaults"], q)
        scale = 1 / 100 if q == "nll" else 1
        hyp(
            f"mamba_{q}_le_defaults",
            f"MAMBA's choice: {label} <= the defaults' (same budget)",
            "-" if m is None or dflt is None else f"{m * scale:.4f} vs {dflt * scale:.4f}",
            None if m is None or dflt is None else m <= dflt,
            "ours <= defaults'",
        )
    m, dflt = _pct(evals["MAMBA"], "accuracy"), _pct(evals["defaults"], "accuracy")
    hyp(
        "mamba_acc_ge_defaults",
        "MAMBA's choice: test accuracy >= the defaults' (same budget)",
        "-" if m is None or dflt is None else f"{m:.2f} vs {dflt:.2f} %",
        None if m is None or dflt is None else m >= dflt,
        "ours >= defaults'",
    )
    if "MAMBA-Sd" in evals:
        m, dflt = _pct(evals["MAMBA-Sd"], "nll"), _pct(evals["defaults"], "nll")
        hyp(
            "mamba_sd_nll_le_defaults",
            "MAMBA's best Sd-pSGLD arm: test NLL <= the defaults' (same budget)",
            "-" if m is None or dflt is None else f"{m / 100:.4f} vs {dflt / 100:.4f}",
            None if m is None or dflt is None else m <= dflt,
            "ours <= defaults'",
        )
    ch = tuning["chosen"]
    hyp(
        "mamba_picks_structure",
        "MAMBA picks a structured sampler (Sd-pSGLD) over plain pSGLD",
        ch["label"],
        ch["kind"] == "Sd-pSGLD",
        "chosen arm is Sd-pSGLD",
    )
    return rows


def _reduced(cfg: Config) -> list[str]:
    full = PRESETS["full"]
    notes = []
    if cfg.budget != "seconds":
        notes.append(
            "iteration budgets (deterministic, for tests): K's cost per step is not charged, so MAMBA's "
            "choice of K is not meaningful."
        )
    if cfg.num_train is not None or tuple(cfg.hidden) != tuple(full.hidden):
        notes.append(
            f"a reduced problem: {cfg.num_train} training images (before the validation split), hidden "
            f"widths {tuple(cfg.hidden)}."
        )
    if cfg.mamba_R != full.mamba_R:
        notes.append(
            f"MAMBA: the surviving arm samples for R = {cfg.mamba_R:g} {cfg.budget} (full: "
            f"{full.mamba_R:g} s); grid rho {list(cfg.rho)}, K {list(cfg.num_copies)}, M "
            f"{list(cfg.num_groups)}"
            + (
                "; the first round gives each arm about a second of sampling, so K = 16 arms take few steps "
                "and the first cut is noisy."
                if cfg.budget == "seconds"
                else "."
            )
        )
    ev = cfg.eval_seconds if cfg.budget == "seconds" else cfg.eval_iterations
    notes.append(
        f"evaluation: {ev:g} {'s' if cfg.budget == 'seconds' else 'iterations'} from the MAP per "
        "configuration; the structured paper's accuracies come from 100,000 posterior samples after a 150,000 "
        "burn-in, started from a random initialisation, so its value rows are a loose comparison: "
        "ours stay near the MAP's accuracy."
    )
    return notes


def _markdown(report: dict) -> str:
    cfg = report["config"]
    src = report["data"]
    t = report["tuning"]
    ev = report["evaluation"]
    data_line = f"MNIST IDX files from `{src['folder']}`" if src["source"] == "files" else src["description"]
    lines = [
        "# MAMBA choosing the structure of Sd-pSGLD on MNIST (beyond the papers)",
        "",
        f"Preset `{report['preset'] or 'custom'}`; data: {data_line}; {report['num_train']:,} training / "
        f"{report['num_val']:,} validation ({report['val_points']:,} scored) / {report['num_test']:,} test images; "
        f"{report['model']}, P = {report['dim']:,}. pSGLD ε = {report['lr']:.3g} (2 × {cfg['psgld_step']:g} / N), "
        f"batch {cfg['batch_size']}, history window {cfg['history']}; every run starts at the MAP ("
        f"{cfg['map_steps']} Adam steps; test accuracy {100 * report['map']['test']['accuracy']:.2f} %). Seed "
        f"{report['seed']}; wall time {report['wall_seconds']:.1f} s"
        + (f" ({resumed_phrase(report, 'finished evaluations')})." if report.get("resumed") else "."),
        "",
        f"MAMBA: {t['num_arms']} arms (rho {cfg['rho']}, K {cfg['num_copies']}, M {cfg['num_groups']}"
        f"{', plus plain pSGLD' if cfg['include_plain'] else ''}), rounds of {t['round_sizes']} arms, budget "
        f"{t['budget']} (the surviving arm samples for {cfg['mamba_R']:g} {cfg['budget']}), metric: "
        f"**{t['metric']}** (lower is better; see the notes for why not KSD); tuning took {t['seconds']:.1f} s.",
        "",
        f"**MAMBA's choice: {t['chosen']['label']}**"
        + (
            f" (its best Sd-pSGLD arm, evaluated as MAMBA-Sd: {t['best_structured']['label']}, round "
            f"{t['best_structured']['round']})"
            if "best_structured" in t
            else ""
        )
        + f"; the defaults: Sd-pSGLD rho = {cfg['defaults'][0]:g}, M = {cfg['defaults'][1]}, K = {cfg['defaults'][2]}.",
        "",
        "## Same evaluation budget",
        "",
        "| configuration | rho | K | M | iterations | test accuracy (%) | test NLL | ECE (%) | MCE (%) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in (c for c in CONFIGS if c in ev):
        e = ev[name]
        s = e["structure"]
        m = e.get("metrics") or {}
        M = "-" if s["num_groups"] is None else ("P" if s.get("fully_factorised") else s["num_groups"])
        div = " (diverged)" if e.get("diverged") else ""
        lines.append(
            f"| {name}{div}: {s['label']} | {s['rho']:g} | {s['num_copies']} | {M} | {e['iterations']:,} | "
            + (
                " | ".join(["-"] * 4)
                if not m
                else f"{100 * m['accuracy']:.2f} | {m['nll']:.4f} | {100 * m['ece']:.2f} | {100 * m['mce']:.2f}"
            )
            + " |"
        )
    budget = cfg["eval_seconds"] if cfg["budget"] == "seconds" else cfg["eval_iterations"]
    lines += [
        "",
        "MAMBA and pSGLD are the same arm when MAMBA picks plain pSGLD (their numbers differ only by the "
        "iterations each got in the same seconds).",
        f"Each configuration: {budget:g} {'s' if cfg['budget'] == 'seconds' else 'iterations'} of sampling "
        f"from the MAP, first {100 * cfg['eval_burn_in']:g} % dropped, at most {cfg['eval_max_draws']} draws "
        "averaged.",
        "",
        "## Rows and verdicts",
        "",
        "| quantity | source | paper | ours | rule | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        paper = r["paper"] if isinstance(r["paper"], str) else f"{r['paper']:.1f}"
        ours = r["ours"] if isinstance(r["ours"], str) or r["ours"] is None else f"{r['ours']:.2f}"
        lines.append(
            f"| {r['quantity']} | {r['source']} | {paper} | {ours or '-'} | {r['rule']} | **{r['verdict']}** |"
        )
    v = report["verdicts"]
    lines += [
        "",
        "Verdicts: " + ", ".join(f"{n} {k}" for k, n in v.items()) + ". Paper rows: agrees / differs; "
        "this experiment's hypotheses: holds / fails (checks: not counted among the paper's claims).",
        "",
        "## MAMBA's last round",
        "",
        f"| arm | {t['metric']} | iterations |",
        "|---|---|---|",
    ]
    for r in t["final_round"]:
        lines.append(f"| {r['label']} | {r['metric']:.4g} | {r['iterations']:,} |")
    lines += [
        "",
        "## Reduced run",
        "",
        *[f"- {n}" for n in report["reduced"]],
        "",
        "## Notes",
        "",
        "- Metric: validation NLL of the round's samples. Sd-SGMCMC targets a factorised approximation of the "
        "posterior, so KSD against the exact posterior would reward removing the structure (rho -> 1); the "
        "structured paper itself judges its samplers by predictive accuracy.",
        "- The defaults: rho = 0.5 and M = 32 from the structured paper's best MNIST result; K = 16 from the "
        "authors' code (the paper's appendix says K = 300 for MNIST). Groups are round-robin (even sizes).",
        "- Under a time budget a copy costs a forward and backward pass, so K trades mixing per step against the "
        "number of steps; MAMBA sees that trade-off, an iteration budget would not.",
        "",
        *[f"![{k}]({f})" for k, f in FIGURES.items()],
        "![MAMBA rounds](tuning/metric_by_round.png)",
        "",
    ]
    return "\n".join(lines)


def _plot(out: Path, report: dict) -> None:
    plt = pyplot()
    if plt is None:  # pragma: no cover - plotting is optional
        return
    t = report["tuning"]
    dim = report["dim"]
    r0 = [r for r in t["round0"] if r["kind"] == "Sd-pSGLD"]
    Ks = sorted({r["num_copies"] for r in r0})
    fig, axes = plt.subplots(1, max(1, len(Ks)), figsize=(4 * max(1, len(Ks)), 3.4), squeeze=False, sharey=True)
    plain = [r for r in t["round0"] if r["kind"] == "pSGLD"]
    for ax, K in zip(axes[0], Ks):
        for rho in sorted({r["rho"] for r in r0}):
            pts = sorted(
                (r["num_groups"], r["metric"])
                for r in r0
                if r["num_copies"] == K and r["rho"] == rho and math.isfinite(r["metric"])
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=f"rho={rho:g}")
        if plain and math.isfinite(plain[0]["metric"]):
            ax.axhline(plain[0]["metric"], color="k", ls="--", lw=1, label="pSGLD")
        ax.set_xscale("log")
        ax.set(title=f"K = {K}", xlabel=f"groups M (P = {dim:,})", ylabel=t["metric"])
        ax.legend(fontsize=7)
    fig.suptitle("MAMBA round 0: metric of every arm")
    fig.tight_layout()
    fig.savefig(out / FIGURES["round0"], dpi=100)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name in (c for c in CONFIGS if c in report["evaluation"]):
        c = report["evaluation"][name]["curve"]
        if not c:
            continue
        label = f"{name}: {report['evaluation'][name]['structure']['label']}"
        axes[0].plot([p["seconds"] for p in c], [100 * p["accuracy"] for p in c], marker="o", ms=3, label=label)
        axes[1].plot([p["seconds"] for p in c], [p["nll"] for p in c], marker="o", ms=3, label=label)
    axes[0].set(xlabel="sampling time (s)", ylabel="test accuracy (%)", title="running posterior predictive")
    axes[1].set(xlabel="sampling time (s)", ylabel="test NLL", title="running posterior predictive")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / FIGURES["eval"], dpi=100)
    plt.close(fig)


__all__ = [
    "Config",
    "PRESETS",
    "run",
    "comparisons",
    "mamba_arms",
    "psgld_arm",
    "structure_of",
    "PAPER_ACCURACY",
    "DEFAULTS",
]
