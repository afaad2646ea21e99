r"""Shared pieces of the MAMBA experiments (Coullon, South & Nemeth, "Efficient and
generalizable tuning strategies for stochastic gradient MCMC", Sect. 4 and App. C).

Used by :mod:`~structmc_papers.mamba_logreg` (Table 1), :mod:`~structmc_papers.mamba_pmf`
(Table 2) and the neural-network experiments; everything here is model-agnostic.

**Samplers** (:data:`SAMPLERS`, App. D): SGLD, SGLD-CV, SGHMC, SGHMC-CV, SGNHT, SGNHT-CV as
:class:`SamplerSpec` records — library sampler, gradient estimator (``"minibatch"`` or the
control variate ``"cv"`` centred at the MAP, App. D.3), fixed hyperparameters (SGHMC:
friction α = 0.01, β̂ = 0, momentum redrawn before every iteration of L leapfrog updates as in
the reference code; SGNHT: a = 0.01) and the extra grid axis (SGHMC: L ∈ {5, 10}; the
heuristic uses L = 10, Table 4).

**Step sizes.** The paper's grids are in log10 h of its own parameterisation
(``θ + h∇log π + √(2h)ξ`` for SGLD, ``dt`` for SGHMC/SGNHT): our ``lr`` is 2h for SGLD and h for
SGHMC/SGNHT (:func:`structmc.tuning.lr_from_paper`, docs/conventions.md). :func:`paper_h`
converts back for reports.

**Methods** (:data:`METHODS`, Sect. 4, App. B, C):

* ``M-KSD`` / ``M-FSSD``: :func:`structmc.tuning.mamba` over the product of the step grid,
  the batch fractions (and L), ranked by KSD / FSSD-opt; started from the MAP, CV centre the MAP.
  Its budget T is given through R, the sampling time of the arm that survives every round
  (the paper's "R = 1 s"): ``T = R · rounds / Σ_i 1/|S_i|`` (:func:`total_budget`).
* ``Grid``: :func:`structmc.tuning.grid_search` over the same step grid (× L), batch 10 %,
  a fixed number of iterations per arm, started from the MAP plus Gaussian noise (App. B.1),
  ranked by a held-out metric (the paper: test log-loss / RMSE) or by KSD.
* ``Heuristic``: h = 1/N, batch 10 % (Brosse et al. 2018); no tuning.

**Evaluation** (:func:`evaluate_arm`): each chosen arm runs from the MAP for an evaluation
budget (the paper: 10 s for logistic regression, 20 s for PMF); the moments of every draw
after burn-in are accumulated on the fly (Welford, float64) for the posterior standard
deviations and ξ(σ̂) = ‖σ̂ − σ_ref‖/‖σ_ref‖; every ``thin``-th draw is kept for the KSD
(full-data scores, IMQ kernel, V-statistic, at most ``max_ksd_samples`` evenly spaced) and
for the model's own metrics (accuracy, RMSE, ...), and the KSD against time is recorded for
the Fig. 1/2-style curves.

**Report** (:func:`method_rows`, :func:`claim_row`, :func:`markdown_report_table`): a row per
method × metric with the six samplers as columns, ours next to the paper's, and a verdict
that compares *orderings* (how many samplers each method is within a factor of the best
method for, ours against the paper's count) rather than magnitudes — KSD scales with N, the
number of samples and the time budget, so magnitudes are comparable only at the paper's
settings (the ``full`` presets) — plus rows for the paper's qualitative claims.

A caveat that shapes small runs: with the paper's IMQ kernel (c = 1, unit length scale) on a
posterior much narrower than 1, the kernel is nearly flat over the draws, and the
V-statistic KSD of n independent exact draws is about √((E‖∇log π‖² + d)/n), while a chain
that has barely left the mode scores about √d. An arm that mixes therefore beats one that
sticks to the MAP only once n exceeds roughly the mean posterior precision, so with short
rounds (few draws per arm) KSD favours arms that move little — slow full-batch arms or tiny
steps. The ``quick`` presets, with budgets a fraction of the paper's, show this.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import torch
from torch import Tensor

from structmc.diagnostics import ksd, ksd_curve
from structmc.executors import as_executor
from structmc.run import Budget, DivergenceError
from structmc.storage import write_atomic
from structmc.tuning import FSSD, KSD, Arm, Problem, grid_search, lr_from_paper, mamba, round_sizes
from structmc.tuning.task import evenly

from ._report import REPRODUCED, SMALLER_MARGIN, TIED, Ordering, WithinNoise, fmt_num, json_value
from ._shared import json_floats, versions
from ._shared import jsonable as _jsonable
from ._shared import threads as Threads

SAMPLER_LABELS = ("SGLD", "SGLD-CV", "SGHMC", "SGHMC-CV", "SGNHT", "SGNHT-CV")
METHODS = ("M-KSD", "M-FSSD", "Grid", "Heuristic")


# ---------------------------------------------------------------------------------------------
# samplers and arms
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SamplerSpec:
    """One of the paper's six samplers: ``name`` (library sampler), ``gradient``
    (``"minibatch"`` or ``"cv"``), ``fixed`` hyperparameters, ``leapfrog_grid`` (the extra
    grid axis of MAMBA and grid search; empty: none) and ``heuristic_leapfrog`` (L of the
    heuristic arm)."""

    label: str
    name: str
    gradient: str = "minibatch"
    fixed: Mapping[str, Any] = field(default_factory=dict)
    leapfrog_grid: tuple[int, ...] = ()
    heuristic_leapfrog: int | None = None

    def config(self, h: float, num_leapfrog: int | None = None) -> dict:
        """The sampler config dict for the paper's step size ``h``."""
        cfg = {"name": self.name, "lr": lr_from_paper(self.name, h), **dict(self.fixed)}
        if num_leapfrog is not None:
            cfg["num_leapfrog"] = int(num_leapfrog)
        return cfg


SGHMC_FIXED = {"friction": 0.01, "beta_hat": 0.0, "resample_momentum": True}  # App. D.1; reference code
SGNHT_FIXED = {"a": 0.01}  # App. D.2
SAMPLERS: dict[str, SamplerSpec] = {
    "SGLD": SamplerSpec("SGLD", "sgld"),
    "SGLD-CV": SamplerSpec("SGLD-CV", "sgld", "cv"),
    "SGHMC": SamplerSpec("SGHMC", "sghmc", "minibatch", SGHMC_FIXED, (5, 10), 10),
    "SGHMC-CV": SamplerSpec("SGHMC-CV", "sghmc", "cv", SGHMC_FIXED, (5, 10), 10),
    "SGNHT": SamplerSpec("SGNHT", "sgnht", "minibatch", SGNHT_FIXED),
    "SGNHT-CV": SamplerSpec("SGNHT-CV", "sgnht", "cv", SGNHT_FIXED),
}


def sampler_spec(label: str | SamplerSpec) -> SamplerSpec:
    """The :class:`SamplerSpec` of ``"SGLD"``, ..., ``"SGNHT-CV"`` (case-insensitive)."""
    if isinstance(label, SamplerSpec):
        return label
    for k, v in SAMPLERS.items():
        if k.lower() == str(label).lower():
            return v
    raise ValueError(f"unknown sampler {label!r}; choose from {', '.join(SAMPLERS)}")


def log10_grid(start: float, stop: float, step: float = 0.5) -> tuple[float, ...]:
    """``start, start − step, ..., stop`` (both included), e.g. ``log10_grid(-1, -7.5)`` is the
    14 values of App. C.1.2."""
    n = int(round(abs(stop - start) / step)) + 1
    sign = -1.0 if stop < start else 1.0
    return tuple(round(start + sign * k * step, 10) for k in range(n))


LOGREG_LOG10_H = log10_grid(-1.0, -7.5)  # App. C.1.2: 14 step sizes
PMF_LOG10_H = log10_grid(-2.0, -7.5)  # App. C.2.2 (and C.3): 12 step sizes
LOGREG_BATCHES = (1.0, 0.1, 0.01, 0.001)  # App. C.1.3: 100 %, 10 %, 1 %, 0.1 %
PMF_BATCHES = (1.0, 0.1, 0.01)  # App. C.2.3: 100 %, 10 %, 1 % (80,000 / 8,000 / 800 ratings)


def mamba_arms(
    spec: str | SamplerSpec, log10_h: Sequence[float], batch_fractions: Sequence[float | int | None]
) -> list[Arm]:
    """MAMBA's arms: step grid × batch fractions (× L for SGHMC), e.g. 14 × 4 = 56 arms for
    SGLD on the logistic regression, 14 × 4 × 2 = 112 for SGHMC."""
    spec = sampler_spec(spec)
    leapfrogs = spec.leapfrog_grid or (None,)
    return [
        Arm(spec.config(10.0**lh, L), b, spec.gradient) for b in batch_fractions for lh in log10_h for L in leapfrogs
    ]


def grid_search_arms(spec: str | SamplerSpec, log10_h: Sequence[float], batch: float | int | None = 0.1) -> list[Arm]:
    """Grid search's arms: the step grid (× L for SGHMC) at a fixed batch (10 %)."""
    return mamba_arms(spec, log10_h, (batch,))


def heuristic_arm(spec: str | SamplerSpec, num_data: int, batch: float | int | None = 0.1) -> Arm:
    """h = 1/N, batch 10 % (and L = 10 for SGHMC, Table 4)."""
    spec = sampler_spec(spec)
    return Arm(spec.config(1.0 / int(num_data), spec.heuristic_leapfrog), batch, spec.gradient)


def method_arms(
    method: str,
    spec: str | SamplerSpec,
    log10_h: Sequence[float],
    batch_fractions: Sequence[float],
    num_data: int,
    grid_batch: float = 0.1,
) -> list[Arm]:
    """The arms ``method`` (one of :data:`METHODS`) chooses from."""
    if method in ("M-KSD", "M-FSSD", "MAMBA"):
        return mamba_arms(spec, log10_h, batch_fractions)
    if method == "Grid":
        return grid_search_arms(spec, log10_h, grid_batch)
    if method == "Heuristic":
        return [heuristic_arm(spec, num_data, grid_batch)]
    raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)} or 'MAMBA'")


