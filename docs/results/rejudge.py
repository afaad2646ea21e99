"""Re-judge every record under docs/results with today's verdict rules (issue 35 §7).

Each record's experiment rebuilds its rows from the numbers in its report.json
(``module.rejudge(report) -> list[Comparison]``); the rows and the "Paper vs ours" section of
report.md are replaced, everything else (numbers, details, figures) is kept. Prints the tally of
each record before and after. Run from the repository root::

    python docs/results/rejudge.py [RECORD_FOLDER ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from structmc_papers import get
from structmc_papers._report import claim_tally, rejudge_record

HERE = Path(__file__).parent


def _line(t: dict) -> str:
    return (
        f"{t['reproduced']}/{t['claims']} (run {t['run']}, not reproduced {t['not reproduced']}, not run "
        f"{t['not run']}, smaller margin {t['same ordering, smaller margin']}, tied {t['tied']}, checks {t['check']})"
    )


def main(folders: list[str]) -> int:
    records = [Path(f) for f in folders] or sorted(p.parent for p in HERE.glob("*/report.json"))
    for folder in records:
        report = json.loads((folder / "report.json").read_text())
        before = claim_tally(report)
        module = get(report["experiment"])
        after = claim_tally(rejudge_record(folder, module.rejudge(report)))
        if hasattr(module, "rerender_details"):  # records whose details tables carry verdicts too
            module.rerender_details(folder)
        print(f"{folder.name}: {_line(before)} -> {_line(after)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
