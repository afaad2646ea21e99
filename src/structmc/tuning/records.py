"""The typed records of a tuning run: the settings :func:`~structmc.tuning.mamba` and
:func:`~structmc.tuning.grid_search` share (:class:`TuningSettings`), what an arm carries from
one round to its next (:class:`ArmCarry`) and what one arm-round returns (:class:`ArmResult`).

Frozen dataclasses of plain values and tensors: they pickle to any executor (a process pool,
Dask, Ray). The trace on disk keeps its dict form (``TuningResult.rounds``, ``trace.json``,
``progress.pt``): records convert with ``to_dict`` / ``from_dict``, so a folder written before
these records existed still resumes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from ..run import Budget
from .metrics import as_metric

SAMPLES = ("round", "all")
RESTARTS = ("state", "position")


@dataclass(frozen=True)
class TuningSettings:
    """The settings shared by :func:`~structmc.tuning.mamba` and
    :func:`~structmc.tuning.grid_search` (see :func:`~structmc.tuning.mamba` for each), validated
    on construction, before any compute. ``budget``: MAMBA's total T, grid search's budget per
    arm. ``metric``: anything :func:`~structmc.tuning.as_metric` takes (kept as the metric
    object). ``eta``: the pruning rate (recorded in the trace; grid search records ``M + 1``).

    ``executor`` is the user's executor spec (``None``, a name, an executor object); a task
    ships these settings to its worker without it (a live pool or client does not pickle)."""

    method: str
    budget: Budget
    metric: Any
    eta: int
    seed: int = 0
    samples: str = "round"
    restart: str = "state"
    thin: int = 10
    max_samples: int = 256
    min_samples: int = 10
    metric_cost: float | None = 0.25
    warmup: int = 2
    executor: Any = field(default=None, compare=False, repr=False)
    out_dir: Path | None = None
    resume: bool = False
    progress: bool | None = None
    overwrite: bool = False

    def __post_init__(self):
        if self.samples not in SAMPLES:
            raise ValueError(f"samples must be 'round' (the paper's) or 'all', got {self.samples!r}")
        if self.restart not in RESTARTS:
            raise ValueError(f"restart must be 'state' or 'position', got {self.restart!r}")
        for name, lo in (("thin", 1), ("max_samples", 1), ("min_samples", 1), ("warmup", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if self.metric_cost is not None and not self.metric_cost > 0:
            raise ValueError(f"metric_cost must be > 0 or None, got {self.metric_cost!r}")
        if self.resume and self.out_dir is None:
            raise ValueError("resume=True needs out_dir")
        for flag in ("resume", "overwrite"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.overwrite and self.out_dir is None:
            raise ValueError("overwrite=True needs out_dir")
        if self.resume and self.overwrite:
            raise ValueError("resume=True and overwrite=True contradict each other: choose one")
        object.__setattr__(self, "metric", as_metric(self.metric))
        if self.out_dir is not None:
            object.__setattr__(self, "out_dir", Path(self.out_dir))

    def __getstate__(self):  # a task's copy: everything but the executor
        return {k: v for k, v in self.__dict__.items() if k != "executor"}

    def __setstate__(self, state):
        self.__dict__.update(state, executor=None)

    @property
    def min_scored(self) -> int:
        """The fewest draws an arm should be scored on: ``min(min_samples, max_samples)`` (no
        more than are scored)."""
        return min(self.min_samples, self.max_samples)

    def trace(self, problem, executor, num_arms: int) -> dict:
        """The trace's ``settings`` (JSON; what resume compares): these settings, the problem's
        sizes, its scores (``score_data`` and, with score_data, ``score_batches``: a resume with
        the other estimator is refused) and the executor's kind."""
        out = {
            "method": self.method,
            "budget": budget_dict(self.budget),
            "eta": self.eta,
            "metric": self.metric.config(),
            "seed": self.seed,
            "samples": self.samples,
            "restart": self.restart,
            "thin": self.thin,
            "max_samples": self.max_samples,
            "min_samples": self.min_samples,
            "metric_cost": self.metric_cost,
            "warmup": self.warmup,
            "num_chains": problem.num_chains,
            "num_data": problem.num_data,
            "dim": problem.dim,
            "score_data": problem.score_data,
            "executor": type(executor).__name__,
            "arms": int(num_arms),
        }
        if problem.score_data is not None:  # absent otherwise: traces of full-data scores read as before
            out["score_batches"] = problem.score_batches
        return out