def paper_h(arm: Arm) -> float:
    """The paper's step size h of ``arm`` (inverse of :func:`~structmc.tuning.lr_from_paper`)."""
    lr = float(arm.sampler["lr"])
    return lr / 2.0 if arm.sampler_name in ("sgld", "psgld") else lr


@overload
def arm_summary(arm: Arm, num_data: int | None = None) -> dict: ...
@overload
def arm_summary(arm: None, num_data: int | None = None) -> None: ...


def arm_summary(arm: Arm | None, num_data: int | None = None) -> dict | None:
    """``{"log10_h", "lr", "batch_pct", "batch", "L", "label"}`` of ``arm`` (Table 4 style)."""
    if arm is None:
        return None
    b = arm.batch_size
    pct: float | None
    if b is None:
        pct, n = 100.0, num_data
    elif isinstance(b, int):
        pct, n = (100.0 * b / num_data if num_data else None), b
    else:
        pct, n = 100.0 * b, (max(1, int(math.floor(b * num_data))) if num_data else None)
    return {
        "log10_h": round(math.log10(paper_h(arm)), 3),
        "lr": float(arm.sampler["lr"]),
        "batch_pct": pct,
        "batch": n,
        "L": arm.sampler.get("num_leapfrog"),
        "label": arm.label,
        "arm": arm.to_dict(),
    }


# ---------------------------------------------------------------------------------------------
# budgets
# ---------------------------------------------------------------------------------------------
def total_budget(R: float, num_arms: int, eta: int = 3, kind: str = "seconds") -> Budget:
    """The MAMBA budget T for which the arm that survives every round runs for ``R`` (seconds
    or iterations): with rounds of |S_i| arms, each round spends T/rounds split evenly, so
    ``R = Σ_i T/(rounds·|S_i|)`` and ``T = R · rounds / Σ_i 1/|S_i|``. The paper states
    R (1 s for logistic regression, 10 s for PMF and the BNN)."""
    sizes = round_sizes(num_arms, eta)
    T = float(R) * len(sizes) / sum(1.0 / s for s in sizes)
    if kind == "seconds":
        return Budget(seconds=T)
    if kind in ("iterations", "grad_evals"):
        return Budget(**{kind: int(math.ceil(T))})
    raise ValueError(f"kind must be 'seconds', 'iterations' or 'grad_evals', got {kind!r}")


def budget_dict(budget: Budget) -> dict:
    return {k: getattr(budget, k) for k in ("iterations", "seconds", "grad_evals") if getattr(budget, k) is not None}


# ---------------------------------------------------------------------------------------------
# tuning
# ---------------------------------------------------------------------------------------------
@dataclass
class TuningSettings:
    """How the four methods run (shared by every sampler of an experiment).

    ``R``: MAMBA's per-surviving-arm budget (seconds or iterations, ``budget_kind``);
    ``grid_budget``: per arm of grid search; ``grid_metric``: ``"ksd"`` or a callable
    ``fn(samples, problem)`` (lower is better) — the paper's held-out metric;
    ``thin``/``max_samples``/``min_samples``/``metric_cost``: as :func:`structmc.tuning.mamba`
    (the paper thins by 10); ``fssd_*``: the FSSD-opt settings (10 locations, 100 Adam steps)
    and kernel — ``"gauss"`` (median-heuristic bandwidth, Jitkrittum et al.'s choice) by
    default, because :class:`structmc.tuning.FSSD`'s default IMQ kernel has a fixed length
    scale 1: for chains that wander far from the posterior (spread ≫ 1, bounded scores, e.g.
    SGLD with h = 0.1 on the logistic regression) every kernel value is tiny and FSSD ranks
    them *best*; the scale-aware Gaussian kernel ranks them worst;
    ``executor``: where arms run (``None`` in process)."""

    log10_h: Sequence[float]
    batch_fractions: Sequence[float]
    R: float
    budget_kind: str = "seconds"
    grid_budget: Budget = field(default_factory=lambda: Budget(iterations=5000))
    grid_batch: float = 0.1
    grid_metric: Any = "ksd"
    eta: int = 3
    thin: int = 10
    max_samples: int = 256
    min_samples: int = 10
    metric_cost: float | None = 0.25
    fssd_locations: int = 10
    fssd_steps: int = 100
    fssd_kernel: str = "gauss"
    restart: str = "state"
    executor: Any = None
    seed: int = 0


def _metric(method: str, s: TuningSettings):
    if method == "M-KSD" or method == "MAMBA":
        return KSD()
    if method == "M-FSSD":
        return FSSD(num_locations=s.fssd_locations, steps=s.fssd_steps, kernel=s.fssd_kernel, seed=s.seed)
    raise ValueError(method)


def tune(
    method: str,
    spec: str | SamplerSpec,
    s: TuningSettings,
    *,
    problem: Problem,
    grid_problem: Problem | None = None,
    trace_dir: str | Path | None = None,
    plot: bool = True,
) -> dict:
    """Choose an arm of ``spec`` with ``method`` (one of :data:`METHODS` or ``"MAMBA"``, an
    alias of ``"M-KSD"``).

    ``problem``: started from the MAP (MAMBA's start and the CV centre); ``grid_problem``: the
    grid search's start (MAP plus noise; default ``problem``). Returns ``{"method", "sampler",
    "arm" (the chosen :class:`Arm` or None), "num_arms", "budget" (T, given), "R",
    "timing" (the tuner's split: wall, sampling, scores, metric, setup, overhead),
    "wall_s" (this call, problem set-up excluded), "wall_over_T" (seconds budgets), "rounds",
    "summary", "error"}``; the trace (``trace.json``, ``metric_by_round.png``) goes to
    ``trace_dir`` when given (the plot only with ``plot=True``). A tuner whose every arm fails
    returns ``arm=None`` and its error."""
    spec = sampler_spec(spec)
    num_data = problem.num_data
    arms = method_arms(method, spec, s.log10_h, s.batch_fractions, num_data or 1, s.grid_batch)
    out: dict[str, Any] = {
        "method": method,
        "sampler": spec.label,
        "arm": None,
        "num_arms": len(arms),
        "budget": None,
        "R": None,
        "timing": {},
        "wall_s": 0.0,
        "wall_over_T": None,
        "rounds": [],
        "summary": "",
        "error": None,
    }
    if method == "Heuristic":
        out["arm"] = arms[0]
        out["summary"] = f"heuristic: {arms[0].label} (h = 1/N, no tuning)"
        return out
    common = dict(
        executor=s.executor,
        seed=s.seed,
        thin=s.thin,
        max_samples=s.max_samples,
        min_samples=s.min_samples,
        metric_cost=s.metric_cost,
        progress=False,
    )
    t0 = time.perf_counter()
    try:
        if method == "Grid":
            gp = grid_problem or problem
            budget = s.grid_budget
            metric = KSD() if s.grid_metric == "ksd" else s.grid_metric
            res = grid_search(
                gp.energy, None, arms, budget, batch_size=s.grid_batch, metric=metric, problem=gp, **common
            )
        else:
            budget = total_budget(s.R, len(arms), s.eta, s.budget_kind)
            out["R"] = s.R
            res = mamba(
                problem.energy,
                None,
                arms,
                budget,
                eta=s.eta,
                metric=_metric(method, s),
                problem=problem,
                restart=s.restart,
                **common,
            )
    except Exception as err:  # every arm failed: report, do not stop the experiment
        out["error"] = f"{type(err).__name__}: {err}"
        out["wall_s"] = time.perf_counter() - t0
        out["budget"] = budget_dict(budget) if "budget" in locals() else None
        return out
    out["wall_s"] = time.perf_counter() - t0
    out["budget"] = budget_dict(budget)
    out["arm"] = res.best
    out["timing"] = dict(res.timing)
    out["summary"] = res.summary()
    out["rounds"] = [
        {
            "round": r["round"],
            "arms": len(r["arms"]),
            "budget": {k: v for k, v in r["budget"].items() if v is not None},
            "best": min((x["metric"] for x in r["results"]), default=math.inf),
            "failed": sum(1 for x in r["results"] if x["error"]),
            "wall_s": r["wall_s"],
        }
        for r in res.rounds
    ]
    if budget.seconds is not None:  # the whole call: problem checks, the tuner's rounds, its result
        out["wall_over_T"] = out["wall_s"] / budget.seconds
    if trace_dir is not None:
        trace_dir = Path(trace_dir)
        trace_dir.mkdir(parents=True, exist_ok=True)
        res.save(trace_dir / "trace.json")
        try:
            if not plot:
                raise ImportError
            res.plot(trace_dir / "metric_by_round.png")
        except Exception:  # no plot asked for, or matplotlib missing
            pass
    return out


def tune_all(
    samplers: Sequence[str],
    methods: Sequence[str],
    s: TuningSettings,
    *,
    problem: Problem,
    grid_problem: Problem | None = None,
    out_dir: str | Path | None = None,
    log: Callable[[str], None] | None = None,
    plot_traces: bool = True,
    units: Units | None = None,
) -> dict:
    """:func:`tune` for every sampler and method: ``{sampler: {method: outcome}}``. One
    executor (built from ``s.executor`` if it is a spec) serves every call. With ``units``,
    each outcome is a piece ``tuning/<sampler>/<method>``: read back if it finished in an
    earlier sitting."""
    own = s.executor is None or isinstance(s.executor, str)
    ex = as_executor(s.executor)
    s_local = TuningSettings(**{**s.__dict__, "executor": ex})
    result: dict = {}
    try:
        for label in samplers:
            result[label] = {}
            for method in methods:
                trace = None if out_dir is None else Path(out_dir) / "tuning" / label / method

                def one(method=method, label=label, trace=trace) -> dict:
                    return tune(
                        method,
                        label,
                        s_local,
                        problem=problem,
                        grid_problem=grid_problem,
                        trace_dir=trace,
                        plot=plot_traces,
                    )

                key = f"tuning/{label}/{method}"
                earlier = units is not None and units.done(key)
                if units is None:
                    res = one()
                else:
                    res = units.get_or_run(key, one, encode=outcome_json, decode=outcome_from_json)
                result[label][method] = res
                if log is not None:
                    chosen = res["arm"].label if res["arm"] is not None else f"none ({res['error']})"
                    log(
                        f"{label:9s} {method:9s} -> {chosen}  [{res['wall_s']:.1f} s"
                        + (", finished in an earlier sitting]" if earlier else "]")
                    )
    finally:
        if own:
            ex.close()
    return result


