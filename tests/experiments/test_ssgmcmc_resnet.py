"""ssgmcmc-resnet (Tables 2 and 5, FMNIST): tiny end to end; the methods' energies."""

from __future__ import annotations

import json

from structmc.experiments import get
from structmc.experiments._report import COMPARISON_FIELDS, REPORT_FIELDS
from structmc.structured import StructuredEnergy

rn = get("ssgmcmc-resnet")


def test_methods_build_the_papers_structures():
    cfg = rn.PRESETS["tiny"]
    base = rn.make_energy(cfg, 100)
    assert not any(True for _ in base.module.buffers())  # no normalisation layers: nothing unsampled
    s4 = rn.make_energy_for("S-pSGLD_4", None, base, cfg, 10)
    assert isinstance(s4, StructuredEnergy) and s4.partition.num_groups == 4 and s4.mask is None
    assert s4.partition.group_ids[:9].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0]  # ordered: i mod M
    sd = rn.make_energy_for("Sd-pSGLD", 0.5, base, cfg, 10)
    assert sd.partition.num_groups == base.space.dim and sd.num_copies == 2 and sd.mask.rho == 0.5
    assert rn.make_energy_for("pSGLD", None, base, cfg, 10) is base


def test_tiny_end_to_end(tmp_path):
    report = rn.run("tiny", tmp_path, progress=False)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert set(REPORT_FIELDS) <= set(on_disk) and all(set(COMPARISON_FIELDS) <= set(c) for c in on_disk["comparisons"])
    res = report["numbers"]["results"]
    assert set(res) == {"pSGLD", "S-pSGLD_2", "Sd-pSGLD rho=0.5"}
    assert res["S-pSGLD_2"]["evaluations_per_step"] == 2 and res["Sd-pSGLD rho=0.5"]["evaluations_per_step"] == 2
    assert all(r["num_draws"] >= 1 and 0 <= r["accuracy"] <= 1 for r in res.values())
    assert report["reduced"] and (tmp_path / rn.FIGURE).exists()
    mixing = [c for c in report["comparisons"] if c["quantity"].startswith(("IAC", "ESS", "Table 2"))]
    assert mixing and all(c["verdict"].startswith("not comparable") for c in mixing)  # a 6-iteration trace
