"""The report of a reproduced experiment: ``report.json`` and ``report.md`` in one format.

An experiment's ``run`` computes its numbers, then builds one :class:`Comparison` per number
the paper publishes (or per claim it states), each judged by a rule written in the
experiment — never by eye:

* :class:`Tolerance` — reproduced when ``|ours − paper| ≤ abs + rel·|paper|``;
* :class:`WithinNoise` — a published number judged on the noise of both sides: reproduced when
  ``|ours − paper| ≤ k·√(se_ours² + se_paper²)`` (k = 3 by default), the rule stating its numbers;
* :class:`Ordering` — a claim over several values ("pSGLD < SGLD at every size"): reproduced
  when our values rank as the paper's and our margin is at least ``margin`` of the paper's,
  "same ordering, smaller margin" when they rank alike with a smaller margin, else "not
  reproduced" (saying which pair is out of order).

Every row of a paper's claim is counted (issue 35): a value the run produced as NaN or inf is
"not reproduced: the run produced nan", an implausible value (an accuracy outside [0, 100], a
negative MSE, an ESS ≤ 0, an IAC < 1, ...; :func:`plausible_range`) is "not reproduced:
implausible", a claim the preset or the machine did not run is "not run: <why>" and stays in
the denominator, and a claim a constant answer meets by construction ("no trend") is *weak*: it
counts as reproduced only while at least half of the report's other claims are, and an
ordering only while at least half of the report's published values are (:func:`tally`).
A *check* is a row that is not a claim of the papers (our own targets, implementation checks,
evidence for an explanation, data the papers did not use) and says why (``check_reason``).

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
import re
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
NOT_COMPARABLE = "not comparable"  # older reports only: counted as "not run" (issue 35: nothing leaves the denominator)
NOT_RUN = "not run"  # a claim of the paper this run did not test (the reason follows): in the denominator
CHECK = "check"  # a row that is not a claim of the paper (ours, evidence, other data): no tally, says why
IMPLAUSIBLE = "implausible"
ORDERING_NOT_CARRIED = (
    "an ordering is not carried when fewer than half of the report's published values are reproduced "
    "(it ranks values that are not the paper's)"
)
WEAK_NOT_CARRIED = "a weak claim (a constant answer meets it) is not carried when fewer than half of the report's other claims are reproduced"


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class Tolerance:
    """Reproduced when ``|ours − paper| ≤ abs + rel·|paper|``."""

    abs: float = 0.0
    rel: float = 0.0
    weak = False  # every rule says whether a constant answer meets it by construction (Comparison.weak)

    def __post_init__(self):
        if not (self.abs >= 0 and self.rel >= 0) or (self.abs == 0 and self.rel == 0):
            raise ValueError(f"a Tolerance needs abs >= 0 and rel >= 0, not both 0; got {self.abs}, {self.rel}")

    def describe(self) -> str:
        parts = ([f"±{self.abs:g}"] if self.abs else []) + (
            [f"±{100 * self.rel:g}% of the paper's"] if self.rel else []
        )
        return "|ours − paper| ≤ " + " + ".join(parts)

    def judge(self, ours, paper) -> str:
        if not _finite(paper):
            raise ValueError(f"a published value must be a finite number, got {paper!r}")
        if not _finite(ours):
            return _not_finite(ours)
        allowed = self.abs + self.rel * abs(paper)
        diff = ours - paper
        if abs(diff) <= allowed * (1 + 1e-9):  # a difference equal to the tolerance passes despite rounding
            return REPRODUCED
        return f"{NOT_REPRODUCED}: differs by {diff:+.4g}, beyond the tolerance ±{allowed:.4g}"


def _not_finite(ours) -> str:
    """The verdict of a value the run did not produce as a finite number."""
    if ours is None:
        return f"{NOT_RUN}: no value from this run"
    return f"{NOT_REPRODUCED}: the run produced {ours!r}"


@dataclass(frozen=True)
class WithinNoise:
    """A published number judged on the noise of both sides (issue 35 §1): reproduced when
    ``|ours − paper| ≤ k·√(ours_se² + paper_se²)``. ``ours_se`` is the standard error of our
    value (the spread over seeds / √seeds, a bootstrap or a binomial test-set SE where there is
    one run), ``paper_se`` the paper's (its reported sd / √runs or SE; 0 where it reports none),
    ``source`` says where each comes from. The rule states its numbers."""

    ours_se: float
    paper_se: float = 0.0
    k: float = 3.0
    source: str = ""
    weak = False

    def __post_init__(self):
        if not (_finite(self.ours_se) and self.ours_se >= 0 and _finite(self.paper_se) and self.paper_se >= 0):
            raise ValueError(f"WithinNoise needs finite SEs >= 0, got ours {self.ours_se!r}, paper {self.paper_se!r}")
        if not (self.k > 0) or self.ours_se + self.paper_se == 0:
            raise ValueError("WithinNoise needs k > 0 and some noise on one side (else use a Tolerance)")

    @property
    def allowed(self) -> float:
        return self.k * math.hypot(self.ours_se, self.paper_se)

    def describe(self) -> str:
        return (
            f"|ours − paper| ≤ {self.k:g}·√(SE_ours² + SE_paper²) = {self.k:g}·√({self.ours_se:.3g}² + "
            f"{self.paper_se:.3g}²) = {self.allowed:.3g}" + (f" ({self.source})" if self.source else "")
        )

    def judge(self, ours, paper) -> str:
        if not _finite(paper):
            raise ValueError(f"a published value must be a finite number, got {paper!r}")
        if not _finite(ours):
            return _not_finite(ours)
        diff = ours - paper
        z = abs(diff) / math.hypot(self.ours_se, self.paper_se)
        if abs(diff) <= self.allowed * (1 + 1e-9):
            return REPRODUCED
        return f"{NOT_REPRODUCED}: differs by {diff:+.4g} = {z:.2g} combined SEs, beyond {self.k:g}"


def binomial_se(p: float, n: int) -> float:
    """The standard error of an accuracy ``p`` (a fraction) on ``n`` test points; for a
    percentage pass ``p / 100`` and scale the result by 100."""
    if not (0 <= p <= 1) or n <= 0:
        return math.nan
    return math.sqrt(max(p * (1 - p), 1.0 / n) / n)  # never 0: one error in n


def seed_se(values: Sequence[float]) -> float:
    """The standard error of the mean of ``values`` (one per seed): sd / √n, NaN for n < 2."""
    vals = [float(v) for v in values]
    if len(vals) < 2 or not all(math.isfinite(v) for v in vals):
        return math.nan
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1) / len(vals))


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
    weak = False

    def describe(self) -> str:
        sign = "<" if self.lower_is_better else ">"
        return f"ranking {f' {sign} '.join(self.labels)} as in the paper, margin ≥ {self.margin:g}× the paper's" + (
            f", ties within {self.tie:g}" if self.tie else ""
        )

    def judge(self, ours: Sequence[float], paper: Sequence[float]) -> str:
        if len(ours) != len(self.labels) or len(paper) != len(self.labels):
            raise ValueError(f"an Ordering over {len(self.labels)} labels needs as many values")
        if not all(_finite(x) for x in paper):
            raise ValueError(f"published values must be finite numbers, got {list(paper)}")
        bad = [lab for lab, x in zip(self.labels, ours) if not _finite(x)]
        if bad:
            if all(x is None for x in ours):
                return f"{NOT_RUN}: no value from this run"
            return (
                f"{NOT_REPRODUCED}: the run produced {[ours[self.labels.index(b)] for b in bad]} for {', '.join(bad)}"
            )
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
    numbers: ``test(ours) -> bool``; ``text`` states the claim and the test. ``weak``: a claim
    that a constant answer meets by construction ("no systematic trend"), which cannot carry
    an experiment's tally by itself (:func:`tally`). A test that raises ``TypeError`` or
    ``ValueError`` means the claim could not be tested in this run: "not run" (still counted);
    a non-finite number among ``ours`` is "not reproduced: the run produced nan"."""

    text: str
    test: Any
    weak: bool = False

    def describe(self) -> str:
        return self.text + (" [weak: a constant answer meets it]" if self.weak else "")

    def judge(self, ours, paper) -> str:
        bad = [x for x in _numbers_in(ours) if not math.isfinite(x)]
        if bad:
            return f"{NOT_REPRODUCED}: the run produced {bad[0]!r}"
        try:
            ok = bool(self.test(ours))
        except (TypeError, ValueError) as err:
            return f"{NOT_RUN}: {err}"
        return REPRODUCED if ok else f"{NOT_REPRODUCED}: the claim fails on our numbers ({_fmt(ours)})"