# ---------------------------------------------------------------------------------------------
# resume: the finished pieces of a run
# ---------------------------------------------------------------------------------------------
UNITS = "units"  # the run folder's sub-folder of finished pieces
#: config fields that do not change a result: a resumed run may differ in them
UNIT_FREE_FIELDS = ("threads", "num_threads", "executor", "plot_traces")


class ResumeMismatch(ValueError):
    """``resume=True`` in a folder whose pieces came from another configuration."""


class Units:
    """The finished pieces of a MAMBA experiment in ``out/units``: one JSON file per piece
    (a tuner's outcome, one evaluation run of one arm), written atomically when the piece
    ends, with the seconds it took. Every piece is a time-budgeted run of its own (its seed
    fixed by the experiment, not by the pieces before it), so a run cut short and resumed
    gives the report a run without the cut would have given, up to the timing noise every
    seconds budget has.

    ``resume=False`` removes the pieces of an earlier run (a folder's pieces are never
    mixed); ``resume=True`` keeps them when ``config`` (the experiment's config as a dict)
    equals the one they were made with, except in :data:`UNIT_FREE_FIELDS`, and raises
    :class:`ResumeMismatch` naming the fields that differ otherwise, before any compute."""

    def __init__(self, out: str | Path, config: Mapping[str, Any], *, resume: bool):
        self.folder = Path(out) / UNITS
        self.resume = bool(resume)
        self.resumed = 0  # pieces read back in this sitting
        self.resumed_seconds = 0.0  # the compute seconds they took in earlier sittings
        self.credited_seconds = 0.0  # earlier sittings' seconds of work that resumed itself (see credit)
        record = self.folder / "config.json"
        mine = {k: v for k, v in json.loads(json.dumps(_jsonable(dict(config)))).items() if k not in UNIT_FREE_FIELDS}
        if resume and record.exists():
            theirs = {k: v for k, v in json.loads(record.read_text()).items() if k not in UNIT_FREE_FIELDS}
            differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k, "<absent>") != theirs.get(k, "<absent>"))
            if differ:
                shown = "; ".join(
                    f"{k}: {theirs.get(k, '<absent>')!r} there, {mine.get(k, '<absent>')!r} now" for k in differ[:6]
                )
                raise ResumeMismatch(
                    f"resume: the finished pieces in {self.folder} come from another configuration ({shown}"
                    f"{'; ...' if len(differ) > 6 else ''}); resume with the same preset and options, or start "
                    "afresh without resume (which removes them)"
                )
        elif self.folder.exists():  # a fresh start: an earlier run's pieces go
            import shutil

            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(record, json.dumps(mine, indent=1))

    def _path(self, key: str) -> Path:
        parts = [p for p in key.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise ValueError(f"a piece's key must be a relative path of names, got {key!r}")
        return self.folder.joinpath(*parts).with_suffix(".json")

    def done(self, key: str) -> bool:
        return self._path(key).exists()

    def get_or_run(
        self,
        key: str,
        compute: Callable[[], Any],
        *,
        encode: Callable[[Any], Any] = lambda v: v,
        decode: Callable[[Any], Any] = lambda v: v,
    ) -> Any:
        """The piece ``key``: read back (``decode`` of its JSON) when it finished earlier, else
        ``compute()``, saved as ``encode`` of it (JSON-ready through :func:`jsonable`)."""
        path = self._path(key)
        if path.exists():
            record = json.loads(path.read_text())
            self.resumed += 1
            self.resumed_seconds += float(record.get("seconds", 0.0))
            return decode(json_floats(record["value"]))
        t0, credited = time.perf_counter(), self.credited_seconds
        value = compute()
        # a piece that resumed itself (a tuner from its last committed round) took its earlier
        # sittings' seconds too (credited during compute)
        seconds = time.perf_counter() - t0 + self.credited_seconds - credited
        record = {"key": key, "seconds": seconds, "value": encode(value)}
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(jsonable(record)))
        return value

    def summary(self) -> dict:
        """What this sitting took from earlier ones: ``pieces_read_back``, ``their_seconds`` (the
        seconds those pieces took) and ``credited_seconds`` (see :meth:`credit`)."""
        return {
            "pieces_read_back": self.resumed,
            "their_seconds": self.resumed_seconds - self.credited_seconds,
            "credited_seconds": self.credited_seconds,
        }

    def credit(self, seconds: float) -> None:
        """Count ``seconds`` of work that earlier sittings did for a computation that resumes
        itself rather than through a piece: a tuner continued from its last committed round
        (``progress.pt``). They go into the report's work over every sitting and into the
        seconds of the piece being computed, if any."""
        if seconds > 0:
            self.credited_seconds += float(seconds)
            self.resumed_seconds += float(seconds)

    def seconds(self, prefix: str = "") -> float:
        """The compute seconds of the finished pieces under ``prefix`` (summed over sittings)."""
        base = self.folder.joinpath(*[p for p in prefix.split("/") if p])
        files = [base.with_suffix(".json")] if base.with_suffix(".json").is_file() else sorted(base.rglob("*.json"))
        return sum(float(json.loads(f.read_text()).get("seconds", 0.0)) for f in files if f.name != "config.json")


def set_wall_seconds(report: dict, t_start: float, units: Units | None) -> None:
    """``report["wall_seconds"]``: this sitting's seconds since ``t_start``; for a resumed run
    also ``report["compute_seconds"]``, those plus the seconds the pieces read back took in
    earlier sittings, and ``report["resumed"]`` (how many)."""
    report["wall_seconds"] = time.perf_counter() - t_start
    if units is not None and (units.resumed or units.credited_seconds):
        report["compute_seconds"] = report["wall_seconds"] + units.resumed_seconds
        report["resumed"] = units.summary()


def wall_line(report: Mapping[str, Any]) -> str:
    """The report's wall-time sentence: the total, its phases, what came from earlier sittings."""
    line = (
        f"Wall time {report['wall_seconds']:.1f} s ("
        + ", ".join(f"{k} {v:.1f} s" for k, v in report["phases_seconds"].items())
        + ")"
    )
    if report.get("resumed"):
        line += f"; resumed: {resumed_phrase(report)} (the phases above count every sitting)"
    return line + "."


def resumed_phrase(report: Mapping[str, Any], pieces: str = "finished pieces") -> str:
    """What a resumed run took from earlier sittings, and its work over every sitting."""
    r = report["resumed"]
    out = (
        f"{r['pieces_read_back']} {pieces} read back, with the {r['their_seconds']:.1f} s they took in earlier sittings"
    )
    if r.get("credited_seconds"):
        out += f", and {r['credited_seconds']:.1f} s of a tuner's rounds committed in earlier sittings"
    return out + f": {report['compute_seconds']:.1f} s of work in all"


def outcome_json(outcome: Mapping[str, Any]) -> dict:
    """:func:`tune`'s outcome as JSON (the chosen :class:`Arm` as its dict); :func:`outcome_from_json`
    reads it back."""
    d = {k: v for k, v in outcome.items() if k != "arm"}
    d["arm"] = None if outcome["arm"] is None else outcome["arm"].to_dict()
    return jsonable(d)


def outcome_from_json(d: Mapping[str, Any]) -> dict:
    out = dict(d)
    out["arm"] = None if d["arm"] is None else Arm.from_dict(d["arm"])
    return out


# ---------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------
class _Welford:
    """Running mean and variance of ``[C, P]`` draws, pooled over chains, in float64."""

    def __init__(self):
        self.n, self.mean, self.m2 = 0, None, None

    def add(self, theta: Tensor) -> None:
        for row in theta.detach().to(torch.float64):
            self.n += 1
            if self.mean is None:
                self.mean, self.m2 = row.clone(), torch.zeros_like(row)
                continue
            delta = row - self.mean
            self.mean += delta / self.n
            self.m2 += delta * (row - self.mean)

    def sd(self) -> Tensor | None:
        if self.n < 2:
            return None
        return (self.m2 / (self.n - 1)).sqrt()


def relative_sd_error(sd: Tensor | None, reference_sd: Tensor | None) -> float | None:
    """ξ(σ̂) = ‖σ̂ − σ_ref‖₂ / ‖σ_ref‖₂ (Sect. 4.1)."""
    if sd is None or reference_sd is None:
        return None
    ref = torch.as_tensor(reference_sd, dtype=torch.float64)
    sd = sd.to(torch.float64)
    if not bool(torch.isfinite(sd).all()):
        return None
    return float((sd - ref).norm() / ref.norm())


