"""The report of a reproduced experiment: ``report.json`` and ``report.md`` in one format.

An experiment's ``run`` computes its numbers, then builds one :class:`Comparison` per number
the paper publishes (or per claim it states), each judged by a rule written in the
experiment — never by eye:

* :class:`Tolerance` — reproduced when ``|ours − paper| ≤ abs + rel·|paper|``;
* :class:`Ordering` — a claim over several values ("pSGLD < SGLD at every size"): reproduced
  when our values rank as the paper's and our margin is at least ``margin`` of the paper's,
  "same ordering, smaller margin" when they rank alike with a smaller margin, else "not
  reproduced" (saying which pair is out of order).

:func:`write_report` writes both files with every field a reader needs to trust the numbers:
the config, seed, package versions, hardware, wall time, step-size mapping into the library's
convention, what a reduced preset cut and what that is expected to change, and per paper
number our value, the difference and the verdict.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ._shared import jsonable, versions

REPRODUCED = "reproduced"
SMALLER_MARGIN = "same ordering, smaller margin"
TIED = "tied"  # the paper's ordering neither shown nor contradicted: a pair within the tie, reversed or equal
NOT_REPRODUCED = "not reproduced"
NOT_COMPARABLE = "not comparable"
CHECK = "check"  # a row that is not a claim of the paper (ours, a hypothesis, true by construction): no tally


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class Tolerance:
    """Reproduced when ``|ours − paper| ≤ abs + rel·|paper|``."""

    abs: float = 0.0
    rel: float = 0.0

    def __post_init__(self):
        if not (self.abs >= 0 and self.rel >= 0) or (self.abs == 0 and self.rel == 0):
            raise ValueError(f"a Tolerance needs abs >= 0 and rel >= 0, not both 0; got {self.abs}, {self.rel}")

    def describe(self) -> str:
        parts = ([f"±{self.abs:g}"] if self.abs else []) + (
            [f"±{100 * self.rel:g}% of the paper's"] if self.rel else []
        )
        return "|ours − paper| ≤ " + " + ".join(parts)

    def judge(self, ours, paper) -> str:
        if not (_finite(ours) and _finite(paper)):
            return f"{NOT_COMPARABLE}: ours {ours!r}, paper {paper!r}"
        allowed = self.abs + self.rel * abs(paper)
        diff = ours - paper
        if abs(diff) <= allowed * (1 + 1e-9):  # a difference equal to the tolerance passes despite rounding
            return REPRODUCED
        return f"{NOT_REPRODUCED}: differs by {diff:+.4g}, beyond the tolerance ±{allowed:.4g}"


@dataclass(frozen=True)
class Ordering:
    """A claim over several values: ``labels[i]`` has value ``ours[i]`` / ``paper[i]``;
    ``lower_is_better`` ranks them. Reproduced when our ranking equals the paper's, strictly,
    and our spread (best to worst, in the paper's direction) is at least ``margin`` times the
    paper's; "same ordering, smaller margin" when the ranking holds with a smaller spread; a
    pair reversed beyond ``tie`` (absolute) is "not reproduced"; a pair reversed or equal
    within ``tie`` is "tied" — the paper's ordering is then neither shown nor contradicted, and
    a reversal is never "reproduced" nor "same ordering"."""

    labels: tuple[str, ...]
    lower_is_better: bool = True
    margin: float = 0.5
    tie: float = 0.0

    def describe(self) -> str:
        sign = "<" if self.lower_is_better else ">"
        return f"ranking {f' {sign} '.join(self.labels)} as in the paper, margin ≥ {self.margin:g}× the paper's" + (
            f", ties within {self.tie:g}" if self.tie else ""
        )

    def judge(self, ours: Sequence[float], paper: Sequence[float]) -> str:
        if len(ours) != len(self.labels) or len(paper) != len(self.labels):
            raise ValueError(f"an Ordering over {len(self.labels)} labels needs as many values")
        if not all(_finite(x) for x in list(ours) + list(paper)):
            return f"{NOT_COMPARABLE}: non-finite values (ours {list(ours)}, paper {list(paper)})"
        sign = 1.0 if self.lower_is_better else -1.0  # "worse" is positive in the paper's direction
        order = sorted(range(len(paper)), key=lambda i: paper[i], reverse=not self.lower_is_better)
        tied = []
        for a, b in zip(order, order[1:]):  # consecutive pairs in the paper's ranking: a before b
            if paper[a] == paper[b]:
                continue  # the paper ranks neither first
            worse = sign * (ours[b] - ours[a])
            if worse < -self.tie:
                return (
                    f"{NOT_REPRODUCED}: {self.labels[b]} ({ours[b]:.4g}) beats {self.labels[a]} "
                    f"({ours[a]:.4g}), the paper has the reverse"
                )
            if worse <= 0:
                tied.append((a, b))
        if tied:
            a, b = tied[0]
            return (
                f"{TIED}: {self.labels[b]} ({ours[b]:.4g}) does not trail {self.labels[a]} ({ours[a]:.4g}) as in "
                f"the paper; within the tie ±{self.tie:g}, so the paper's ordering is neither shown nor contradicted"
            )
        spread_paper = sign * (paper[order[-1]] - paper[order[0]])
        spread_ours = sign * (ours[order[-1]] - ours[order[0]])
        if spread_ours >= self.margin * spread_paper:
            return REPRODUCED
        return f"{SMALLER_MARGIN} ({spread_ours:.4g} vs the paper's {spread_paper:.4g})"


@dataclass(frozen=True)
class Claim:
    """A claim the paper makes in words or in a figure, checked by an explicit test on our
    numbers: ``test(ours) -> bool``; ``text`` states the claim and the test."""

    text: str
    test: Any

    def describe(self) -> str:
        return self.text

    def judge(self, ours, paper) -> str:
        try:
            ok = bool(self.test(ours))
        except (TypeError, ValueError) as err:
            return f"{NOT_COMPARABLE}: {err}"
        return REPRODUCED if ok else f"{NOT_REPRODUCED}: the claim fails on our numbers ({_fmt(ours)})"


@dataclass
class Comparison:
    """One row of the report: a number (or claim) of the paper beside ours and its verdict.
    ``ours``/``paper`` are numbers for a :class:`Tolerance`, sequences for an
    :class:`Ordering`; ``paper=None`` records a number the paper does not give (no verdict)."""

    quantity: str
    ours: Any
    paper: Any
    rule: Tolerance | Ordering | Claim | None = None
    unit: str = ""
    note: str = ""
    check: bool = False  # not a claim of the paper: judged and shown, outside the tally
    # the run setting the row comes from when a report judges one claim under several (issue 26 §2:
    # "T = 1" the posterior, "T = 1/N" the authors' code); "" when the report has one setting
    setting: str = ""
    verdict: str = field(init=False, default="")

    def __post_init__(self):
        if self.paper is None or self.rule is None:
            self.verdict = "no published value" if self.paper is None else "not judged"
        else:
            self.verdict = self.rule.judge(self.ours, self.paper)
        if self.check:
            self.verdict = f"{CHECK} ({self.verdict})"

    @property
    def difference(self):
        if _finite(self.ours) and _finite(self.paper):
            return self.ours - self.paper
        return None

    def to_dict(self) -> dict:
        return {
            "quantity": self.quantity,
            "paper": self.paper,
            "ours": self.ours,
            "difference": self.difference,
            "unit": self.unit,
            "rule": None if self.rule is None else self.rule.describe(),
            "verdict": self.verdict,
            "note": self.note,
            "check": self.check,
            "setting": self.setting,
        }


def hardware(device: str = "cpu") -> dict:
    """The machine the numbers come from: CPU model, cores, threads, GPU."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    out = {"cpu": cpu, "cpu_cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "device": device}
    if str(device).startswith("cuda") and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
    out.update(contention())
    return out