@dataclass
class Comparison:
    """One row of the report: a number (or claim) of the paper beside ours and its verdict.
    ``ours``/``paper`` are numbers for a :class:`Tolerance`, sequences for an
    :class:`Ordering`; ``paper=None`` records a number the paper does not give (no verdict)."""

    quantity: str
    ours: Any
    paper: Any
    rule: Tolerance | WithinNoise | Ordering | Claim | None = None
    unit: str = ""
    note: str = ""
    check: bool = False  # not a claim of the paper: judged and shown, outside the tally
    # the run setting the row comes from when a report judges one claim under several (issue 26 §2:
    # "T = 1" the posterior, "T = 1/N" the authors' code); "" when the report has one setting
    setting: str = ""
    #: why a check is not a claim of the papers (required with ``check``)
    check_reason: str = ""
    #: the reason a claim of the paper was not run (preset, GPU, data offline): verdict "not run"
    not_run: str = ""
    #: the range a plausible value of ``ours`` lies in, ``(low, high)`` inclusive (``None``:
    #: inferred from the quantity and unit by :func:`plausible_range`; ``False``: no range)
    valid: Any = None
    verdict: str = field(init=False, default="")

    def __post_init__(self):
        if self.check and not self.check_reason.strip():
            raise ValueError(f"a check must say why it is not a claim of the paper (check_reason): {self.quantity!r}")
        if self.not_run:
            self.verdict = f"{NOT_RUN}: {self.not_run}"
        elif self.paper is None or self.rule is None:
            self.verdict = "no published value" if self.paper is None else "not judged"
        else:
            outside = self.implausible()
            self.verdict = (
                f"{NOT_REPRODUCED}: {IMPLAUSIBLE} ({outside})" if outside else self.rule.judge(self.ours, self.paper)
            )
        if self.check:
            self.verdict = f"{CHECK} ({self.verdict})"

    @property
    def weak(self) -> bool:
        return self.rule is not None and bool(self.rule.weak)  # no rule: a row not run

    def implausible(self) -> str:
        """Why ``ours`` is not a plausible value of the quantity ("" when it is, or when no
        range applies): a finite number outside :attr:`valid` (or the inferred range)."""
        if self.valid is False:
            return ""
        rng = self.valid if self.valid is not None else plausible_range(self.quantity, self.unit)
        if rng is None:
            return ""
        low, high = rng
        for x in _numbers_in(self.ours):
            if math.isfinite(x) and not (low <= x <= high):
                return f"{x:.4g} outside [{low:g}, {high:g}] for {self.quantity!r}"
        return ""

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
            "check_reason": self.check_reason,
            "weak": self.weak,
            "setting": self.setting,
        }


