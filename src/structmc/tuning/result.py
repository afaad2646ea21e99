"""The outcome of a tuning run (:func:`~structmc.tuning.mamba`,
:func:`~structmc.tuning.grid_search`): the chosen arm and the trace of every round, as JSON."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .arms import Arm, edge_of_grid

TRACE_FORMAT = 1


@dataclass
class TuningResult:
    """The outcome of :func:`mamba` or :func:`grid_search`: the chosen arm and the trace of
    every round, JSON-serialisable (:meth:`to_dict`, :meth:`save`, :meth:`load`).

    ``rounds[i]`` holds ``arms`` (indices), ``budget`` (per arm, given), the per-arm
    ``results`` (``metric``, ``iterations``, ``grad_evals``, ``seconds`` of sampling,
    ``scores_s``, ``metric_s``, ``setup_s``, ``kept``/``scored`` samples, ``error``),
    ``kept`` and ``pruned`` (``{"index", "reason"}``) and ``wall_s``. ``timing`` splits the
    wall time into sampling, scores, metric, set-up (warm-up included), ``in_task_other``
    (recording draws, state copies) and the driver's ``overhead`` (wall time not covered by
    tasks, with ``slots`` tasks running at once). ``target``: the target's fingerprint
    (:mod:`structmc.fingerprint`) when the run has an ``out_dir``; resuming refuses another.
    """

    method: str
    arms: list[Arm]
    settings: dict
    rounds: list[dict] = field(default_factory=list)
    best_index: int | None = None
    timing: dict = field(default_factory=dict)
    complete: bool = False
    target: dict | None = None

    @property
    def best(self) -> Arm | None:
        """The chosen arm."""
        return None if self.best_index is None else self.arms[self.best_index]

    def metric_history(self) -> dict[int, list[tuple[int, float]]]:
        """``{arm index: [(round, metric), ...]}``, inf for failed arms."""
        out: dict[int, list] = {}
        for r in self.rounds:
            for res in r["results"]:
                out.setdefault(res["index"], []).append((r["round"], res["metric"]))
        return out

    def to_dict(self) -> dict:
        return {
            "format": TRACE_FORMAT,
            "method": self.method,
            "arms": [a.to_dict() for a in self.arms],
            "settings": self.settings,
            "rounds": self.rounds,
            "best_index": self.best_index,
            "best": None if self.best is None else self.best.to_dict(),
            "timing": self.timing,
            "complete": self.complete,
            **({} if self.target is None else {"target": self.target}),
        }

    @classmethod
    def from_dict(cls, d: dict) -> TuningResult:
        if d.get("format") != TRACE_FORMAT:
            raise ValueError(f"unknown tuning trace format {d.get('format')!r}")
        return cls(
            d["method"],
            [Arm.from_dict(a) for a in d["arms"]],
            d["settings"],
            d["rounds"],
            d["best_index"],
            d.get("timing", {}),
            d.get("complete", False),
            d.get("target"),
        )

    def to_json(self) -> str:
        return json.dumps(_finite(self.to_dict()), indent=1)

    def save(self, path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path) -> TuningResult:
        return cls.from_dict(_unfinite(json.loads(Path(path).read_text())))

    def summary(self) -> str:
        """One line per round plus the choice."""
        lines = [f"{self.method}: {len(self.arms)} arms, {len(self.rounds)} round(s)"]
        for r in self.rounds:
            best = min(r["results"], key=lambda x: x["metric"])
            failed = sum(1 for x in r["results"] if x["error"])
            lines.append(
                f"  round {r['round']}: {len(r['arms'])} arms x {_fmt_budget(r['budget'])}, "
                f"best {best['metric']:.4g} ({self.arms[best['index']].label}), {failed} failed, "
                f"kept {len(r['kept'])}, {r['wall_s']:.2f} s"
            )
        lines.append(f"  chosen: {self.best.label if self.best else None}")
        lines.extend(f"  warning: {w}" for w in edge_of_grid(self.arms, self.best))
        if self.timing:
            t = self.timing
            lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in t.items() if isinstance(v, float)))
        return "\n".join(lines)

    def plot(self, path=None, ax=None):
        """Metric against round for every arm (log scale; failed arms marked ×); saves to
        ``path`` when given. Needs matplotlib (``structmc[plot]``)."""
        import matplotlib

        if path is not None and ax is None:
            matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        fig = None
        if ax is None:
            fig, ax = plt.subplots(figsize=(7, 4.2))
        hist = self.metric_history()
        ordered = sorted(hist, key=lambda i: (i != self.best_index, i))
        for i in ordered:
            pts = hist[i]
            rs = [r for r, m in pts if math.isfinite(m)]
            ms = [m for r, m in pts if math.isfinite(m)]
            chosen = i == self.best_index
            kw = (
                dict(lw=2.5, color="k", zorder=3, label=f"chosen: {self.arms[i].label}")
                if chosen
                else dict(lw=0.8, alpha=0.6)
            )
            if ms:
                ax.plot(rs, ms, marker="o", ms=3, **kw)
            bad = [r for r, m in pts if not math.isfinite(m)]
            if bad:
                ax.plot(bad, [np.nan] * len(bad))
        finite = [m for pts in hist.values() for _, m in pts if math.isfinite(m) and m > 0]
        if finite:
            ax.set_yscale("log")
        failed = [(r, i) for i, pts in hist.items() for r, m in pts if not math.isfinite(m)]
        if failed and finite:
            top = max(finite) * 2
            ax.scatter([r for r, _ in failed], [top] * len(failed), marker="x", color="r", label="failed / diverged")
        ax.set_xlabel("round")
        ax.set_ylabel(self.settings.get("metric", {}).get("name", "metric"))
        ax.set_xticks(range(len(self.rounds)))
        ax.set_title(f"{self.method}: metric per round, {len(self.arms)} arms")
        ax.legend(fontsize=7, loc="best")
        if fig is not None:
            fig.tight_layout()
            if path is not None:
                fig.savefig(path, dpi=120)
                plt.close(fig)
        return ax


def _fmt_budget(b: dict) -> str:
    k, v = next((k, v) for k, v in b.items() if v is not None)
    return f"{v:.3g} s" if k == "seconds" else f"{v} {k}"


def _finite(x):
    """JSON has no inf/NaN: write them as strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _unfinite(x):
    if x in ("inf", "-inf", "nan") and isinstance(x, str):
        return float(x)
    if isinstance(x, dict):
        return {k: _unfinite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_unfinite(v) for v in x]
    return x