def contention() -> dict:
    """How much of the machine this process had (Linux; empty elsewhere): its CPU seconds and
    wall seconds since it started (one experiment per ``structmc reproduce`` process), their
    ratio ``cores_used`` (about the thread count on an idle machine, less when other processes
    shared the cores: seconds budgets then buy fewer iterations) and the 1/5/15-minute load
    average when the report was written."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = float(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        wall = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        cpu = time.process_time()
        load = os.getloadavg()
    except (OSError, ValueError, IndexError, AttributeError):
        return {}
    return {
        "process_cpu_s": round(cpu, 1),
        "process_wall_s": round(wall, 1),
        "cores_used": round(cpu / wall, 2) if wall > 0 else None,
        "load_average": [round(v, 2) for v in load],
    }


def smallest_gap(values: Sequence[float]) -> float:
    """The smallest positive difference between two of ``values`` (a table's methods): a value
    row's tolerance must sit below it, or one method's number passes as another's."""
    ordered = sorted(float(v) for v in values)
    gaps = [b - a for a, b in zip(ordered, ordered[1:]) if b - a > 0]
    if not gaps:
        raise ValueError(f"no two different values in {list(values)}")
    return min(gaps)


def verdict_counts(rows: Sequence[Comparison], setting: str | None = None) -> dict[str, int]:
    """How many of the paper's claims got each verdict (checks are not counted). With
    ``setting``, only the rows of that run setting and those common to all settings."""
    counts = {REPRODUCED: 0, SMALLER_MARGIN: 0, TIED: 0, NOT_REPRODUCED: 0, NOT_COMPARABLE: 0}
    for r in rows:
        if setting is not None and r.setting not in ("", setting):
            continue
        for key in counts:
            if r.verdict.startswith(key):
                counts[key] += 1
                break
    return counts


def fmt_num(v, digits: int = 3) -> str:
    """Compact number: 3 significant digits, thousands separators for large values."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def _fmt(x) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    return str(x)


def write_report(
    out_dir: str | Path,
    *,
    experiment,
    preset: str,
    config: Mapping,
    seed: int | None,
    comparisons: Sequence[Comparison],
    numbers: Mapping,
    wall_time_s: float,
    device: str = "cpu",
    step_sizes: Sequence[str] = (),
    reductions: Sequence[str] = (),
    figures: Sequence[str] = (),
    notes: Sequence[str] = (),
    extra_md: str = "",
    paper_setting: str | None = None,
    compute_time_s: float | None = None,
) -> dict:
    """Write ``report.json`` and ``report.md`` into ``out_dir`` and return the JSON dict.

    ``wall_time_s`` is this call's; ``compute_time_s``, for a run resumed over several
    sittings, the seconds of work over all of them (this call's plus what it read back).

    ``experiment`` is the registry record (:class:`~structmc.experiments.Experiment`);
    ``numbers`` every number the table/figure holds (nested dicts/lists); ``step_sizes`` the
    mapping of the paper's step sizes into the library's convention, one line each;
    ``reductions`` what a reduced preset cut and what that is expected to change (empty for
    the paper's settings); ``figures`` PNG paths relative to ``out_dir``.

    When rows come from several run settings (``Comparison.setting``, e.g. the posterior T = 1
    and the authors' T = 1/N), ``paper_setting`` names the one the paper's numbers correspond
    to: ``verdicts`` counts its rows (one tally per claim), ``verdicts_by_setting`` each
    setting's, and the markdown shows the settings side by side."""
    out_dir = Path(out_dir)
    settings = list(dict.fromkeys(c.setting for c in comparisons if c.setting))
    if settings and paper_setting not in settings:
        raise ValueError(f"paper_setting must name one of the rows' settings {settings}, got {paper_setting!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    paper = experiment.paper
    report = {
        "experiment": experiment.name,
        "paper": None
        if paper is None
        else {"citation": paper.citation, "title": paper.title, "venue": paper.venue, "year": paper.year},
        "figure": experiment.figure,
        "preset": preset,
        "reduced": bool(reductions),
        "reductions": list(reductions),
        "config": dict(config),
        "seed": seed,
        "step_size_mapping": list(step_sizes),
        "versions": versions(),
        "hardware": hardware(device),
        "wall_time_s": float(wall_time_s),
        "compute_time_s": None if compute_time_s is None else float(compute_time_s),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "numbers": numbers,
        "comparisons": [c.to_dict() for c in comparisons],
        "verdicts": verdict_counts(comparisons, paper_setting if settings else None),
        "paper_setting": paper_setting if settings else None,
        "verdicts_by_setting": {s: verdict_counts(comparisons, s) for s in settings},
        "figures": list(figures),
        "notes": list(notes),
    }
    report = jsonable(report)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / "report.md").write_text(render_markdown(report, extra_md))
    return report


def _tally(counts: Mapping[str, int]) -> str:
    return (
        f"{counts['reproduced']} reproduced, {counts['same ordering, smaller margin']} same ordering with a smaller "
        f"margin, {counts.get(TIED, 0)} tied, {counts['not reproduced']} not reproduced, {counts['not comparable']} "
        "not comparable (the paper's claims only; rows marked check are ours and not counted)."
    )


def render_markdown(report: Mapping, extra_md: str = "") -> str:
    paper = report["paper"]
    lines = [f"# {report['experiment']}: {report['figure']}" if report["figure"] else f"# {report['experiment']}", ""]
    if paper:
        lines += [f"{paper['citation']}, *{paper['title']}* ({paper['venue']})", ""]
    hw = report["hardware"]
    lines += [
        f"Preset `{report['preset']}`, seed {report['seed']}, {report['wall_time_s']:.1f} s on {hw['cpu']} "
        f"({hw['torch_threads']} thread{'s' * (hw['torch_threads'] != 1)}"
        + (f", {hw['gpu']}" if hw.get("gpu") else "")
        + (
            f"; the process used {hw['cores_used']:g} core{'s' * (hw['cores_used'] != 1)} on average, load {hw['load_average'][0]:g} at the end"
            if hw.get("cores_used") is not None and hw.get("load_average")
            else ""
        )
        + f"), {report['date']}"
        + (
            f"; resumed: {report['compute_time_s']:.1f} s of work over every sitting."
            if report.get("compute_time_s") is not None
            else "."
        ),
        "",
    ]
    if report["reductions"]:
        lines += [
            "**Reduced from the paper's settings** (what this preset cuts, and what that is expected to change):",
            "",
        ]
        lines += [f"- {r}" for r in report["reductions"]] + [""]
    by_setting = report.get("verdicts_by_setting") or {}
    lines += ["## Paper vs ours", ""]
    if by_setting:
        lines += [
            f"Judged under {len(by_setting)} run settings side by side; the paper's numbers correspond to "
            f"**{report['paper_setting']}**, whose rows make the tally.",
            "",
        ]
        lines += [
            f"- {s}{' (the tally)' if s == report['paper_setting'] else ''}: {_tally(c)}" for s, c in by_setting.items()
        ]
        lines += [""]
    else:
        lines += [_tally(report["verdicts"]), ""]
    setting_col = bool(by_setting)
    lines += [
        "| " + ("setting | " if setting_col else "") + "quantity | paper | ours | difference | rule | verdict |",
        "|---|---|---|---|---|---|" + ("---|" if setting_col else ""),
    ]
    for c in report["comparisons"]:
        unit = f" {c['unit']}" if c["unit"] else ""
        cells = [
            *([c.get("setting") or "all"] if setting_col else []),
            c["quantity"],
            f"{_fmt(c['paper'])}{unit if c['paper'] is not None else ''}",
            f"{_fmt(c['ours'])}{unit}",
            _fmt(c["difference"]),
            c["rule"] or "–",
            f"**{c['verdict']}**",
        ]
        # a rule such as |ours − paper| <= t holds pipes: escaped, they stay in their cell
        lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
    # a row judged under several settings has one note: said once
    notes = dict.fromkeys(f"- *{c['quantity']}*: {c['note']}" for c in report["comparisons"] if c["note"])
    if notes:
        lines += [""] + list(notes)
    if report["step_size_mapping"]:
        lines += ["", "## Step sizes in the library's convention", ""] + [f"- {s}" for s in report["step_size_mapping"]]
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    if extra_md:
        lines += ["", extra_md.rstrip()]
    figures = [f for f in report["figures"] if f"]({f})" not in extra_md]  # those the text shows already: once
    if figures:
        lines += ["", "## Figures", ""] + [f"![{Path(f).stem}]({f})" for f in figures]
    v = report["versions"]
    lines += [
        "",
        f"structmc {v.get('structmc')}, torch {v.get('torch')}, Python {v.get('python')}, {v.get('platform')}",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# experiments that keep their own record: its numbers under ``numbers``, its tables as details
# ---------------------------------------------------------------------------------------------
_BOOKKEEPING = ("verdicts", "reduced", "config", "preset", "seed", "versions", "figures")


def json_value(x):
    """:func:`._shared.jsonable`'s converter for reports: a :class:`~structmc.run.Budget` as
    its limits, a function or class by ``module.qualname`` (``NotImplemented`` otherwise)."""
    from ..run import Budget

    if isinstance(x, Budget):
        return {k: getattr(x, k) for k in ("iterations", "seconds", "grad_evals") if getattr(x, k) is not None}
    if callable(x) and not isinstance(x, (int, float, str, bool)) and not hasattr(x, "to_dict"):
        return f"{getattr(x, '__module__', '?')}.{getattr(x, '__qualname__', repr(x))}"
    return NotImplemented


def write_details_report(
    out_dir: str | Path,
    name: str,
    *,
    preset: str,
    config: Mapping,
    seed: int | None,
    details: Mapping,
    comparisons: Sequence[Comparison],
    markdown: str,
    wall_time_s: float,
    device: str = "cpu",
    step_sizes: Sequence[str] = (),
    reductions: Sequence[str] = (),
    figures: Sequence[str] = (),
    notes: Sequence[str] = (),
    compute_time_s: float | None = None,
) -> dict:
    """:func:`write_report` for experiment ``name`` (a key of
    :data:`~structmc.experiments.REGISTRY`) that builds its own record ``details`` (runs,
    tables, tuning, ...) and Markdown tables ``markdown``: ``details`` goes under ``numbers``
    without the keys the report holds at its top level (preset, config, seed, versions,
    reduced, figures, verdicts), its ``experiment`` (a description) renamed ``description``
    and its ``paper`` ``paper_values``; ``markdown``, title line dropped, under "## Details".
    Budgets and functions in either are written by :func:`json_value`."""
    from . import REGISTRY

    numbers = {k: v for k, v in details.items() if k not in _BOOKKEEPING}
    if "experiment" in numbers:
        numbers["description"] = numbers.pop("experiment")
    if "paper" in numbers:
        numbers["paper_values"] = numbers.pop("paper")
    md = markdown.splitlines()
    if md and md[0].startswith("# "):
        md = md[1:]
    return write_report(
        out_dir,
        experiment=REGISTRY.get(name),
        preset=preset,
        config=jsonable(dict(config), json_value),
        seed=seed,
        comparisons=comparisons,
        numbers=jsonable(numbers, json_value),
        wall_time_s=wall_time_s,
        device=device,
        step_sizes=step_sizes,
        reductions=reductions,
        figures=figures,
        notes=notes,
        extra_md="## Details\n" + "\n".join(md),
        compute_time_s=compute_time_s,
    )


# ---------------------------------------------------------------------------------------------
# rows: the dict form of a Comparison that the MAMBA experiments and gibbs-xor build
# ---------------------------------------------------------------------------------------------
#: a row's own verdict word -> this module's verdict
ROW_VERDICTS = {"agrees": REPRODUCED, "differs": NOT_REPRODUCED, "n/a": NOT_COMPARABLE}


def _holds(holds, reason: str):
    def test(_ours):
        if holds is None:
            raise ValueError(reason)
        return bool(holds)

    return test


def row_comparison(row: dict) -> Comparison:
    """The :class:`Comparison` of a row dict, with the rule its own verdict applied:

    * a method row (:func:`._mamba.method_rows`): the samplers on which the method's standing
      (within a factor of the best, or not) differs from the paper's, ``Tolerance(abs=slack)``
      on their number against 0 (integers, so ``abs=0.5`` stands for ``slack = 0``);
    * a claim row (``metric == "claim"`` or ``kind == "claim"``): a :class:`Claim` whose test
      is the row's outcome (``verdict`` "agrees" / "differs"; anything else: not comparable);
    * a value row (``tol``): ``Tolerance(abs=tol)``.
    """
    quantity = row["quantity"] + (f" [{row['source']}]" if row.get("source") else "")
    if "paper_count" in row:  # method rows: an ordering check, sampler by sampler
        slack = float(row.get("slack", 0))
        differ = row.get("samplers_differing")
        note = (
            f"{row['statistic']}: ours on {row['ours_count']}, the paper's on {row['paper_count']}"
            + (f" of the {row['samplers_compared']} samplers compared" if "samplers_compared" in row else " samplers")
            + (f"; differing on {differ}" if differ else "")
            + f"; ours per sampler {[fmt_num(v) for v in row['ours']]}, the paper's {list(row['paper'])}; "
            f"{row['magnitude']}"
        )
        return Comparison(
            f"{quantity}: samplers where its standing ({row['statistic']}) differs from the paper's",
            None if differ is None else len(differ),
            0,
            Tolerance(abs=slack if slack > 0 else 0.5),
            unit="samplers",
            note=note,
            check=bool(row.get("check")),
        )
    if row.get("metric") == "claim" or row.get("kind") == "claim":
        holds = row["verdict"] == "agrees" if row["verdict"] in ("agrees", "differs") else None
        return Comparison(
            quantity,
            row["ours"],
            row["paper"],
            Claim(row["rule"], _holds(holds, "the claim cannot be tested in this run")),
            unit=row.get("unit", ""),
            check=bool(row.get("check")),
        )
    tol = float(row.get("tol", 0.0))
    return Comparison(
        quantity,
        row["ours"],
        row["paper"],
        Tolerance(abs=tol if tol > 0 else 1e-12),
        unit=row.get("comparison_unit", row.get("unit", "")),
        check=bool(row.get("check")),
    )


def write_rows_report(
    out: str | Path,
    name: str,
    *,
    preset: str,
    cfg: Mapping,
    seed,
    legacy: dict,
    rows: list[dict],
    wall_time_s: float,
    reductions: Sequence[str],
    figures: Sequence[str],
    markdown,
    step_sizes: Sequence[str],
    device: str = "cpu",
    notes: Sequence[str] = (),
    compute_time_s: float | None = None,
) -> dict:
    """:func:`write_details_report` for an experiment whose record ``legacy`` holds ``rows``:
    one Comparison per row (:func:`row_comparison`), each row's ``verdict`` replaced by the
    Comparison's, ``legacy["verdicts"]`` counted by row verdict word (:data:`ROW_VERDICTS`),
    then ``markdown(legacy)`` as the details; ``figures`` that were not written are left out."""
    comps = [row_comparison(r) for r in rows]
    for r, c in zip(rows, comps):
        r["verdict"] = c.verdict
    legacy["verdicts"] = {word: sum(c.verdict.startswith(v) for c in comps) for word, v in ROW_VERDICTS.items()}
    md = markdown(legacy).replace(
        "Verdicts: ", "Verdicts (agree = reproduced, differ = not reproduced, n/a = not comparable): "
    )
    return write_details_report(
        out,
        name,
        preset=preset,
        config=cfg,
        seed=seed,
        details=legacy,
        comparisons=comps,
        markdown=md,
        wall_time_s=wall_time_s,
        device=device,
        step_sizes=step_sizes,
        reductions=reductions,
        figures=[f for f in figures if (Path(out) / f).exists()],
        notes=notes,
        compute_time_s=compute_time_s,
    )


def claim_tally(report: Mapping) -> dict[str, int]:
    """Verdict counts of a written report's paper claims, recomputed from its rows: checks
    are left out, and with several run settings only the rows of the setting the paper's
    numbers correspond to (and those common to all settings) count. Works on reports of
    every format (rows written by :func:`write_report` and :func:`write_rows_report`)."""
    counts = {REPRODUCED: 0, SMALLER_MARGIN: 0, TIED: 0, NOT_REPRODUCED: 0, NOT_COMPARABLE: 0, CHECK: 0}
    setting = report.get("paper_setting")
    for c in report.get("comparisons", []):
        verdict = str(c.get("verdict", ""))
        if setting and c.get("setting") not in (None, "", setting):
            continue
        if c.get("check") or verdict.startswith(CHECK):
            counts[CHECK] += 1
            continue
        for key in (REPRODUCED, SMALLER_MARGIN, TIED, NOT_REPRODUCED, NOT_COMPARABLE):
            if verdict.startswith(key):
                counts[key] += 1
                break
    return counts


def work_seconds(report: Mapping) -> float:
    """The seconds of work behind ``report``: its ``compute_time_s`` for a run resumed over
    several sittings, else its wall time; a Gibbs report written before ``compute_time_s``
    whose chains sampled longer than its call lasted (they were read back from checkpoints)
    counts its call plus their sampling seconds (``numbers.runs[*].seconds``)."""
    if report.get("compute_time_s") is not None:
        return float(report["compute_time_s"])
    wall = float(report.get("wall_time_s") or 0.0)
    runs = (report.get("numbers") or {}).get("runs")
    if isinstance(runs, Mapping):
        sampled = sum(float(v["seconds"]) for v in runs.values() if isinstance(v, Mapping) and "seconds" in v)
        if sampled > wall:
            return wall + sampled
    return wall


def results_table(reports: Sequence[Mapping]) -> str:
    """A markdown table with one line per report: the experiment, the paper's table or
    figure, the preset, the tally of the paper's claims (:func:`claim_tally`), the setting the
    tally is taken under, the wall time and the date. ``structmc reproduce --table DIR``
    prints it for every ``report.json`` under ``DIR``."""
    lines = [
        "| experiment | paper, table/figure | preset | claims reproduced | smaller margin | tied | not reproduced "
        "| not comparable | checks (not counted) | tally setting | wall time | date |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(reports, key=lambda r: str(r.get("experiment"))):
        t = claim_tally(r)
        judged = t[REPRODUCED] + t[SMALLER_MARGIN] + t[TIED] + t[NOT_REPRODUCED]
        paper = r.get("paper") or {}
        wall = _duration(work_seconds(r))
        lines.append(
            f"| `{r.get('experiment')}` | {paper.get('citation', '–')}, {r.get('figure') or '–'} | {r.get('preset')} | "
            f"**{t[REPRODUCED]}/{judged}** | {t[SMALLER_MARGIN]} | {t[TIED]} | {t[NOT_REPRODUCED]} | "
            f"{t[NOT_COMPARABLE]} | {t[CHECK]} | {r.get('paper_setting') or '–'} | {wall} | {r.get('date', '–')} |"
        )
    return "\n".join(lines)


def _counted_rows(report: Mapping):
    """The rows :func:`claim_tally` counts (the paper's claims under the tallied setting)."""
    setting = report.get("paper_setting")
    for c in report.get("comparisons", []):
        if setting and c.get("setting") not in (None, "", setting):
            continue
        if c.get("check") or str(c.get("verdict", "")).startswith(CHECK):
            continue
        yield c


def unreproduced_table(reports: Sequence[Mapping]) -> str:
    """A markdown table of every counted claim whose verdict is not "reproduced" (smaller
    margin, tied, not reproduced, not comparable): the experiment and preset, the quantity,
    the paper's number, ours, the rule and the report's note, so that each such row says why
    with a number. ``structmc reproduce --table DIR`` prints it below :func:`results_table`."""
    return claims_table(reports, reproduced=False)


def _duration(seconds: float) -> str:
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else (f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h")
    )


def claims_table(reports: Sequence[Mapping], reproduced: bool = True) -> str:
    """A markdown table with one row per claim of the papers that the reports count (their
    tallied setting; checks left out): the experiment, preset and its work time (:func:`work_seconds`),
    the claim, the paper's number, ours, the rule, the verdict and the report's note.
    ``reproduced=False`` keeps only the rows not reproduced (:func:`unreproduced_table`).
    ``structmc reproduce --table DIR --claims`` prints it."""

    def num(x) -> str:
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(num(v) for v in x) + "]"
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            return "–" if x is None else str(x)
        return f"{x:.5g}"

    lines = [
        "| experiment (preset, time) | claim | paper | ours | rule | verdict | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(reports, key=lambda r: str(r.get("experiment"))):
        for c in _counted_rows(r):
            verdict = str(c.get("verdict", ""))
            if verdict.startswith(REPRODUCED) and not reproduced:
                continue
            unit = c.get("unit") or ""

            def cell(x, unit=unit) -> str:
                numeric = isinstance(x, (int, float)) and not isinstance(x, bool)
                return num(x) + (unit if unit in ("%", "") else f" {unit}") if numeric else num(x)

            def esc(text) -> str:  # |ours − paper|, max |var/q − 1| inside a table cell
                return str(text).replace("|", "\\|")

            note = " ".join(str(c.get("note") or "").split())
            rule = c.get("rule") or "–"
            lines.append(
                f"| `{r.get('experiment')}` ({r.get('preset')}, {_duration(work_seconds(r))}) | "
                f"{esc(c.get('quantity'))} | {esc(cell(c.get('paper')))} | {esc(cell(c.get('ours')))} | "
                f"{esc(rule)} | {esc(verdict)} | {esc(note or '–')} |"
            )
    return "\n".join(lines)


REPORT_FIELDS = (
    "experiment",
    "paper",
    "figure",
    "preset",
    "reduced",
    "reductions",
    "config",
    "seed",
    "step_size_mapping",
    "versions",
    "hardware",
    "wall_time_s",
    "compute_time_s",
    "date",
    "numbers",
    "comparisons",
    "verdicts",
    "figures",
    "notes",
)
COMPARISON_FIELDS = ("quantity", "paper", "ours", "difference", "unit", "rule", "verdict", "note", "check", "setting")

__all__ = [
    "Tolerance",
    "Ordering",
    "Claim",
    "Comparison",
    "write_report",
    "render_markdown",
    "hardware",
    "verdict_counts",
    "fmt_num",
    "json_value",
    "write_details_report",
    "ROW_VERDICTS",
    "row_comparison",
    "write_rows_report",
    "REPORT_FIELDS",
    "COMPARISON_FIELDS",
    "claim_tally",
    "results_table",
    "claims_table",
    "unreproduced_table",
    "work_seconds",
    "REPRODUCED",
    "SMALLER_MARGIN",
    "NOT_REPRODUCED",
    "NOT_COMPARABLE",
]