def _numbers_in(x) -> list[float]:
    """Every real number in ``x`` (a number or nested lists / tuples / dict values)."""
    if isinstance(x, bool) or x is None:
        return []
    if isinstance(x, (int, float)):
        return [float(x)]
    if isinstance(x, Mapping):
        x = list(x.values())
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in _numbers_in(item)]
    return []


# (pattern on the quantity, range): the first match applies. Quantities that are differences,
# changes, logs or ratios of a signed thing match none and get no range.
_SIGNED = re.compile(
    r"differen|change|\bgap\b|\bdrop\b|\bfall\b|\blog|\bminus\b|−|improve|\bbias\b|\bmean\b(?! test| squared)|\bz\b|Δ",
    re.I,
)
_RANGES: tuple[tuple[re.Pattern, str, tuple[float, float]], ...] = (
    (re.compile(r"\bIAC\b|autocorrelation time", re.I), "", (1.0, math.inf)),
    (re.compile(r"\bESS\b|effective sample size", re.I), "", (1e-12, math.inf)),
    (re.compile(r"\b(ECE|MCE)\b|calibration error", re.I), "%", (0.0, 100.0)),
    (re.compile(r"accuracy|error rate|test error|\berror\b|acceptance", re.I), "%", (0.0, 100.0)),
    (re.compile(r"\b(R?MSE|variance|KSD|FSSD|seconds|wall time|Brier)\b", re.I), "", (0.0, math.inf)),
    (re.compile(r"\b(sd|std|var)\b(?!-)"), "", (0.0, math.inf)),
)


