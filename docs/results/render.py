"""Render the results tables from the records under docs/results (issue 35 §7).

Writes, between the ``<!-- results:... -->`` markers:

* README.md (repository root): the summary table (claims in the paper, run, reproduced, not
  reproduced, not run) of every record, and of every registered paper experiment with no
  record (its claims from ``module.claims_not_run()``, all not run);
* docs/results/README.md: the full table (smaller margin, tied, checks, tally setting, work
  time, date) and every counted claim that is not reproduced;
* docs/results/claims.md: every claim of the papers, one row each.

``python docs/results/render.py --check`` exits 1 when a file differs from what the records give
(the test suite runs it). Run from the repository root.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from structmc_papers import REGISTRY
from structmc_papers._report import claims_table, results_table, summary_table, unreproduced_table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def reports() -> list[dict]:
    """Every record's report, with ``record`` its folder's name (two records of one experiment,
    e.g. gibbs-mnist on MNIST and on Fashion-MNIST, are told apart by it)."""
    return [{**json.loads(p.read_text()), "record": p.parent.name} for p in sorted(HERE.glob("*/report.json"))]


def missing(found: list[dict]) -> dict[str, list]:
    """The claims of every registered paper experiment with no record, all "not run"."""
    have = {r["experiment"] for r in found}
    out: dict[str, list] = {}
    for name in REGISTRY.choices():
        exp = REGISTRY.get(name)
        if exp.paper is None or name in have:
            continue
        module = exp.load()
        if not hasattr(module, "claims_not_run"):
            raise SystemExit(f"{name} has no record and no claims_not_run(): its claims would leave the tally")
        out[name] = module.claims_not_run()
    return out


def blocks() -> dict[str, str]:
    found = reports()
    gone = missing(found)
    return {
        "summary": summary_table(found, gone),
        "full": results_table(found, gone)
        + "\n\nClaims not reproduced, reproduced with a smaller margin, tied, or not run:\n\n"
        + unreproduced_table(found),
        "claims": claims_table(found),
    }


TARGETS = {ROOT / "README.md": "summary", HERE / "README.md": "full", HERE / "claims.md": "claims"}


def render(text: str, name: str, body: str) -> str:
    start, end = f"<!-- results:{name}:start -->", f"<!-- results:{name}:end -->"
    if start not in text or end not in text:
        raise SystemExit(f"markers {start} ... {end} missing")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    made = blocks()
    stale = []
    for path, name in TARGETS.items():
        old = path.read_text()
        new = render(old, name, made[name])
        if new != old:
            stale.append(str(path.relative_to(ROOT)))
            if not check:
                path.write_text(new)
    if check and stale:
        print("out of date with the records (run python docs/results/render.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