def evaluate_arm(
    problem: Problem,
    arm: Arm,
    budget: Budget,
    *,
    seed: int = 0,
    thin: int = 10,
    max_ksd_samples: int | None = 2000,
    burn_in: float = 0.0,
    reference_sd: Tensor | None = None,
    extra: Callable[[Tensor], dict] | None = None,
    curve_points: int = 20,
    sd_every: int = 1,
) -> dict:
    """Run ``arm`` on ``problem`` (from its ``init``, the MAP) for ``budget`` and measure it.

    ``burn_in``: a fraction of the budget run first and discarded (seconds or iterations,
    like the budget). Every draw after it (every ``sd_every``-th) updates the moments (the
    posterior standard deviations, ξ against ``reference_sd``); every ``thin``-th is kept
    (the draws, with the sampling time at each; past ``2·max_ksd_samples`` kept draws every
    other one is dropped and ``thin`` doubles, so memory stays bounded) for the KSD on at
    most ``max_ksd_samples`` evenly spaced kept draws (full-data scores; ``None``: all kept), the KSD-against-time
    curve, and ``extra(kept_draws [n, P]) -> dict`` (e.g. accuracy, RMSE).

    Returns ``{"arm", "iterations" (after burn-in: the paper's "# of samples"), "seconds",
    "kept", "ksd_samples", "ksd", "sd", "mean", "xi", "curve" {"seconds", "ksd"},
    "ksd_seconds" (scoring time), "error", ...extra}``; a diverged run gives ``error`` and
    ``ksd=None``."""
    out = {
        "arm": arm.label,
        "iterations": 0,
        "seconds": 0.0,
        "burn_in_iterations": 0,
        "kept": 0,
        "ksd_samples": 0,
        "ksd": None,
        "xi": None,
        "sd": None,
        "mean": None,
        "curve": {"seconds": [], "ksd": []},
        "ksd_seconds": 0.0,
        "error": None,
    }
    run = problem.run(arm, seed=seed)
    stats = _Welford()
    draws, times = [], []
    t_start = None
    try:
        if burn_in > 0:
            b = budget_dict(budget)
            kind, total = next(iter(b.items()))
            part = total * burn_in
            for _ in run.iterate(Budget(**{kind: (part if kind == "seconds" else max(1, int(part)))})):
                pass
            out["burn_in_iterations"] = run.iteration
            rest = total - part if kind == "seconds" else max(1, int(total - int(part)))
            budget = Budget(**{kind: rest})
        t0 = run.elapsed
        t_start = t0
        k = 0
        cap = None if max_ksd_samples is None else max(2, 2 * int(max_ksd_samples))
        for _, state, _ in run.iterate(budget):
            k += 1
            if k % sd_every == 0:
                stats.add(state.theta)
            if k % thin == 0:
                draws.append(state.theta.detach().clone())
                times.append(run.elapsed - t0)
                if cap is not None and len(draws) >= cap:  # memory: keep evenly spaced draws, thin twice as much
                    draws, times, thin = draws[1::2], times[1::2], 2 * thin
    except DivergenceError as err:
        out["error"] = f"diverged: {err}"
    except Exception as err:  # pragma: no cover - reported, never raised
        out["error"] = f"{type(err).__name__}: {err}"
    out["iterations"] = run.iteration - out["burn_in_iterations"]
    out["seconds"] = run.elapsed - (t_start or 0.0)
    out["kept"] = len(draws)
    out["thin"] = thin
    sd = stats.sd()
    if out["error"] is None and sd is not None:
        out["sd"] = sd.tolist()
        out["mean"] = stats.mean.tolist()
        out["xi"] = relative_sd_error(sd, reference_sd)
    if out["error"] is None and draws:
        x = torch.cat(draws, 0)  # [n·C, P], chains pooled
        t = torch.tensor(times, dtype=torch.float64).repeat_interleave(draws[0].shape[0])
        if max_ksd_samples is not None and x.shape[0] > max_ksd_samples:
            idx = evenly(torch.arange(x.shape[0]), max_ksd_samples)
            x, t = x[idx], t[idx]
        t0 = time.perf_counter()
        scores = problem.scores(x)
        if bool(torch.isfinite(scores).all()) and bool(torch.isfinite(x).all()):
            out["ksd"] = float(ksd(x, scores))
            n = x.shape[0]
            at = sorted({max(1, int(round(n * (j + 1) / curve_points))) for j in range(curve_points)})
            curve = ksd_curve(x, scores, at=at)
            out["curve"] = {"seconds": [float(t[a - 1]) for a in at], "ksd": [float(v) for v in curve], "samples": at}
        else:
            out["error"] = "non-finite scores at the draws"
        out["ksd_seconds"] = time.perf_counter() - t0
        out["ksd_samples"] = int(x.shape[0])
        if extra is not None:
            out.update(extra(x))
    return out


REPEAT_SEED_STRIDE = 100_000_000  # evaluation run r > 0: seeds disjoint from run 0's for any seed < 10,000