def plausible_range(quantity: str, unit: str = "") -> tuple[float, float] | None:
    """The range a plausible value of ``quantity`` (in ``unit``) lies in, or ``None``: an
    accuracy, error, acceptance rate, ECE or MCE in [0, 100] (in [0, 1] when the unit is a
    fraction), an MSE, variance, sd, KSD or time ≥ 0, an ESS > 0, an IAC ≥ 1. A quantity that
    names a difference, change, gap, log or ratio gets none (it may be negative)."""
    if _SIGNED.search(quantity) or re.search(r"ratio|/|×|\bfactor\b|per cent of|%\s*of", quantity, re.I):
        return None
    for pattern, kind, rng in _RANGES:
        if pattern.search(quantity):
            if kind == "%" and unit.strip().lower() in ("fraction", "accuracy", "proportion", "probability"):
                return (0.0, 1.0)
            return rng
    return None


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


_KEYS = (REPRODUCED, SMALLER_MARGIN, TIED, NOT_REPRODUCED, NOT_RUN)


def _row_dict(r) -> dict:
    # a dict is returned itself: write_report rewrites the verdicts of the rows it holds in place
    if isinstance(r, dict):
        return r
    return dict(r) if isinstance(r, Mapping) else {**r.to_dict(), "weak": r.weak}


def tally(rows: Sequence, setting: str | None = None) -> dict[str, int]:
    """The count of a report's rows by verdict, over the paper's claims (checks counted apart):
    ``claims`` (every claim, run or not), ``run``, ``reproduced``, ``same ordering, smaller
    margin``, ``tied``, ``not reproduced`` (NaN and implausible values included), ``not run``
    (an older report's "not comparable" included: nothing leaves the denominator) and
    ``check``. With ``setting``, only the rows of that run setting and those common to all.

    Weak claims (:class:`Claim` with ``weak=True``: a constant answer meets them) count as
    reproduced only while at least half of the other run claims are reproduced; otherwise as
    not reproduced (:func:`carried_verdicts` gives each row's verdict under this rule).
    ``rows``: :class:`Comparison` objects or their dicts (a report's ``comparisons``)."""
    counts = {k: 0 for k in _KEYS} | {CHECK: 0}
    for verdict, _row in carried_verdicts(rows, setting):
        if verdict.startswith(CHECK):
            counts[CHECK] += 1
            continue
        for key in _KEYS:
            if verdict.startswith(key):
                counts[key] += 1
                break
        else:
            if verdict.startswith(NOT_COMPARABLE):
                counts[NOT_RUN] += 1
    counts["claims"] = sum(counts[k] for k in _KEYS)
    counts["run"] = counts["claims"] - counts[NOT_RUN]
    return counts


