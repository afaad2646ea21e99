"""gibbs-xor (Papamarkou 2023, noisy XOR): the tiny preset runs end to end on the simulator,
writes its report and figures, gives every paper row a verdict; the registry lists it."""

import json

import pytest

import structmc.data as D
import structmc.experiments as E
from structmc.experiments import gibbs_xor as G

PAPER_ROWS = {
    "exact_node1": 0.6383,
    "exact_node13": 0.2072,
    "approx_layer1": 0.5631,
    "approx_layer2": 0.3618,
    "approx_layer3": 0.2656,
    "acc_approx_deep": 0.9888,
    "acc_approx_shallow": 0.8675,
    "acc_exact_deep": 0.8692,
    "acc_exact_deep_5": 0.9538,
    "acc_exact_deep_20": 1.0,
    "chains_3": 1.1,
    "chains_4": 2.3,
}
ORDERINGS = {
    "approx_above_exact",
    "approx_less_volatile",
    "depth_layers",
    "depth_exact",
    "deep_above_shallow",
    "approx_above_exact_acc",
    "acc_iqr_exact",
    "acc_iqr_depth",
    "runtime",
}


def test_tiny_preset_writes_report_with_verdicts(tmp_path, no_files, common_report):
    out = tmp_path / "run"
    report = G.run("tiny", out, progress=False)
    assert report["numbers"]["data"]["source"] == "simulated"
    for name in ("report.json", "report.md", *G.FIGURES.values()):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    top = json.loads((out / "report.json").read_text())
    comps = common_report(top, "tiny")
    assert top["experiment"] == "gibbs-xor" and top["reduced"] is True and any("simulated" in n for n in top["notes"])
    assert top["config"]["num_steps"] == G.PRESETS["tiny"].num_steps and top["seed"] == 0
    on_disk = top["numbers"]  # the old report: every number
    assert on_disk["wall_seconds"] > 0 and on_disk["data"]["source"] == "simulated"

    rows = {r["key"]: r for r in on_disk["rows"]}
    assert set(PAPER_ROWS) | ORDERINGS == set(rows)
    for key, value in PAPER_ROWS.items():
        assert rows[key]["paper"] == pytest.approx(value)
    md = (out / "report.md").read_text()
    assert len(comps) == len(rows)  # one Comparison per old row
    for r in rows.values():
        assert r["verdict"].startswith(("reproduced", "not reproduced", "not comparable")) and r["rule"]
        assert r["quantity"] in md
        c = comps[f"{r['quantity']} [{r['source']}]"]
        assert c["verdict"] == r["verdict"]
        if r["kind"] == "value" and r["ours"] is not None:  # the old rule: |ours - paper| <= tol
            assert c["verdict"].startswith("reproduced") == (abs(r["ours"] - r["paper"]) <= r["tol"] + 1e-12)
    assert "Reduced from the paper" in md and "Paper vs ours" in md and "simulated" in md

    settings = on_disk["settings"]
    assert set(settings) == {"approx-deep", "exact-deep", "approx-shallow", "exact-shallow"}
    for name, s in settings.items():
        nodes = 13 if s["model"] == "mlp_xor_deep" else 3
        chains = G.PRESETS["tiny"].exact_pool_chains if name == "exact-deep" else G.PRESETS["tiny"].num_chains
        assert len(s["node_acceptance"]) == chains and all(len(c) == nodes for c in s["node_acceptance"])
        for rate in (
            *sum(s["node_acceptance"], []),
            *sum(s["layer_acceptance"], []),
            *s["chain_acceptance"],
            *s["chain_min_block_acceptance"],
        ):
            assert 0.0 <= rate <= 1.0
        assert all(0.0 <= a <= 1.0 for a in s["accuracy"])
    assert settings["exact-deep"]["proposal_var"] == 0.001 and settings["approx-deep"]["batch_size"] == 100
    assert settings["exact-deep"]["batch_size"] == on_disk["num_train"] == 5000


def test_files_required_but_missing_raises(no_files):
    cfg = G.Config(data="files")
    with pytest.raises(D.DataError):
        G.load_data(cfg, no_files)


def test_resume_reads_finished_chains_back(tmp_path, no_files):
    cfg = G.Config(
        num_steps=60,
        burn_in=10,
        predict_last=10,
        num_chains=2,
        exact_pool_chains=2,
        exact_shallow=False,
        checkpoint_every=20,
    )
    first = G.run(cfg, tmp_path, progress=False)["numbers"]
    again = G.run(cfg, tmp_path, progress=False, resume=True)["numbers"]
    for name, s in first["settings"].items():
        assert again["settings"][name]["node_acceptance"] == s["node_acceptance"]
        assert again["settings"][name]["accuracy"] == s["accuracy"]


def test_registry_lists_gibbs_xor():
    assert "gibbs-xor" in E.REGISTRY.names()
    exp = E.REGISTRY.get("gibbs-xor")
    assert exp.paper is E.PAPERS["blocked-gibbs"] and E.get("gibbs-xor") is G
    assert {"tiny", "quick", "full"} <= set(exp.presets)
    assert all(d in D.DATASETS for d in exp.datasets)
    assert exp.published["accuracy_median"]["approx deep"] == 0.9888
