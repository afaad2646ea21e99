"""Adversarial answers for the verdict rules (issue 26 §1): a rule that a constant, the paper's
numbers shuffled across methods, or every ordering reversed can pass does not test the paper's
claim. Each experiment's test builds its rows from these answers and requires that most of its
rows come out not reproduced; the paper's own numbers must pass.

The answers are nested dicts ``{method: {cell: value}}`` (a cell: a width, data set, batch size,
column...), the shape of the papers' tables."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from structmc.experiments._report import CHECK, REPRODUCED, SMALLER_MARGIN

Table = Mapping[str, Mapping]


def passes(rows: Sequence) -> tuple[int, int]:
    """``(passed, counted)`` over the paper's claims: a row passes when its verdict is
    "reproduced" or "same ordering, smaller margin"; checks are not counted."""
    claims = [r for r in rows if not (getattr(r, "check", False) or str(_verdict(r)).startswith(CHECK))]
    return sum(str(_verdict(r)).startswith((REPRODUCED, SMALLER_MARGIN)) for r in claims), len(claims)


def _verdict(row) -> str:
    return row["verdict"] if isinstance(row, Mapping) else row.verdict


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