def carried_verdicts(rows: Sequence, setting: str | None = None) -> list[tuple[str, dict]]:
    """``(verdict, row dict)`` for each row of ``setting`` (all when ``None``) that is a claim
    or a check (rows with "no published value" or "not judged" are left out), the verdict of a
    weak claim rewritten when the report's other claims do not carry it (:func:`tally`)."""
    out = []
    for r in rows:
        d = _row_dict(r)
        if setting is not None and d.get("setting") not in (None, "", setting):
            continue
        v = str(d.get("verdict", ""))
        if d.get("check") and not v.startswith(CHECK):
            v = f"{CHECK} ({v})"
        if v.startswith(("no published value", "not judged")):
            continue
        out.append((v, d))
    # an ordering ranks values: when fewer than half of the report's published values are
    # reproduced, the values it ranks are not the paper's, and the ranking cannot carry the tally
    # (the paper's numbers offset, ×10 or in other units keep every ordering: issue 35 §4)
    values = [v for v, d in out if _is_value_row(d) and not v.startswith((CHECK, NOT_RUN, NOT_COMPARABLE))]
    anchored = not values or 2 * sum(v.startswith(REPRODUCED) for v in values) >= len(values)
    if not anchored:
        out = [
            (
                f"{NOT_REPRODUCED}: {ORDERING_NOT_CARRIED} ({v})"
                if _is_ordering_row(d) and v.startswith((REPRODUCED, SMALLER_MARGIN))
                else v,
                d,
            )
            for v, d in out
        ]
    strong = [v for v, d in out if not v.startswith((CHECK, NOT_RUN, NOT_COMPARABLE)) and not d.get("weak")]
    carried = len(strong) > 0 and 2 * sum(v.startswith(REPRODUCED) for v in strong) >= len(strong)
    return [
        (
            f"{NOT_REPRODUCED}: {WEAK_NOT_CARRIED}"
            if d.get("weak") and v.startswith(REPRODUCED) and not carried
            else v,
            d,
        )
        for v, d in out
    ]


def _is_value_row(d: Mapping) -> bool:
    """A published value judged by a Tolerance or WithinNoise (their rule reads |ours − paper| ≤ ...)."""
    return str(d.get("rule") or "").startswith("|ours − paper|") and not d.get("check")


def _is_ordering_row(d: Mapping) -> bool:
    """A ranking of methods (:class:`Ordering`, whose rule reads "ranking ... as in the paper")."""
    return str(d.get("rule") or "").startswith("ranking ") and not d.get("check")