def evaluate_all(
    tuned: Mapping[str, Mapping[str, dict]],
    problem: Problem,
    budget: Budget,
    *,
    seed: int = 0,
    repeat: int = 0,
    log: Callable[[str], None] | None = None,
    units: Units | None = None,
    drop: Sequence[str] = (),
    **kwargs,
) -> dict:
    """:func:`evaluate_arm` for every chosen arm of :func:`tune_all`'s result:
    ``{sampler: {method: evaluation}}`` (``None`` where the method chose nothing). The seed
    is the same for every method of a sampler, so methods differ by their arm only.
    ``repeat``: the index of an independent evaluation run of the same arms (Fig. 1: ten runs);
    repeat 0 is the single run of before (same seeds, same chains), repeat r adds
    ``r ×`` :data:`REPEAT_SEED_STRIDE` to every seed. With ``units``, each evaluation is a piece
    ``evaluation/<repeat>/<sampler>/<method>``: read back if it finished in an earlier sitting.
    ``drop``: keys left out of every evaluation (e.g. ``("sd", "mean")`` of a large model)."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 0:
        raise ValueError(f"repeat must be an int >= 0 (the index of an evaluation run), got {repeat!r}")
    out: dict = {}
    for i, (label, by_method) in enumerate(tuned.items()):
        out[label] = {}
        for method, res in by_method.items():
            arm = res["arm"]
            if arm is None:
                out[label][method] = None
                continue
            run_seed = 10_000 * int(seed) + 1000 + i + REPEAT_SEED_STRIDE * repeat
            key = f"evaluation/{repeat}/{label}/{method}"
            earlier = units is not None and units.done(key)

            def one(arm=arm, run_seed=run_seed) -> dict:
                ev = evaluate_arm(problem, arm, budget, seed=run_seed, **kwargs)
                return {k: v for k, v in ev.items() if k not in drop}

            ev = one() if units is None else units.get_or_run(key, one)
            out[label][method] = ev
            if log is not None:
                k = "-" if ev["ksd"] is None else f"{ev['ksd']:.4g}"
                x = "-" if ev["xi"] is None else f"{100 * ev['xi']:.1f}"
                log(
                    f"eval{f' run {repeat + 1}' if repeat else ''} {label:9s} {method:9s} KSD {k:>9s}  "
                    f"xi*100 {x:>7s}  {ev['iterations']} its"
                    + (f"  ({ev['error']})" if ev["error"] else "")
                    + ("  (finished in an earlier sitting)" if earlier else "")
                )
    return out


# ---------------------------------------------------------------------------------------------
# independent evaluation runs (Fig. 1: "the KSD curves for ten independent runs ... the mean curve
# along with a confidence interval (two standard deviations)", Sect. 4.1)
# ---------------------------------------------------------------------------------------------
PAPER_BAND_SD = 2.0  # Fig. 1's band: mean ± two standard deviations over the ten runs


def runs_summary(
    runs: Sequence[Mapping[str, Mapping[str, dict | None]]], key: str, methods: Sequence[str], samplers: Sequence[str]
) -> dict:
    """``evaluation[key]`` over independent evaluation runs (each :func:`evaluate_all`'s result):
    ``{"mean", "sd", "se", "n", "failed"}``, each ``{method: [one value per sampler]}``. ``sd`` is
    the sample standard deviation over the runs (None with fewer than two), ``se = sd/√n``
    (0.0 with one run: the rules then reduce to the plain comparison of the one value). A cell
    where any run failed (diverged, chose no arm, no value) has mean None, which ranks worst:
    a run that diverges is not averaged away."""
    out: dict[str, dict[str, list]] = {k: {} for k in ("mean", "sd", "se", "n", "failed")}
    for m in methods:
        for k in out:
            out[k][m] = []
        for s in samplers:
            vals: list[float | None] = []
            for r in runs:
                ev = (r.get(s) or {}).get(m)
                v = None if ev is None or ev.get("error") else ev.get(key)
                vals.append(None if v is None or not math.isfinite(float(v)) else float(v))
            ok = [v for v in vals if v is not None]
            failed = len(vals) - len(ok)
            mean = None if failed or not ok else sum(ok) / len(ok)
            sd = None
            if mean is not None and len(ok) >= 2:
                sd = math.sqrt(sum((v - mean) ** 2 for v in ok) / (len(ok) - 1))
            out["mean"][m].append(mean)
            out["sd"][m].append(sd)
            out["se"][m].append(
                0.0 if mean is not None and len(ok) < 2 else (None if sd is None else sd / math.sqrt(len(ok)))
            )
            out["n"][m].append(len(ok))
            out["failed"][m].append(failed)
    return out


def resolved_below(a, b, se_a=0.0, se_b=0.0, k: float = 1.0) -> bool:
    """Whether ``a < b`` is resolved by the run-to-run spread: the means are ordered and the gap
    exceeds ``k`` combined standard errors, ``b − a > k·√(se_a² + se_b²)`` (the rule of the
    orderings judged on seed means; ``k = 1`` by default). A missing value (diverged) ranks worst:
    a finite ``a`` is below a missing ``b``; a missing ``a`` is below nothing."""
    a, b = _clean(a), _clean(b)
    if not a < b:
        return False
    if not math.isfinite(b):
        return True
    return b - a > float(k) * math.hypot(float(se_a or 0.0), float(se_b or 0.0))


def _interp(t: Sequence[float], v: Sequence[float], at: float) -> float:
    if at <= t[0]:
        return float(v[0])
    for j in range(1, len(t)):
        if at <= t[j]:
            w = 0.0 if t[j] == t[j - 1] else (at - t[j - 1]) / (t[j] - t[j - 1])
            return float(v[j - 1] + w * (v[j] - v[j - 1]))
    return float(v[-1])


def ksd_band(curves: Sequence[Mapping], points: int = 20, width: float = PAPER_BAND_SD) -> dict | None:
    """Fig. 1's mean curve and band over independent runs: each run's KSD-against-time curve
    (``{"seconds", "ksd"}``, :func:`evaluate_arm`) interpolated linearly onto ``points`` common
    times from the latest first point to the earliest last point (the times every run covers);
    ``{"seconds", "mean", "sd", "lower", "upper", "runs"}`` with the band ``mean ∓ width·sd``
    (the paper: two standard deviations). None without a curve."""
    cs = [c for c in curves if c and c.get("ksd")]
    if not cs:
        return None
    lo = max(float(c["seconds"][0]) for c in cs)
    hi = min(float(c["seconds"][-1]) for c in cs)
    if hi < lo:  # runs that share no time: the shortest run's span
        lo = hi = min(float(c["seconds"][-1]) for c in cs)
    n = max(1, int(points))
    at = [lo + (hi - lo) * j / max(1, n - 1) for j in range(n)] if hi > lo else [hi]
    vals = [[_interp(c["seconds"], c["ksd"], t) for c in cs] for t in at]
    mean = [sum(v) / len(v) for v in vals]
    sd = [math.sqrt(sum((x - mu) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0 for v, mu in zip(vals, mean)]
    return {
        "seconds": at,
        "mean": mean,
        "sd": sd,
        "lower": [mu - width * d for mu, d in zip(mean, sd)],
        "upper": [mu + width * d for mu, d in zip(mean, sd)],
        "runs": len(cs),
    }


# ---------------------------------------------------------------------------------------------
# rankings of arms (App. B.2: the stochastic KSD "follows the fullbatch KSD well")
# ---------------------------------------------------------------------------------------------
def kendall_tau(x: Sequence, y: Sequence) -> float:
    """Kendall's τ_b between two score lists (ties: both orders tied count as neither
    concordant nor discordant; missing/NaN values rank worst, tied with each other). NaN when a
    list is constant."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau needs lists of the same length, got {len(x)} and {len(y)}")
    a, b = [_clean(v) for v in x], [_clean(v) for v in y]
    conc = disc = tx = ty = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            dx = (a[i] > a[j]) - (a[i] < a[j])
            dy = (b[i] > b[j]) - (b[i] < b[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif dx == dy:
                conc += 1
            else:
                disc += 1
    denom = math.sqrt((conc + disc + tx) * (conc + disc + ty))
    return math.nan if denom == 0 else (conc - disc) / denom


def ranking_agreement(labels: Sequence[str], estimate: Sequence, reference: Sequence, min_tau: float) -> dict:
    """Whether ``estimate`` ranks the arms ``labels`` as ``reference`` does (lower is better):
    ``{"tau", "best_reference", "best_estimate", "holds"}``; holds when Kendall's τ_b ≥ ``min_tau``
    AND both pick the same best arm (the arm MAMBA would keep). None (not judged) with fewer than
    three arms that have a reference value."""
    if not len(labels) == len(estimate) == len(reference):
        raise ValueError("ranking_agreement needs one estimate and one reference value per arm")
    tau = kendall_tau(estimate, reference)
    best_r = min(range(len(labels)), key=lambda i: _clean(reference[i]))
    best_e = min(range(len(labels)), key=lambda i: _clean(estimate[i]))
    known = sum(math.isfinite(_clean(v)) for v in reference)
    holds = None if known < 3 or math.isnan(tau) else bool(tau >= min_tau and best_r == best_e)
    return {"tau": tau, "best_reference": labels[best_r], "best_estimate": labels[best_e], "holds": holds}


# ---------------------------------------------------------------------------------------------
# report: rows, verdicts, tables
# ---------------------------------------------------------------------------------------------
def _clean(v) -> float:
    """A value for ranking: None / NaN / inf (diverged, missing) rank worst."""
    if v is None:
        return math.inf
    v = float(v)
    return v if math.isfinite(v) else math.inf


def within_factor_flags(values: Mapping[str, Sequence], factor: float) -> dict[str, list[bool | None]]:
    """For every method and sampler (column): is its value at most ``factor`` × the lowest
    value of all methods on that sampler (missing values rank worst)? ``None`` for a sampler
    with no finite value at all."""
    methods = list(values)
    n = len(next(iter(values.values())))
    flags: dict[str, list[bool | None]] = {m: [] for m in methods}
    for j in range(n):
        col = {m: _clean(values[m][j]) for m in methods}
        best = min(col.values())
        for m in methods:
            flags[m].append(None if not math.isfinite(best) else col[m] <= factor * best * (1 + 1e-12))
    return flags


def within_factor_counts(values: Mapping[str, Sequence], factor: float) -> dict[str, int]:
    """For every method: on how many samplers (columns) its value is at most ``factor`` × the
    lowest value of all methods on that sampler (missing values rank worst)."""
    return {m: sum(bool(f) for f in fl) for m, fl in within_factor_flags(values, factor).items()}


def lowest_counts(values: Mapping[str, Sequence]) -> dict[str, int]:
    """For every method: on how many samplers it has the (possibly shared) lowest value."""
    return within_factor_counts(values, 1.0)


def method_rows(
    metric_key: str,
    metric_name: str,
    source: str,
    ours: Mapping[str, Sequence],
    paper: Mapping[str, Sequence],
    samplers: Sequence[str],
    *,
    factor: float = 1.5,
    slack: int = 0,
    scale: float = 1.0,
    unit: str = "",
    comparable: bool = False,
) -> list[dict]:
    """One row per method for a metric (lower is better): ``ours`` and ``paper`` map method ->
    one value per sampler (``scale`` multiplies ours for display, e.g. 100 for ξ × 10²).

    Verdict (an ordering check, not a magnitude check), per sampler: is the method within
    ``factor`` × the best of the methods on that sampler, in ours and in the paper's numbers?
    "agrees" when the answer is the same on every sampler (at most ``slack`` differ; a count of
    such samplers, the former rule, let a method that wins on other samplers than the paper's
    pass), "differs" otherwise, "n/a" when we have no finite value for the method. ``comparable`` says whether our
    magnitudes are on the paper's scale (same N, budgets); when they are, the row also
    records on how many samplers ours is within a factor 2 of the paper's value."""
    methods = [m for m in paper if m in ours]
    ours_scaled = {
        m: [None if v is None or not math.isfinite(float(v)) else float(v) * scale for v in ours[m]] for m in methods
    }
    f_ours = within_factor_flags(ours_scaled, factor)
    f_paper = within_factor_flags({m: paper[m] for m in methods}, factor)
    c_ours = {m: sum(bool(f) for f in fl) for m, fl in f_ours.items()}
    # the paper's count over the samplers ours has a value for (a run of fewer samplers than the
    # paper's six compares like with like)
    c_paper = {m: sum(bool(f) for f, o in zip(f_paper[m], f_ours[m]) if o is not None) for m in methods}
    rows = []
    for m in methods:
        vals = ours_scaled[m]
        finite = [v for v in vals if v is not None]
        differ = [s for s, a, b in zip(samplers, f_ours[m], f_paper[m]) if a is not None and b is not None and a != b]
        if not finite:
            verdict = "n/a"
        else:
            verdict = "agrees" if len(differ) <= slack else "differs"
        row = {
            "key": f"{m}:{metric_key}",
            "method": m,
            "metric": metric_key,
            "quantity": f"{m}, {metric_name}",
            "source": source,
            "samplers": list(samplers),
            "paper": list(paper[m]),
            "ours": vals,
            "statistic": f"samplers within x{factor:g} of the best method",
            "paper_count": c_paper[m],
            "ours_count": c_ours[m] if finite else None,
            "samplers_compared": sum(1 for f in f_ours[m] if f is not None),
            "samplers_differing": differ if finite else None,
            "unit": unit,
            "slack": slack,
            "rule": (
                f"per sampler, whether this method is within x{factor:g} of the lowest of the {len(methods)} "
                f"methods: the same as the paper's on every sampler" + (f" but {slack}" if slack else "")
            ),
            "verdict": verdict,
            "comparable": comparable,
        }
        if comparable and finite:
            close = sum(1 for o, p in zip(vals, paper[m]) if o is not None and p and 0.5 <= o / p <= 2.0)
            row["magnitude"] = f"{close} of {len(vals)} samplers within x2 of the paper's value"
        else:
            row["magnitude"] = "not comparable at this scale"
        rows.append(row)
    for m in paper:  # a method of the paper's table this run has no values for: its row "not run", counted
        if m in ours:
            continue
        rows.append(
            {
                "key": f"{m}:{metric_key}",
                "method": m,
                "metric": metric_key,
                "quantity": f"{m}, {metric_name}",
                "source": source,
                "samplers": list(samplers),
                "paper": list(paper[m]),
                "ours": [None] * len(samplers),
                "statistic": f"samplers within x{factor:g} of the best method",
                "paper_count": None,
                "ours_count": None,
                "samplers_compared": 0,
                "samplers_differing": None,
                "unit": unit,
                "slack": slack,
                "rule": f"per sampler, whether this method is within x{factor:g} of the lowest of the methods",
                "verdict": "n/a",
                "comparable": comparable,
                "magnitude": "not run",
                "not_run": f"no value from this run for {m}",
            }
        )
    return rows


def constant_coverage(cells: Sequence[tuple[float, float]]) -> tuple[int, float]:
    """``(count, constant)``: the most cells of a table one constant answer meets, each cell a
    ``(paper value, allowed difference)`` of its value row, and that constant. A table where one
    constant meets more than half the cells (a nearly constant table, or a noise window wider than
    its spread) has *weak* value rows: a constant answer meets them by the rule's construction, so
    they cannot carry a tally by themselves (:func:`._report.tally`)."""
    best = (0, math.nan)
    for c in [p + d for p, a in cells for d in (-a, 0.0, a)]:
        n = sum(abs(c - p) <= a * (1 + 1e-9) for p, a in cells)
        best = max(best, (n, c), key=lambda t: t[0])
    return best


def mark_weak(rows: list[dict], what: str) -> list[dict]:
    """Mark the value rows of one table weak (with a note saying why) when one constant meets more
    than half of their cells (:func:`constant_coverage`)."""
    cells = [(float(r["paper"]), r["se"]["k"] * math.hypot(r["se"]["ours"], r["se"]["paper"])) for r in rows]
    n, c = constant_coverage(cells)
    if cells and 2 * n > len(cells):
        for r in rows:
            r["weak"] = True
            r["note"] = (r.get("note", "") + "; ").lstrip(
                "; "
            ) + f"weak: the constant {c:.4g} meets {n} of the {len(cells)} {what} cells within their windows"
    return rows


def value_rows(
    metric_key: str,
    metric_name: str,
    source: str,
    ours: Mapping[str, Sequence],
    paper: Mapping[str, Sequence],
    samplers: Sequence[str],
    run: Sequence[str],
    *,
    ours_se: Mapping[str, Sequence] | None = None,
    extra_se: Callable[[float], float] | None = None,
    resolution: float,
    scale: float = 1.0,
    unit: str = "",
    valid: Any = None,
    k: float = 3.0,
    se_source: str = "",
    note: str = "",
) -> list[dict]:
    """One value row per cell of the paper's table (issue 35 §1: a published number is a claim),
    judged on the noise of both sides, ``|ours − paper| ≤ k·√(SE_ours² + SE_paper²)``: SE_ours is
    ``ours_se`` (the spread over evaluation runs / √runs; ``scale`` applies as to the values)
    combined with ``extra_se(value)`` (a test-set SE) where given, SE_paper the rounding of the
    published value to ``resolution`` (``resolution / √12``; the paper gives no spread). A sampler
    not in ``run`` or a method not in ``ours`` gives a row "not run" (counted); a value the run did
    not produce (a failed or diverged run: ``None``) is NaN, "not reproduced"."""
    rows = []
    for m, pv in paper.items():
        for j, s in enumerate(samplers):
            if s not in run:
                why = f"the preset runs {', '.join(run)} only, not {s}"
            elif m not in ours:
                why = f"no value from this run for {m}"
            else:
                why = ""
            v = None if why else (ours[m][j] if j < len(ours[m]) else None)
            v = None if why else (math.nan if v is None or not math.isfinite(float(v)) else float(v) * scale)
            se_o = 0.0
            if not why and ours_se is not None and m in ours_se and j < len(ours_se[m]):
                se_o = float(ours_se[m][j] or 0.0) * scale
            if not why and extra_se is not None:
                se_o = math.hypot(se_o, extra_se(v if v is not None and math.isfinite(v) else float(pv[j])))
            se = {
                "ours": se_o,
                "paper": resolution / math.sqrt(12.0),
                "k": k,
                "source": se_source
                + f"; SE_paper: the published value's rounding to {resolution:g}, {resolution:g}/√12",
            }
            row = {
                "key": f"value:{metric_key}:{m}:{s}",
                "method": m,
                "metric": f"value_{metric_key}",
                "kind": "value",
                "quantity": f"{s}, {m}: {metric_name}",
                "source": source,
                "paper": float(pv[j]),
                "ours": v,
                "unit": unit,
                "se": se,
                "rule": f"|ours - paper| <= {k:g} x sqrt(SE_ours^2 + SE_paper^2) = "
                f"{k * math.hypot(se_o, resolution / math.sqrt(12.0)):.3g}",
                "verdict": "n/a" if why or v is None else "",
                "check": False,
            }
            if why:
                row["not_run"] = why
            if valid is not None:
                row["valid"] = valid
            if note:
                row["note"] = note
            rows.append(row)
    return mark_weak(rows, f"{source} {metric_name}")


def chosen_of(tuned: Mapping[str, Mapping[str, Mapping]], samplers: Sequence[str]) -> dict:
    """``{sampler: {method: {"log10_h", "batch_pct", "L"} or None (the tuner failed)}}`` of a run's
    tuners, from their chosen ``"arm"`` (:class:`~structmc.tuning.Arm`) or a report's ``"chosen"``."""
    out: dict[str, dict] = {}
    for s in samplers:
        for m, r in (tuned.get(s) or {}).items():
            a = r.get("arm")
            ch = arm_summary(a, 1) if isinstance(a, Arm) else (r.get("chosen") or None)
            out.setdefault(s, {})[m] = None if not ch else {k: ch.get(k) for k in ("log10_h", "batch_pct", "L")}
    return out


TUNED = ("M-KSD", "M-FSSD", "MAMBA", "Grid")  # the methods that choose (the heuristic's h = 1/N is fixed)


def choice_rows(
    paper: Mapping[str, Any],
    chosen: Mapping[str, Mapping[str, Mapping | None]],
    samplers: Sequence[str],
    run: Sequence[str],
    methods: Sequence[str],
    *,
    source: str,
    tol_log10_h: float = 0.18,
    configured: Sequence[str] = (),
) -> list[dict]:
    """The paper's chosen hyperparameters (Table 4 / 6: ``paper[sampler][method] = (log10 h,
    batch %, L)``) as claims, one per cell (issue 35 §1): the chosen log10 h within ``tol_log10_h``
    (0.18: the same value of the 0.5-spaced grid, as mamba-bnn's Table 8 rows), MAMBA's batch (grid
    search's is fixed at 10 %) and SGHMC's L the same. A tuner that failed gives NaN / "not
    reproduced"; a sampler or method not run, rows "not run" (counted)."""
    rows: list[dict] = []
    for s in samplers:
        for m, ph in (paper.get(s) or {}).items():
            if m not in TUNED:
                continue
            if s not in run:
                why = f"the preset runs {', '.join(run)} only, not {s}"
            elif m not in methods:
                why = (
                    f"the preset runs {', '.join(configured)} only, not {m}"
                    if configured and m not in configured
                    else f"no value from this run for {m}"
                )
            else:
                why = ""
            ch = None if why else (chosen.get(s) or {}).get(m)
            h = None if why else (math.nan if not ch or ch.get("log10_h") is None else float(ch["log10_h"]))
            row = {
                "key": f"choice:log10h:{m}:{s}",
                "method": m,
                "metric": "choice_log10_h",
                "kind": "value",
                "quantity": f"{s}, {m}: chosen log10 h",
                "source": source,
                "paper": float(ph[0]),
                "ours": h,
                "unit": "log10",
                "tol": tol_log10_h,
                "rule": f"abs(ours - paper) <= {tol_log10_h:g} (the same grid value)",
                "verdict": "",
                "check": False,
                "valid": False,
            }
            if why:
                row["not_run"] = why
            rows.append(row)
            if m != "Grid":
                b = None if why or not ch else ch.get("batch_pct")
                rows.append(
                    claim_row(
                        f"choice:batch:{m}:{s}",
                        f"{s}, {m}: chosen batch",
                        source,
                        f"{ph[1]:g} %",
                        "-" if b is None else f"{b:g} %",
                        None if why else (b is not None and abs(float(b) - float(ph[1])) < 1e-9),
                        "the same batch",
                        not_run=why,
                    )
                )
            if len(ph) > 2 and ph[2]:
                L = None if why or not ch else ch.get("L")
                rows.append(
                    claim_row(
                        f"choice:L:{m}:{s}",
                        f"{s}, {m}: chosen L",
                        source,
                        str(ph[2]),
                        str(L),
                        None if why else L == ph[2],
                        "the same L",
                        not_run=why,
                    )
                )
    return rows


def cut_sampler_rows(
    metric_key: str,
    metric_name: str,
    source: str,
    paper: Mapping[str, Sequence],
    samplers: Sequence[str],
    run: Sequence[str],
) -> list[dict]:
    """Rows "not run" (counted, issue 35 §3) for the samplers of the paper's table (``paper``:
    method -> one value per sampler) that the preset does not run (``run``): the methods' standing
    by ``metric_name`` on that sampler, one row per sampler."""
    out = []
    for j, s in enumerate(samplers):
        if s in run:
            continue
        cells = ", ".join(f"{m} {fmt_num(v[j])}" for m, v in paper.items())
        out.append(
            not_run_row(
                f"{s}:{metric_key}",
                f"{s}: the methods' standing by {metric_name}",
                source,
                cells,
                f"the preset runs {', '.join(run)} only, not {s}",
            )
        )
    return out


def claim_row(
    key: str,
    quantity: str,
    source: str,
    paper_text: str,
    ours_text: str,
    holds: bool | None,
    rule: str,
    check: bool = False,
    *,
    check_reason: str = "",
    not_run: str = "",
    weak: bool = False,
) -> dict:
    """A row for one of the paper's qualitative claims ("agrees" when ours shows it too);
    ``check=True`` for a row that is not the paper's claim (reported, not tallied; ``check_reason``
    says why, issue 35), ``not_run`` the reason a claim of the paper was not run in this preset (it
    stays counted), ``weak`` a claim a constant answer meets by construction."""
    verdict = "n/a" if holds is None or not_run else ("agrees" if holds else "differs")
    row = {
        "key": key,
        "method": None,
        "metric": "claim",
        "quantity": quantity,
        "source": source,
        "paper": paper_text,
        "ours": ours_text,
        "statistic": "claim",
        "unit": "",
        "rule": rule,
        "verdict": verdict,
        "magnitude": "",
        "check": check,
    }
    if check_reason:
        row["check_reason"] = check_reason
    if not_run:
        row["not_run"] = not_run
    if weak:
        row["weak"] = True
    return row


def not_run_row(key: str, quantity: str, source: str, paper_text: str, reason: str) -> dict:
    """A claim of the paper this preset does not run (a sampler or a figure panel it leaves
    out): verdict "not run: ``reason``", still in the denominator (issue 35 §3)."""
    return claim_row(key, quantity, source, paper_text, "not run", None, "not run in this preset", not_run=reason)


def ordering_row(
    key: str,
    quantity: str,
    source: str,
    labels: Sequence[str],
    ours: Sequence,
    paper: Sequence[float],
    *,
    lower_is_better: bool = True,
    tie: float = 0.0,
    margin: float = 0.5,
    unit: str = "",
    check: bool = False,
    resolve: bool = False,
    check_reason: str = "",
    not_run: str = "",
    valid: Any = None,
) -> dict:
    """A row judged by :class:`._report.Ordering` (issue 26 §1): ``labels[i]`` has ``ours[i]`` /
    ``paper[i]``; reproduced when ours ranks as the paper's with at least ``margin`` of its
    spread, "tied" when a pair is reversed (or equal) within ``tie`` — so a constant answer
    never passes — "not reproduced" when reversed beyond it or a value is NaN, "not run" with
    a value missing (``None``). With ``resolve`` (:class:`ResolvedOrdering`) a pair of ours in the
    paper's order by no more than ``tie`` is tied as well: within the noise it shows no ordering.
    Used where a table's methods are closer than the run-to-run noise lets its values be tested one
    by one (:func:`comparison` builds the rule). The methods are listed best first in the paper's
    ranking, so that the rule reads as the paper's ordering."""
    order = sorted(range(len(labels)), key=lambda i: paper[i], reverse=not lower_is_better)
    labels, ours, paper = [labels[i] for i in order], [ours[i] for i in order], [paper[i] for i in order]
    missing = [lab for lab, v in zip(labels, ours) if v is None]
    row = {
        "key": key,
        "method": None,
        "metric": "ordering",
        "kind": "ordering",
        "quantity": quantity,
        "source": source,
        "labels": list(labels),
        "paper": list(paper),
        "ours": [None if v is None else float(v) for v in ours],
        "lower_is_better": bool(lower_is_better),
        "tie": float(tie),
        "margin": float(margin),
        "unit": unit,
        "rule": (
            f"ranking {(' < ' if lower_is_better else ' > ').join(labels)} as in the paper (margin >= {margin:g}x "
            f"the paper's spread); a reversal within {tie:g} is tied"
            + (f", and so is a pair in the paper's order by {tie:g} or less (within the noise)" if resolve else "")
        ),
        "verdict": "",
        "check": check,
    }
    if resolve:
        row["resolve"] = True
    if check_reason:
        row["check_reason"] = check_reason
    if not_run or missing:
        row["not_run"] = not_run or f"no value from this run for {', '.join(missing)}"
    if valid is not None:
        row["valid"] = valid
    return row


@dataclass(frozen=True)
class ResolvedOrdering(Ordering):
    """:class:`._report.Ordering` where a pair must be *resolved*: a pair of ours in the paper's
    order by no more than ``tie`` (the noise of the estimates) is "tied" as a reversed one is —
    within the noise it shows no ordering (so the paper's ranking given as fractions instead of
    percent, or by any gap under the noise, is not credited). Pairs the paper itself ranks by no
    more than ``tie`` ask only that ours do not reverse them beyond ``tie``."""

    def describe(self) -> str:
        return super().describe() + f"; a pair in the paper's order by <= {self.tie:g} is tied too (within the noise)"

    def judge(self, ours: Sequence[float], paper: Sequence[float]) -> str:
        verdict = super().judge(ours, paper)
        if not verdict.startswith((REPRODUCED, SMALLER_MARGIN)):
            return verdict
        sign = 1.0 if self.lower_is_better else -1.0
        order = sorted(range(len(paper)), key=lambda i: paper[i], reverse=not self.lower_is_better)
        for a, b in zip(order, order[1:]):
            if sign * (paper[b] - paper[a]) > self.tie and sign * (ours[b] - ours[a]) <= self.tie:
                return (
                    f"{TIED}: {self.labels[b]} ({ours[b]:.4g}) trails {self.labels[a]} ({ours[a]:.4g}) by no more "
                    f"than the noise {self.tie:g} (the paper's gap {sign * (paper[b] - paper[a]):.4g}): the "
                    "ordering is neither shown nor contradicted"
                )
        return verdict


@dataclass(frozen=True)
class WeakWithinNoise(WithinNoise):
    """:class:`._report.WithinNoise` for a table of which one constant meets more than half the cells
    (:func:`constant_coverage`: a nearly constant table, or noise windows wider than its spread), so
    a constant answer meets most of its rows by the rule's construction — a *weak* claim (:func:`._report.tally` counts it only while at least
    half of the report's other claims are reproduced)."""

    weak: bool = True

    def describe(self) -> str:
        return super().describe() + " [weak: one constant meets more than half of this table's cells]"


def comparison(row: dict):
    """The :class:`._report.Comparison` of a row dict: an :func:`ordering_row` under its
    :class:`._report.Ordering` (:class:`ResolvedOrdering` with ``resolve``), a value row with
    ``"se"`` and ``"weak"`` under :class:`WeakWithinNoise`, every other row as
    :func:`._report.row_comparison`; the row's ``note`` kept."""
    import dataclasses

    from ._report import Comparison, row_comparison

    if row.get("kind") != "ordering":
        c = row_comparison(row)
        if row.get("weak") and isinstance(c.rule, WithinNoise) and not isinstance(c.rule, WeakWithinNoise):
            r = c.rule
            c = dataclasses.replace(c, rule=WeakWithinNoise(r.ours_se, r.paper_se, r.k, r.source))
        if row.get("note"):
            c.note = str(row["note"])
        return c
    # a missing value: the row is "not run" (ordering_row sets not_run); NaN stays NaN ("not reproduced")
    ours = list(row["ours"]) if row.get("not_run") else [math.nan if v is None else float(v) for v in row["ours"]]
    rule_cls = ResolvedOrdering if row.get("resolve") else Ordering
    return Comparison(
        row["quantity"] + (f" [{row['source']}]" if row.get("source") else ""),
        ours,
        list(row["paper"]),
        rule_cls(tuple(row["labels"]), row["lower_is_better"], margin=row["margin"], tie=row["tie"]),
        unit=row.get("unit", ""),
        note=str(row.get("note", "")),
        check=bool(row.get("check")),
        check_reason=str(row.get("check_reason", "")),
        not_run=str(row.get("not_run", "")),
        valid=row.get("valid"),
    )


def write_rows_report(out, name: str, *, rows: list[dict], legacy: dict, markdown, figures, **kwargs) -> dict:
    """:func:`._report.write_rows_report` with :func:`comparison` as the row rule (so that
    :func:`ordering_row` rows are judged as orderings): each row's ``verdict`` replaced by its
    Comparison's, ``legacy["verdicts"]`` counted over the paper's claims (checks left out) as
    agrees (reproduced, or same ordering with a smaller margin), tied, differs, n/a; the other
    keywords go to :func:`._report.write_details_report`."""
    from ._report import NOT_COMPARABLE, NOT_REPRODUCED, NOT_RUN, carried_verdicts, write_details_report

    comps = [comparison(r) for r in rows]
    # each row's verdict as the tally counts it (a weak claim the others do not carry says so)
    dicts = [{**c.to_dict(), "weak": c.weak} for c in comps]
    carried = {id(d): v for v, d in carried_verdicts(dicts)}
    verdicts = [carried.get(id(d), c.verdict) for d, c in zip(dicts, comps)]
    for r, v in zip(rows, verdicts):
        r["verdict"] = v
    legacy["verdicts"] = {
        word: sum(x.startswith(v) for x in verdicts)
        for word, v in (
            ("agrees", (REPRODUCED, SMALLER_MARGIN)),
            ("tied", TIED),
            ("differs", NOT_REPRODUCED),
            ("n/a", (NOT_RUN, NOT_COMPARABLE)),
        )
    }
    md = markdown(legacy).replace(
        "Verdicts: ",
        "Verdicts, the paper's claims only (agree = reproduced or same ordering with a smaller margin, "
        "differ = not reproduced, n/a = not run): ",
    )
    return write_details_report(
        out,
        name,
        config=kwargs.pop("cfg"),
        details=legacy,
        comparisons=comps,
        markdown=md,
        figures=[f for f in figures if (Path(out) / f).exists()],
        **kwargs,
    )


def values_table(
    evals: Mapping[str, Mapping[str, dict | None]], key: str, methods: Sequence[str], samplers: Sequence[str]
) -> dict[str, list]:
    """``{method: [value per sampler]}`` of ``evals[sampler][method][key]`` (None if missing)."""
    out = {}
    for m in methods:
        row = []
        for s in samplers:
            ev = (evals.get(s) or {}).get(m)
            row.append(None if ev is None or ev.get("error") else ev.get(key))
        out[m] = row
    return out


def markdown_report_table(rows: Sequence[dict], samplers: Sequence[str]) -> list[str]:
    """Markdown lines: one table row per method × metric row, a cell per sampler as
    ``ours (paper)``, then the ordering statistic, rule and verdict."""
    # a row's cells cover the paper's samplers (its "samplers"), not only the ones this run has
    samplers = next((r["samplers"] for r in rows if "paper_count" in r and "samplers" in r), samplers)
    lines = [
        "| method | metric | "
        + " | ".join(samplers)
        + " | within-factor count ours / paper (samplers compared) | verdict |",
        "|---|---|" + "---|" * len(samplers) + "---|---|",
    ]
    for r in rows:
        if "paper_count" not in r:  # claim and ordering rows: markdown_claims
            continue
        cells = [f"{fmt_num(o)} ({fmt_num(p)})" for o, p in zip(r["ours"], r["paper"])]
        oc = "-" if r["ours_count"] is None else str(r["ours_count"])
        n = r.get("samplers_compared")
        lines.append(
            f"| {r['method']} | {r['metric_label'] if 'metric_label' in r else r['metric']} | "
            + " | ".join(cells)
            + f" | {oc} / {r['paper_count']}{'' if n is None else f' ({n})'} | **{r['verdict']}** |"
        )
    return lines


def markdown_claims(rows: Sequence[dict]) -> list[str]:
    lines = ["| claim | source | paper | ours | rule | verdict |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["metric"] not in ("claim", "ordering"):
            continue
        lines.append(
            f"| {r['quantity']} | {r['source']} | {r['paper']} | {r['ours']} | {r['rule']} | **{r['verdict']}** |"
        )
    return lines


def markdown_choices(tuned: Mapping[str, Mapping[str, dict]], num_data: int, paper: Mapping | None = None) -> list[str]:
    """Table 4/6-style table: the chosen log10 h, batch % and L per sampler and method (the
    paper's in parentheses when ``paper[sampler][method] = (log10 h, τ %, L)`` is given)."""
    methods = list(next(iter(tuned.values())))
    lines = ["| sampler | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for s, by_m in tuned.items():
        cells = []
        for m in methods:
            a = arm_summary(by_m[m]["arm"], num_data)
            txt = (
                "failed"
                if a is None
                else (f"h=10^{a['log10_h']:g}, {a['batch_pct']:.3g} %" + (f", L={a['L']}" if a["L"] else ""))
            )
            if paper and s in paper and m in paper[s]:
                ph = paper[s][m]
                txt += f" ({f'h=10^{ph[0]:g}, {ph[1]:g} %'}{f', L={ph[2]:d}' if len(ph) > 2 and ph[2] else ''})"
            cells.append(txt)
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return lines


def markdown_timing(tuned: Mapping[str, Mapping[str, dict]], target: float = 1.5) -> list[str]:
    """The wall time of every tuning call (problem checks, rounds, result) against its budget T,
    split by the tuner (``TuningResult.timing``: sampling, scores, metric, set-up, driver
    overhead) plus the rest (:func:`_other_time`)."""
    lines = [
        "| sampler | method | arms | T | whole call | call / T | sampling | scores | metric | set-up "
        "| overhead | other |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s, by_m in tuned.items():
        for m, r in by_m.items():
            if m == "Heuristic" or not r.get("timing"):
                continue
            t = r["timing"]
            b = r["budget"] or {}
            T = (
                f"{b['seconds']:.2f} s"
                if "seconds" in b
                else ", ".join(f"{v} {k}" for k, v in b.items()) + " /arm" * (m == "Grid")
            )
            ratio = (
                "-"
                if r["wall_over_T"] is None
                else f"{r['wall_over_T']:.2f}" + (" ✗" if r["wall_over_T"] > target else "")
            )
            lines.append(
                f"| {s} | {m} | {r['num_arms']} | {T} | {r['wall_s']:.2f} s | {ratio} | "
                f"{t.get('sampling', 0):.2f} | {t.get('scores', 0):.2f} | {t.get('metric', 0):.2f} | "
                f"{t.get('setup', 0):.2f} | {t.get('overhead', 0):.2f} | {_other_time(r):.2f} |"
            )
    return lines


WALL_REASON = "our engineering target (the issue's wall time <= 1.5 T), not a claim of the paper"


def wall_claim(tuned: Mapping[str, Mapping[str, dict]], target: float = 1.5) -> dict:
    """Row: every seconds-budget MAMBA run's tuning wall time ≤ ``target`` × T (the issue's
    target, not a paper number)."""
    ratios = [
        (s, m, r["wall_over_T"])
        for s, by_m in tuned.items()
        for m, r in by_m.items()
        if m not in ("Grid", "Heuristic") and r.get("wall_over_T") is not None
    ]
    if not ratios:
        return claim_row(
            "tuning_wall",
            f"MAMBA tuning wall time <= {target:g} x T",
            "issue target (not in the paper)",
            f"<= {target:g}",
            "no seconds budget in this preset",
            None,
            "every MAMBA run: wall / T <= target; n/a for iteration budgets",
            check=True,
            check_reason=WALL_REASON,
        )
    ok = [r for r in ratios if r[2] <= target]
    worst = max(ratios, key=lambda r: r[2])
    return claim_row(
        "tuning_wall",
        f"MAMBA tuning wall time <= {target:g} x T",
        "issue target (not in the paper)",
        f"<= {target:g}",
        f"{len(ok)} of {len(ratios)} runs; worst {worst[2]:.2f} ({worst[0]} {worst[1]})",
        len(ok) == len(ratios),
        "every MAMBA call: whole wall time / T <= target",
        check=True,  # our engineering target, not the paper's claim: reported, not tallied
        check_reason=WALL_REASON,
    )


def tuned_json(tuned: Mapping[str, Mapping[str, dict]], num_data: int) -> dict:
    """JSON-friendly copy of :func:`tune_all`'s result."""
    out: dict[str, dict[str, dict]] = {}
    for s, by_m in tuned.items():
        out[s] = {}
        for m, r in by_m.items():
            d = {k: v for k, v in r.items() if k != "arm"}
            d["chosen"] = arm_summary(r["arm"], num_data)
            out[s][m] = d
    return out


# ---------------------------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------------------------
def plot_ksd_curves(
    path,
    evals: Mapping[str, Mapping[str, dict | None]],
    title: str,
    runs: Sequence[Mapping[str, Mapping[str, dict | None]]] | None = None,
    width: float = PAPER_BAND_SD,
) -> None:
    """Fig. 1/2 style: KSD of the evaluation run's draws so far against sampling time, one
    panel per sampler, one line per method (log scale). With ``runs`` (several independent
    evaluation runs, each :func:`evaluate_all`'s result) the line is the mean curve and the
    shaded band mean ± ``width`` standard deviations over the runs (:func:`ksd_band`; Fig. 1:
    ten runs, two standard deviations)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    samplers = list(evals)
    cols = 3
    rows = int(math.ceil(len(samplers) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    banded = runs is not None and len(runs) > 1
    for k, s in enumerate(samplers):
        ax = axes[k // cols][k % cols]
        for j, (m, ev) in enumerate(evals[s].items()):
            if banded:
                assert runs is not None
                band = ksd_band([((r.get(s) or {}).get(m) or {}).get("curve") or {} for r in runs], width=width)
                if band is None:
                    continue
                ax.plot(band["seconds"], band["mean"], color=f"C{j}", lw=1.2, label=f"{m} ({band['runs']} runs)")
                # log scale: a band reaching below 0 (mean < 2 sd) is drawn down to a tenth of the lowest mean
                floor = min(v for v in band["mean"] if v > 0) / 10 if any(v > 0 for v in band["mean"]) else 1e-12
                ax.fill_between(
                    band["seconds"], [max(v, floor) for v in band["lower"]], band["upper"], color=f"C{j}", alpha=0.2
                )
                continue
            if ev is None or not ev["curve"]["ksd"]:
                continue
            ax.plot(ev["curve"]["seconds"], ev["curve"]["ksd"], marker="o", ms=2, label=m)
        ax.set_yscale("log")
        ax.set(title=s, xlabel="sampling time (s)", ylabel="KSD")
        ax.legend(fontsize=7)
    for k in range(len(samplers), rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.suptitle(title + (f" (mean ± {width:g} sd over {len(runs)} runs)" if banded and runs is not None else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _other_time(r: dict) -> float:
    """Seconds of a tuning call that the tuner's split does not name: in-task bookkeeping
    outside the sampler clock (draw copies, ``state_dict``), and the call outside the rounds."""
    t = r.get("timing") or {}
    named = sum(float(t.get(k, 0.0)) for k in ("sampling", "scores", "metric", "setup", "overhead"))
    return max(0.0, float(r.get("wall_s", 0.0)) - named)


def plot_tuning_time(path, tuned: Mapping[str, Mapping[str, dict]], target: float = 1.5) -> None:
    """Stacked bars of each MAMBA call's wall time (the tuner's sampling, scores, metric, set-up,
    overhead, and the rest of the call: :func:`_other_time`) divided by its budget T, with the
    ``target`` line."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    bars = [
        (f"{s}\n{m}", r)
        for s, by_m in tuned.items()
        for m, r in by_m.items()
        if m not in ("Grid", "Heuristic") and r.get("timing") and r.get("budget")
    ]
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(bars) + 2), 4))
    parts = ("sampling", "scores", "metric", "setup", "overhead", "other")
    for i, (_name, r) in enumerate(bars):
        b = r["budget"]
        T = b.get("seconds")
        bottom = 0.0
        t = dict(r["timing"])
        t["other"] = _other_time(r)
        for j, p in enumerate(parts):
            v = t.get(p, 0.0) / (T if T else 1.0)
            ax.bar(i, v, bottom=bottom, color=f"C{j}", label=p if i == 0 else None)
            bottom += v
    if bars and bars[0][1]["budget"].get("seconds"):
        ax.axhline(1.0, color="k", lw=1, ls=":", label="T")
        ax.axhline(target, color="r", lw=1, ls="--", label=f"{target:g} T")
        ax.set_ylabel("seconds / T")
    else:
        ax.set_ylabel("seconds (iteration budget)")
    ax.set_xticks(range(len(bars)), [n for n, _ in bars], fontsize=6, rotation=90)
    ax.set_title("MAMBA tuning wall time, split")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# misc
