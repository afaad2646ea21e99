"""psgld-cnn (Table 3 of the pSGLD paper): tiny end to end, SGD as the noiseless update."""

from __future__ import annotations

import json

from structmc.experiments import get
from structmc.experiments._report import COMPARISON_FIELDS, REPORT_FIELDS

cnn = get("psgld-cnn")


def test_tiny_end_to_end(tmp_path):
    report = cnn.run("tiny", tmp_path, progress=False)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert set(REPORT_FIELDS) <= set(on_disk) and all(set(COMPARISON_FIELDS) <= set(c) for c in on_disk["comparisons"])
    res = report["numbers"]["results"]
    assert set(res) == {"pSGLD", "SGD"} and res["pSGLD"]["draws"] >= 1
    # SGD reports its last iterate, pSGLD its posterior predictive
    assert res["SGD"]["test_error_pct"] == res["SGD"]["last_draw_error_pct"][-1]
    assert any("2ε/N" in s and "temperature=0" in s for s in report["step_size_mapping"])
    assert report["reduced"] and (tmp_path / "learning_curves.png").exists()