def verdict_counts(rows: Sequence[Comparison], setting: str | None = None) -> dict[str, int]:
    """:func:`tally` (kept under its older name)."""
    return tally(rows, setting)


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
    stand_in: str = "",
) -> dict:
    """Write ``report.json`` and ``report.md`` into ``out_dir`` and return the JSON dict.

    ``stand_in``: what stood in for the paper's data (only the ``tiny`` preset may run on a
    stand-in; :func:`structmc_papers.resolve_preset` makes the others refuse one): said at the top of report.md and in ``report["stand_in"]``.

    ``wall_time_s`` is this call's; ``compute_time_s``, for a run resumed over several
    sittings, the seconds of work over all of them (this call's plus what it read back).

    ``experiment`` is the registry record (:class:`~structmc_papers.Experiment`);
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
        "stand_in": stand_in,
        "comparisons": _carried_rows(comparisons, settings),
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


def _carried_rows(comparisons: Sequence[Comparison], settings: Sequence[str]) -> list[dict]:
    """The rows' dicts with each verdict as :func:`tally` counts it in its setting (a weak claim
    or an ordering not carried says so)."""
    rows = [{**c.to_dict(), "weak": c.weak} for c in comparisons]
    every: list[str | None] = [*settings] or [None]
    for s in every:
        for v, d in carried_verdicts(rows, s):
            if v != d["verdict"] and d.get("setting") in (("", None) if s is None else (s,)) and not d.get("check"):
                d["verdict"] = v  # a weak claim or an ordering that the report's other rows do not carry
    return rows


def _tally(counts: Mapping[str, int]) -> str:
    claims = counts.get("claims", sum(counts.get(k, 0) for k in _KEYS))
    return (
        f"{claims} claims of the paper: {counts.get(NOT_RUN, 0) + counts.get(NOT_COMPARABLE, 0)} not run; of those run, "
        f"{counts['reproduced']} reproduced, {counts['same ordering, smaller margin']} same ordering with a smaller "
        f"margin, {counts.get(TIED, 0)} tied, {counts['not reproduced']} not reproduced (NaN and implausible values "
        "included). Rows marked check are not claims of the paper (each says why) and are not counted."
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
    if report.get("stand_in"):
        lines += [
            f"**Stand-in data, not the paper's: {report['stand_in']}.** The verdicts below say nothing about the "
            "paper's claims.",
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
    from structmc.run import Budget

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
    stand_in: str = "",
) -> dict:
    """:func:`write_report` for experiment ``name`` (a key of
    :data:`~structmc_papers.REGISTRY`) that builds its own record ``details`` (runs,
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
        stand_in=stand_in,
    )


# ---------------------------------------------------------------------------------------------
# rows: the dict form of a Comparison that the MAMBA experiments and gibbs-xor build
# ---------------------------------------------------------------------------------------------
#: a row's own verdict word -> this module's verdict
ROW_VERDICTS = {"agrees": REPRODUCED, "differs": NOT_REPRODUCED, "n/a": NOT_RUN}


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
            check_reason=str(row.get("check_reason", "")),
            not_run=str(row.get("not_run", "")),
        )
    if row.get("metric") == "claim" or row.get("kind") == "claim":
        holds = row["verdict"] == "agrees" if row["verdict"] in ("agrees", "differs") else None
        return Comparison(
            quantity,
            row["ours"],
            row["paper"],
            Claim(row["rule"], _holds(holds, "the claim cannot be tested in this run"), weak=bool(row.get("weak"))),
            unit=row.get("unit", ""),
            check=bool(row.get("check")),
            check_reason=str(row.get("check_reason", "")),
            not_run=str(row.get("not_run", "")),
        )
    tol = float(row.get("tol", 0.0))
    se = row.get("se")  # a value row judged on its noise: {"ours": SE, "paper": SE, "source": ...}
    rule = (
        WithinNoise(float(se["ours"]), float(se.get("paper", 0.0)), float(se.get("k", 3.0)), str(se.get("source", "")))
        if se
        else Tolerance(abs=tol if tol > 0 else 1e-12)
    )
    return Comparison(
        quantity,
        row["ours"],
        row["paper"],
        rule,
        unit=row.get("comparison_unit", row.get("unit", "")),
        check=bool(row.get("check")),
        check_reason=str(row.get("check_reason", "")),
        not_run=str(row.get("not_run", "")),
        valid=row.get("valid"),
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
    stand_in: str = "",
) -> dict:
    """:func:`write_details_report` for an experiment whose record ``legacy`` holds ``rows``:
    one Comparison per row (:func:`row_comparison`), each row's ``verdict`` replaced by the
    Comparison's, ``legacy["verdicts"]`` counted by row verdict word (:data:`ROW_VERDICTS`),
    then ``markdown(legacy)`` as the details; ``figures`` that were not written are left out."""
    comps = [row_comparison(r) for r in rows]
    for r, c in zip(rows, comps):
        r["verdict"] = c.verdict
    legacy["verdicts"] = {
        word: sum(c.verdict.startswith(v) and not c.check for c in comps) for word, v in ROW_VERDICTS.items()
    }
    md = markdown(legacy).replace(
        "Verdicts: ", "Verdicts (agree = reproduced, differ = not reproduced, n/a = not run): "
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
        stand_in=stand_in,
    )


