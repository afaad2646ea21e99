"""Adversarial answers for the verdict rules (issues 26 §1 and 35 §4): a rule that a constant,
the paper's numbers shuffled across methods, every ordering reversed, the paper's numbers
offset per method beyond the tolerance, the right order with absurd values, NaN or inf, a
method left out, or fractions given for percentages can pass does not test the paper's claim.
Each experiment's test builds its rows from these answers and requires that at most a quarter of
its counted claims pass; the paper's own numbers must pass.

The answers are nested dicts ``{method: {cell: value}}`` (a cell: a width, data set, batch size,
column...), the shape of the papers' tables."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence

from structmc_papers._report import REPRODUCED, SMALLER_MARGIN, tally

Table = Mapping[str, Mapping]


def passes(rows: Sequence, setting: str | None = None) -> tuple[int, int]:
    """``(passed, counted)`` over the paper's claims, counted as the README's tally counts them
    (:func:`structmc_papers._report.tally`): a row passes when its verdict is "reproduced"
    or "same ordering, smaller margin" (a weak claim only while the others carry it); the
    denominator holds every claim, run or not (NaN, implausible and not-run rows included);
    checks are not counted."""
    t = tally(rows, setting)
    return t[REPRODUCED] + t[SMALLER_MARGIN], t["claims"]


def at_most_a_quarter(rows: Sequence, what: str = "", setting: str | None = None) -> None:
    """Assert that a wrong answer passes at most a quarter of the counted claims (and that
    there are claims to count)."""
    passed, counted = passes(rows, setting)
    assert counted > 0, f"{what}: no claims counted"
    assert passed <= counted / 4, f"{what}: a wrong answer passes {passed} of {counted} claims"


def cells(paper: Table) -> list:
    """Every cell that at least one method has."""
    seen: list = []
    for by_cell in paper.values():
        seen += [c for c in by_cell if c not in seen]
    return seen


def constants(paper: Table, quantiles: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0)) -> Iterator[dict]:
    """One answer per quantile of all the paper's numbers: every cell of every method gets
    that value (a constant answer hits a few cells by chance, never most)."""
    values = sorted(float(v) for by_cell in paper.values() for v in by_cell.values())
    for q in quantiles:
        v = values[round(q * (len(values) - 1))]
        yield {m: {c: v for c in by_cell} for m, by_cell in paper.items()}


def shuffled(paper: Table, shift: int = 1) -> dict:
    """Each method gets the next method's numbers (cells the next lacks keep a missing value)."""
    methods = list(paper)
    out: dict = {}
    for k, m in enumerate(methods):
        other = paper[methods[(k + shift) % len(methods)]]
        out[m] = {c: other.get(c, v) for c, v in paper[m].items()}
    return out


def reversed_ranks(paper: Table) -> dict:
    """In every cell the best-ranked method gets the worst-ranked method's number and so on
    (every ordering between methods reversed; a middle method keeps its own number)."""
    out: dict = {m: {} for m in paper}
    for c in cells(paper):
        have = [m for m in paper if c in paper[m]]
        ranked = sorted(have, key=lambda m: float(paper[m][c]))
        for m, other in zip(ranked, reversed(ranked)):
            out[m][c] = paper[other][c]
    return out


def transpose(table: Mapping[str, Mapping]) -> dict:
    """``{a: {b: v}}`` -> ``{b: {a: v}}`` (when a table is keyed cell-first)."""
    out: dict = {}
    for a, by_b in table.items():
        for b, v in by_b.items():
            out.setdefault(b, {})[a] = v
    return out


# ---------------------------------------------------------------------------------------------
# issue 35 §4: the five families
# ---------------------------------------------------------------------------------------------
def offsets(paper: Table, beyond: Callable[[str, object, float], float], factor: float = 1.5) -> Iterator[dict]:
    """The paper's numbers moved per method just beyond each value rule's tolerance:
    ``beyond(method, cell, value)`` is the tolerance of that value (its rule's allowed
    difference); each answer moves every method by ``factor`` × it, all up, all down, and up and
    down alternating by method (so that the orderings between methods may still hold)."""
    methods = list(paper)
    for signs in ([1] * len(methods), [-1] * len(methods), [(-1) ** k for k in range(len(methods))]):
        yield {
            m: {c: float(v) + s * factor * beyond(m, c, float(v)) for c, v in paper[m].items()}
            for m, s in zip(methods, signs)
        }


def absurd(paper: Table, low: float | None = None, high: float | None = None) -> Iterator[dict]:
    """The paper's ranking kept with absurd values: every number × 10 (an accuracy of 250 %, an
    MSE ten times the paper's), shifted below ``low`` (a negative error or MSE, an IAC below 1),
    and shifted above ``high`` (an ECE beyond 100 %); each map keeps every ordering."""
    values = [float(v) for by_cell in paper.values() for v in by_cell.values()]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    maps = [lambda v: 10.0 * v if v != 0 else 10.0]
    if low is not None:
        maps.append(lambda v: low - 5.0 - (hi - v))
    if high is not None:
        maps.append(lambda v: high + 5.0 + (v - lo) * 100.0 / span)
    for f in maps:
        yield {m: {c: f(float(v)) for c, v in by_cell.items()} for m, by_cell in paper.items()}


def non_finite(paper: Table) -> Iterator[dict]:
    """NaN for one method (each in turn), inf for one method, and NaN for every method; the
    other methods keep the paper's numbers."""
    for bad in (math.nan, math.inf):
        for m in paper:
            yield {k: {c: (bad if k == m else v) for c, v in by_cell.items()} for k, by_cell in paper.items()}
    yield {m: {c: math.nan for c in by_cell} for m, by_cell in paper.items()}


def missing_method(paper: Table) -> Iterator[tuple[str, dict]]:
    """``(method, answer)`` with that method left out (each in turn); the others keep the
    paper's numbers."""
    for m in paper:
        yield m, {k: dict(by_cell) for k, by_cell in paper.items() if k != m}


def fractions(paper: Table) -> dict:
    """Percentages given as fractions: every number / 100."""
    return {m: {c: float(v) / 100.0 for c, v in by_cell.items()} for m, by_cell in paper.items()}


def written_tally(tmp_path, experiment: str, rows: Sequence, paper_setting: str | None = None) -> dict:
    """The README's tally of the report written from ``rows`` (``write_report`` then
    ``claim_tally``), after asserting that :func:`passes` over the rows gives the same count:
    the test's verdicts and the published tally are one computation."""
    from structmc_papers import REGISTRY
    from structmc_papers._report import claim_tally, write_report

    report = write_report(
        tmp_path,
        experiment=REGISTRY.get(experiment),
        preset="full",
        config={},
        seed=0,
        comparisons=rows,
        numbers={},
        wall_time_s=0.0,
        **({"paper_setting": paper_setting} if paper_setting else {}),
    )
    t = claim_tally(report)
    assert passes(rows, paper_setting) == (t[REPRODUCED] + t[SMALLER_MARGIN], t["claims"])
    return t