def budget_dict(budget: Budget) -> dict:
    """A budget as traces record it: all three kinds, two of them ``None``."""
    return {k: getattr(budget, k) for k in ("iterations", "seconds", "grad_evals")}


@dataclass(frozen=True)
class ArmCarry:
    """What an arm carries from one round to its next: ``state`` (the run's
    ``state_dict()``, continued with ``restart="state"``), ``theta`` (its last positions
    ``[C, P]``, the start with ``restart="position"``) and ``samples`` (its kept samples so far,
    scored again with ``samples="all"``). ``progress.pt`` stores it as :meth:`to_dict`."""

    state: dict | None = None
    theta: Tensor | None = None
    samples: Tensor | None = None

    def to_dict(self) -> dict:
        return {"state": self.state, "theta": self.theta, "samples": self.samples}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ArmCarry:
        d = d or {}
        return cls(d.get("state"), d.get("theta"), d.get("samples"))

    def start(self, settings: TuningSettings) -> ArmCarry:
        """What the next round's task starts from under ``settings``: the state or the
        position (``restart``), and the earlier samples only with ``samples="all"``."""
        return ArmCarry(
            self.state if settings.restart == "state" else None,
            self.theta if settings.restart == "position" else None,
            self.samples if settings.samples == "all" else None,
        )


@dataclass(frozen=True)
class ArmTimings:
    """Seconds an arm-round spent besides sampling: ``setup_s`` (building the run, warm-up
    included), ``scores_s`` and ``metric_s`` (scoring), ``wall_s`` (the whole task)."""

    setup_s: float = 0.0
    scores_s: float = 0.0
    metric_s: float = 0.0
    wall_s: float = 0.0


@dataclass(frozen=True)
class ArmResult:
    """One arm-round (what :func:`~structmc.tuning.task.run_arm` returns): the work done
    (``iterations``, ``grad_evals``, ``seconds`` of sampling), the samples ``kept`` and
    ``scored`` (at ``thin``), the ``metric`` (``inf`` when it failed, with ``error`` and, for an
    exception, its ``traceback``), ``timings`` and the ``carry`` for the next round.

    :meth:`to_dict` is its trace entry (``TuningResult.rounds[i]["results"]``): the carry left
    out, the timings flattened, keys in the order traces have always had."""

    index: int
    round: int
    label: str
    iterations: int = 0
    grad_evals: int = 0
    seconds: float = 0.0
    timings: ArmTimings = ArmTimings()
    kept: int = 0
    scored: int = 0
    thin: int = 10
    metric: float = math.inf
    error: str | None = None
    traceback: str | None = None
    carry: ArmCarry = field(default=ArmCarry(), compare=False)  # tensors: not compared

    def to_dict(self) -> dict:
        t = self.timings
        d = {
            "index": self.index,
            "round": self.round,
            "label": self.label,
            "iterations": self.iterations,
            "grad_evals": self.grad_evals,
            "seconds": self.seconds,
            "setup_s": t.setup_s,
            "scores_s": t.scores_s,
            "metric_s": t.metric_s,
            "kept": self.kept,
            "scored": self.scored,
            "thin": self.thin,
            "metric": self.metric,
            "error": self.error,
        }
        if self.traceback is not None:
            d["traceback"] = self.traceback
        d["wall_s"] = t.wall_s
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ArmResult:
        """A trace entry back as a record (no carry); keys an older trace lacks take their
        defaults."""
        timings = ArmTimings(*(float(d.get(k, 0.0)) for k in ("setup_s", "scores_s", "metric_s", "wall_s")))
        return cls(
            d["index"],
            d["round"],
            d.get("label", ""),
            d.get("iterations", 0),
            d.get("grad_evals", 0),
            d.get("seconds", 0.0),
            timings,
            d.get("kept", 0),
            d.get("scored", 0),
            d.get("thin", 10),
            d.get("metric", math.inf),
            d.get("error"),
            d.get("traceback"),
        )

    @property
    def failed(self) -> bool:
        return not math.isfinite(self.metric)


__all__ = ["TuningSettings", "ArmCarry", "ArmTimings", "ArmResult"]