def claim_tally(report: Mapping) -> dict[str, int]:
    """:func:`tally` of a written report's rows under the setting its paper's numbers
    correspond to (``paper_setting``; rows common to all settings too). Works on reports of
    every format (rows written by :func:`write_report` and :func:`write_rows_report`)."""
    return tally(report.get("comparisons", []), report.get("paper_setting") or None)


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


def results_table(reports: Sequence[Mapping], missing: Mapping[str, Sequence] | None = None) -> str:
    """A markdown table with one line per report: the experiment, the paper's table or
    figure, the preset, then the paper's claims (:func:`claim_tally`): every claim, those run,
    reproduced, with a smaller margin, tied, not reproduced (NaN and implausible values
    included), not run (still in the denominator), the checks (not claims, not counted), the
    setting the tally is taken under, the work time and the date. ``missing`` maps an
    experiment with no report to its claims' rows (all "not run"), which get a line too.
    ``structmc reproduce --table DIR`` prints it for every ``report.json`` under ``DIR``."""
    lines = [
        "| experiment | paper, table/figure | preset | claims in the paper | run | reproduced | smaller margin | tied "
        "| not reproduced | not run | checks (not counted) | tally setting | work time | date |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(reports, key=lambda r: str(r.get("record") or r.get("experiment"))):
        t = claim_tally(r)
        paper = r.get("paper") or {}
        wall = _duration(work_seconds(r))
        stand_in = " (stand-in data)" if r.get("stand_in") else ""
        lines.append(
            f"| `{r.get('record') or r.get('experiment')}` | {paper.get('citation', '–')}, {r.get('figure') or '–'} | "
            f"{r.get('preset')}{stand_in} | {t['claims']} | {t['run']} | **{t[REPRODUCED]}** | {t[SMALLER_MARGIN]} | {t[TIED]} | "
            f"{t[NOT_REPRODUCED]} | {t[NOT_RUN]} | {t[CHECK]} | {r.get('paper_setting') or '–'} | {wall} | "
            f"{r.get('date', '–')} |"
        )
    for name, rows in sorted((missing or {}).items()):
        t = tally(rows)
        lines.append(
            f"| `{name}` | no record | – | {t['claims']} | 0 | **0** | 0 | 0 | 0 | {t[NOT_RUN]} | {t[CHECK]} | – | – | – |"
        )
    return "\n".join(lines)


def summary_table(reports: Sequence[Mapping], missing: Mapping[str, Sequence] | None = None) -> str:
    """The README's table: one line per report (and per experiment with no report, from
    ``missing``): claims in the paper, run, reproduced, not reproduced, not run, and the rest
    of those run (same ordering with a smaller margin, or tied), then the total line."""
    lines = [
        "| experiment | paper, table/figure | preset | claims in the paper | run | reproduced | not reproduced "
        "| not run | smaller margin or tied |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    items: list[tuple[str, Mapping | None, dict[str, int]]] = [
        (str(r.get("record") or r.get("experiment")), r, claim_tally(r)) for r in reports
    ]
    items += [(name, None, tally(rows)) for name, rows in (missing or {}).items()]
    for name, r, t in sorted(items, key=lambda x: x[0]):
        paper = (r or {}).get("paper") or {}
        where = f"{paper.get('citation', '–')}, {r.get('figure') or '–'}" if r else "no record"
        preset = (str(r.get("preset")) + (" (stand-in data)" if r.get("stand_in") else "")) if r else "–"
        lines.append(
            f"| `{name}` | {where} | {preset} | {t['claims']} | {t['run']} | **{t[REPRODUCED]}** | "
            f"{t[NOT_REPRODUCED]} | {t[NOT_RUN]} | {t[SMALLER_MARGIN] + t[TIED]} |"
        )
    total = total_tally(reports, missing)
    if items:
        lines.append(
            f"| **all** | | | **{total['claims']}** | {total['run']} | **{total[REPRODUCED]}** | "
            f"{total[NOT_REPRODUCED]} | {total[NOT_RUN]} | {total[SMALLER_MARGIN] + total[TIED]} |"
        )
    return "\n".join(lines)


def total_tally(reports: Sequence[Mapping], missing: Mapping[str, Sequence] | None = None) -> dict[str, int]:
    """:func:`claim_tally` summed over ``reports`` (and the rows of experiments with no report)."""
    total: dict[str, int] = {}
    for t in [claim_tally(r) for r in reports] + [tally(rows) for rows in (missing or {}).values()]:
        for k, v in t.items():
            total[k] = total.get(k, 0) + v
    return total


def _counted_rows(report: Mapping):
    """The rows :func:`claim_tally` counts (the paper's claims under the tallied setting), each
    with its verdict as counted (a weak claim not carried says so)."""
    for verdict, c in carried_verdicts(report.get("comparisons", []), report.get("paper_setting") or None):
        if verdict.startswith(CHECK):
            continue
        yield {**c, "verdict": verdict}


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


def rejudge_record(folder: str | Path, comparisons: Sequence[Comparison]) -> dict:
    """Replace the rows of the record in ``folder`` (its ``report.json`` and the "Paper vs ours"
    section of its ``report.md``) by ``comparisons`` — the same numbers judged under today's
    rules (issue 35 §7) — keeping everything else, the details and figures included. Each
    experiment's ``rejudge(report) -> list[Comparison]`` rebuilds the rows from a written
    report's ``numbers`` and ``config``; ``docs/results/rejudge.py`` runs it on every record.
    Returns the new report dict."""
    folder = Path(folder)
    report = json.loads((folder / "report.json").read_text())
    settings = list(dict.fromkeys(c.setting for c in comparisons if c.setting))
    paper_setting = report.get("paper_setting")
    if settings and paper_setting not in settings:
        raise ValueError(f"{folder}: the rows' settings {settings} do not hold the tallied {paper_setting!r}")
    report["comparisons"] = jsonable(_carried_rows(comparisons, settings))
    report["verdicts"] = verdict_counts(comparisons, paper_setting if settings else None)
    report["verdicts_by_setting"] = {s: verdict_counts(comparisons, s) for s in settings}
    report.setdefault("stand_in", "")
    (folder / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    md_path = folder / "report.md"
    fresh = render_markdown(report).splitlines()
    new_section = _section(fresh, "## Paper vs ours")
    if md_path.exists():
        old = md_path.read_text().splitlines()
        if "## Paper vs ours" in old:
            start = old.index("## Paper vs ours")
            end = start + len(_section(old, "## Paper vs ours"))
            md_path.write_text("\n".join(old[:start] + new_section + old[end:]) + "\n")
            return report
    md_path.write_text("\n".join(fresh) + "\n")
    return report


_SECTION_ENDS = ("## Step sizes", "## Notes", "## Details", "## Figures")


def _section(lines: Sequence[str], head: str) -> list[str]:
    """The lines of the markdown section ``head`` (through its notes), up to the next of the
    report's sections (step sizes, notes, details, figures) or the versions line."""
    start = list(lines).index(head)
    out: list[str] = []
    for line in lines[start:]:
        if out and (line.startswith(_SECTION_ENDS) or line.startswith("structmc ")):
            break
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out + [""]


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
COMPARISON_FIELDS = (
    "quantity",
    "paper",
    "ours",
    "difference",
    "unit",
    "rule",
    "verdict",
    "note",
    "check",
    "check_reason",
    "weak",
    "setting",
)

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
    "NOT_RUN",
    "WithinNoise",
    "binomial_se",
    "seed_se",
    "plausible_range",
    "tally",
    "carried_verdicts",
    "total_tally",
    "summary_table",
    "rejudge_record",
]