# ---------------------------------------------------------------------------------------------


def jsonable(x):
    """A JSON-ready copy (:func:`._shared.jsonable` with :func:`._report.json_value`); Arms and
    Budgets as dicts, functions by name."""
    return _jsonable(x, json_value)


def write_json(path, obj) -> None:
    Path(path).write_text(json.dumps(jsonable(obj), indent=1))


__all__ = [
    "SAMPLER_LABELS",
    "METHODS",
    "SamplerSpec",
    "SAMPLERS",
    "sampler_spec",
    "log10_grid",
    "LOGREG_LOG10_H",
    "PMF_LOG10_H",
    "LOGREG_BATCHES",
    "PMF_BATCHES",
    "mamba_arms",
    "grid_search_arms",
    "heuristic_arm",
    "method_arms",
    "paper_h",
    "arm_summary",
    "total_budget",
    "budget_dict",
    "TuningSettings",
    "tune",
    "tune_all",
    "evaluate_arm",
    "evaluate_all",
    "REPEAT_SEED_STRIDE",
    "PAPER_BAND_SD",
    "runs_summary",
    "resolved_below",
    "ksd_band",
    "kendall_tau",
    "ranking_agreement",
    "relative_sd_error",
    "within_factor_counts",
    "lowest_counts",
    "method_rows",
    "claim_row",
    "ordering_row",
    "comparison",
    "write_rows_report",
    "Units",
    "ResumeMismatch",
    "outcome_json",
    "outcome_from_json",
    "set_wall_seconds",
    "resumed_phrase",
    "wall_line",
    "values_table",
    "fmt_num",
    "markdown_report_table",
    "markdown_claims",
    "markdown_choices",
    "markdown_timing",
    "wall_claim",
    "tuned_json",
    "step_size_lines",
    "plot_ksd_curves",
    "plot_tuning_time",
    "versions",
    "jsonable",
    "write_json",
    "Threads",
]


def step_size_lines(num_data: int, samplers: Sequence[str] = SAMPLER_LABELS) -> list[str]:
    """The paper's step size h in the library's ``lr`` (:func:`structmc.tuning.lr_from_paper`)."""
    lines = []
    for label in samplers:
        spec = sampler_spec(label)
        factor = lr_from_paper(spec.name, 1.0)
        how = (
            "lr = 2h (paper: θ + h∇log π + √(2h)ξ; library: drift (lr/2)∇log π)"
            if factor == 2.0
            else ("lr = h (the paper's dt)" if factor == 1.0 else f"lr = {factor:g}·h")
        )
        lines.append(
            f"{label} ({spec.name}{', control variate' if spec.gradient == 'cv' else ''}): {how}; "
            f"the heuristic h = 1/N = {1 / num_data:.3g} → lr = {lr_from_paper(spec.name, 1 / num_data):.3g}"
        )
    lines.append(
        "grid values are log10 h of the paper's parameterisation; the reports' chosen log10 h convert "
        "back with paper_h (lr / 2 for SGLD, lr for SGHMC/SGNHT)"
    )
    return lines
