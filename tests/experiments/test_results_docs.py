"""The results pages say no more than the records (issue 35 §7): the README's summary,
docs/results/README.md and claims.md are what docs/results/render.py makes of the records; every
check says why it is not a claim; no record drops a claim from its denominator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
RECORDS = sorted(RESULTS.glob("*/report.json"))

pytestmark = pytest.mark.skipif(not RECORDS, reason="no records under docs/results (a checkout without docs)")


def test_the_results_pages_are_rendered_from_the_records():
    out = subprocess.run(
        [sys.executable, str(RESULTS / "render.py"), "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.parent.name)
def test_every_row_of_a_record_is_counted_or_says_why_not(path):
    from structmc_papers._report import claim_tally

    report = json.loads(path.read_text())
    for row in report["comparisons"]:
        verdict = str(row["verdict"])
        assert not verdict.startswith("not comparable"), (row["quantity"], verdict)  # nothing leaves the count
        if row.get("check"):
            assert str(row.get("check_reason", "")).strip(), f"a check without its reason: {row['quantity']!r}"
    t = claim_tally(report)
    assert t["claims"] == t["run"] + t["not run"]  # 0 only for mamba-structured, beyond the papers


def test_every_paper_experiment_is_in_the_readme_summary():
    from structmc_papers import REGISTRY

    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- results:summary:start -->", 1)[1].split("<!-- results:summary:end -->", 1)[0]
    for name in REGISTRY.choices():
        if REGISTRY.get(name).paper is not None:
            assert f"| `{name}" in block, name  # a record (NAME-PRESET) or the line of an experiment with none
