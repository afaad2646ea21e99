"""gibbs-xor (Papamarkou 2023, noisy XOR): the tiny preset runs end to end on the simulator,
writes its report and figures, gives every paper row a verdict; the registry lists it."""

import json
import math

import pytest
import torch

import structmc.data as D
import structmc_papers as E
from structmc_papers import gibbs_xor as G
from structmc_papers._report import work_seconds

from .adversarial import (
    absurd,
    at_most_a_quarter,
    fractions,
    missing_method,
    non_finite,
    offsets,
    passes,
    reversed_ranks,
    shuffled,
)

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
EVIDENCE = {  # correct kernel vs the reference code's defect: checks
    "defect_depth_fall",
    "defect_layers_paper",
    "defect_exact_output",
    "defect_exact_paper",
}
# Observation 2 (a weak claim), Sect. 4.2 on the same chains (a claim) and node blocks beside it (a check)
WIDTH = {"width_no_fall", "width_blocks", "width_nbg_output"}


def test_tiny_preset_writes_report_with_verdicts(tmp_path, no_files, common_report):
    out = tmp_path / "run"
    report = G.run("tiny", out, progress=False)
    assert report["numbers"]["data"]["source"] == "simulated"
    for name in ("report.json", "report.md", *G.FIGURES.values()):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    top = json.loads((out / "report.json").read_text())
    comps = common_report(top, "tiny")
    assert top["experiment"] == "gibbs-xor" and top["reduced"] is True and any("simulated" in n for n in top["notes"])
    assert "simulator" in top["stand_in"]  # issue 35 §5: the tiny preset on the simulator says so
    assert top["config"]["num_steps"] == G.PRESETS["tiny"].num_steps and top["seed"] == 0
    on_disk = top["numbers"]  # the old report: every number
    assert on_disk["wall_seconds"] > 0 and on_disk["data"]["source"] == "simulated"

    rows = {r["key"]: r for r in on_disk["rows"]}
    assert set(PAPER_ROWS) | ORDERINGS | EVIDENCE | WIDTH == set(rows)
    assert not rows["width_no_fall"].get("check") and rows["width_nbg_output"]["check"]
    assert rows["width_no_fall"]["weak"] and not rows["width_blocks"].get("check")
    assert all(rows[k]["check_reason"] for k in EVIDENCE | {"width_nbg_output"})
    width = on_disk["width"]
    assert width["widths"] == [2, 5] and width["fnbg"]["num_blocks"] == [3, 7] and width["nbg"]["num_blocks"] == [3, 6]
    assert all(len(r) == 3 and len(r[0]) == 2 for r in width["fnbg"]["layer_acceptance"])
    assert "Observation 2: acceptance against width" in (out / "report.md").read_text()
    assert {k for k, r in rows.items() if r.get("evidence")} == EVIDENCE
    assert all(rows[k]["check"] and rows[k]["rule"] for k in EVIDENCE)  # ours: outside the tally
    for key, value in PAPER_ROWS.items():
        assert rows[key]["paper"] == pytest.approx(value)
    md = (out / "report.md").read_text()
    assert len(comps) == len(rows)  # one Comparison per old row
    for r in rows.values():
        prefix = "check (" if r.get("check") else ""
        assert r["verdict"].startswith(tuple(prefix + v for v in ("reproduced", "not reproduced", "not run")))
        assert r["rule"]
        assert r["quantity"] in md
        c = comps[f"{r['quantity']} [{r['source']}]"]
        assert c["verdict"] == r["verdict"]
        if r["kind"] == "value" and "se" in r:  # |ours - paper| <= 3 combined SEs (issue 35 §1)
            allowed = r["se"]["k"] * math.hypot(r["se"]["ours"], r["se"]["paper"])
            assert c["verdict"].startswith("reproduced") == (abs(r["ours"] - r["paper"]) <= allowed * (1 + 1e-9))
    assert "Reduced from the paper" in md and "Paper vs ours" in md and "simulated" in md

    settings = on_disk["settings"]
    assert set(settings) == {
        "approx-deep",
        "exact-deep",
        "approx-shallow",
        "exact-shallow",
        "approx-deep-defect",
        "exact-deep-defect",
    }
    # the evidence run: approx-deep's chains (same seed: initial points, batches, random numbers) with the defect
    ok, defect = settings["approx-deep"], settings["approx-deep-defect"]
    assert defect["reference_defect"] and not ok["reference_defect"] and defect["seed"] == ok["seed"]
    assert defect["node_acceptance"] != ok["node_acceptance"]  # the switch changes the chains
    assert "Evidence: where the paper's fall of acceptance with depth comes from" in md
    # the exact evidence run: scenario 2's initial points (the pool's first chains), with the defect
    exact, exact_defect = settings["exact-deep"], settings["exact-deep-defect"]
    assert exact_defect["reference_defect"] and exact_defect["seed"] == exact["seed"]
    assert exact_defect["num_chains"] == G.PRESETS["tiny"].num_chains < exact["num_chains"]
    assert "Evidence: exact NBG's node rates (Fig. 3a) with the reference code's defect" in md
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


def _layers(means, spread, chains=10):
    """Per-chain layer acceptance ``[chains, 7]``: ``means`` per layer, chain k offset by
    ``spread``·s_k with s evenly in [-1, 1] (layers 1 and 3 in opposite directions, so the fall
    from layer 1 to 3 varies by chain: 2·spread·s_k about its mean)."""
    s = torch.linspace(-1, 1, chains, dtype=torch.float64)
    signs = torch.tensor([1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    return (torch.tensor(means, dtype=torch.float64) + spread * s[:, None] * signs).clamp(0, 1).tolist()


def test_evidence_rows_tell_the_defect_from_the_correct_kernel():
    """The evidence rows' rules on numbers: the quick run's (5,500 sweeps: the defect's fall, rates
    still above the paper's), the long emulation's (110,000 sweeps: the defect at the paper's
    rates), and a switch that does nothing (both samplers alike): no row may pass then."""
    cfg = G.Config()
    correct_quick = [0.890, 0.888, 0.886, 0.879, 0.870, 0.847, 0.648]
    defect_quick = [0.849, 0.797, 0.766, 0.746, 0.710, 0.648, 0.474]
    correct_full = [0.644, 0.613, 0.640, 0.690, 0.754, 0.811, 0.796]
    defect_full = [0.572, 0.383, 0.294, 0.257, 0.241, 0.237, 0.218]

    def verdicts(correct, defect, spread=0.02, chains=10):
        rows = G._defect_rows(
            {"layer_acceptance": _layers(correct, spread, chains)},
            {"layer_acceptance": _layers(defect, spread, chains)},
            cfg,
        )
        assert all(r["check"] and r["evidence"] for r in rows)
        return {r["key"]: r["verdict"] for r in rows}

    assert verdicts(correct_quick, defect_quick) == {"defect_depth_fall": "agrees", "defect_layers_paper": "differs"}
    assert verdicts(correct_full, defect_full) == {"defect_depth_fall": "agrees", "defect_layers_paper": "agrees"}
    for same in (correct_quick, correct_full, defect_full):  # the switch does nothing: nothing passes
        assert set(verdicts(same, same).values()) == {"differs"}
    # a fall within the chains' noise is not evidence (2 SE); one chain each: no standard error
    assert verdicts(correct_quick, defect_quick, spread=0.25)["defect_depth_fall"] == "differs"
    assert verdicts(correct_quick, defect_quick, chains=1)["defect_depth_fall"] == "n/a"
    # the defect falling less than the correct kernel is not evidence either
    assert verdicts(defect_full, correct_full)["defect_depth_fall"] == "differs"


def test_files_required_but_missing_raises(no_files, tmp_path):
    cfg = G.Config(data="files")
    with pytest.raises(D.DataError):
        G.load_data(cfg, no_files)
    # issue 35 §5: a named preset but tiny needs the published files, refused before any chain
    for preset in ("quick", "full"):
        with pytest.raises(D.DataError):
            G.run(preset, tmp_path / preset, progress=False)
        assert not (tmp_path / preset / "chains").exists()


def test_resume_reads_finished_chains_back(tmp_path, no_files):
    cfg = G.Config(
        num_steps=60,
        burn_in=10,
        predict_last=10,
        num_chains=2,
        exact_pool_chains=2,
        exact_shallow=False,
        checkpoint_every=20,
        width_run=False,
    )
    first_report = G.run(cfg, tmp_path, progress=False)
    again_report = G.run(cfg, tmp_path, progress=False, resume=True)
    first, again = first_report["numbers"], again_report["numbers"]
    for name, s in first["settings"].items():
        assert again["settings"][name]["node_acceptance"] == s["node_acceptance"]
        assert again["settings"][name]["accuracy"] == s["accuracy"]
    # the work of a resumed run counts the sampling read back from the first sitting's chains
    assert first_report["compute_time_s"] is None
    sampled = sum(s["sampling_seconds"] for s in first["settings"].values())
    read_back = sum(s["wall_seconds"] for s in again["settings"].values())  # this call's time in sample()
    earlier = again_report["compute_time_s"] - again_report["wall_time_s"]
    assert earlier >= sampled - read_back - 1e-9 and earlier > 0.5 * sampled
    assert work_seconds(again_report) == again_report["compute_time_s"]


def test_registry_lists_gibbs_xor():
    assert "gibbs-xor" in E.REGISTRY.names()
    exp = E.REGISTRY.get("gibbs-xor")
    assert exp.paper is E.PAPERS["blocked-gibbs"] and E.get("gibbs-xor") is G
    assert {"tiny", "quick", "full"} <= set(exp.presets)
    assert all(d in D.DATASETS for d in exp.datasets)
    assert exp.published["accuracy_median"]["approx deep"] == 0.9888


# -- verdict rules (issue 26) --------------------------------------------------------------------
# The paper's numbers by figure, {method: {cell: value}} with the methods each figure compares; cells
# marked * are not in our copy of the text and illustrate its words (Fig. 3a: approximate NBG's medians
# above exact NBG's and its spread smaller; Fig. 3b/7: approximate and deep less volatile; Fig. 3c:
# approximate faster).
XOR = {
    "fig3a": {  # acceptance per node: exact NBG medians 63.83 %, 20.72 %
        "approx": {"node 1": 0.75, "node 13": 0.45, "IQR": 0.05},  # *
        "exact": {"node 1": 0.6383, "node 13": 0.2072, "IQR": 0.20},  # IQR *
    },
    "fig4b": {f"layer {j + 1}": {"approx": v} for j, v in enumerate((0.5631, 0.3618, 0.2656))},
    "accuracy": {  # medians (Fig. 3b, 7); IQRs *
        "approx deep": {"median": 0.9888, "IQR": 0.01},
        "exact deep": {"median": 0.8692, "IQR": 0.12},
        "approx shallow": {"median": 0.8675, "IQR": 0.10},
        "exact >= 5 %": {"median": 0.9538, "IQR": 0.04},  # IQR *
        "exact >= 20 %": {"median": 1.0},
    },
    "chains": {"scenario 3": {"run per retained": 1.1}, "scenario 4": {"run per retained": 2.3}},
    "runtime": {"approx": {"s per chain": 1.0}, "exact": {"s per chain": 5.0}},  # *
    # Observation 2, width -> layer: acceptance does not fall with width (no numbers in the paper: *, flat to rising)
    "width": {
        2: {"layer 1": 0.75, "output": 0.65},
        5: {"layer 1": 0.80, "output": 0.70},
        11: {"layer 1": 0.85, "output": 0.76},
        23: {"layer 1": 0.89, "output": 0.79},
    },
}


def _xor_numbers(t, chains=10, pool=30):
    """``(res, scen)`` as gibbs_xor._run_setting / _scenarios give them, with the medians, IQRs,
    layer means, chain counts and times of the answer ``t`` (chain k of a setting at
    median + IQR·s_k, s evenly in [-1, 1]: its quartiles at ±IQR/2)."""
    s = torch.linspace(-1, 1, chains, dtype=torch.float64)
    f3, acc = t["fig3a"], t["accuracy"]

    def nodes(m):  # 13 node medians from node 1 to node 13
        return torch.linspace(m["node 1"], m["node 13"], 13, dtype=torch.float64)

    def per_chain(m):
        return (m["median"] + m.get("IQR", 0.0) * s).tolist()

    a_med, e_med = nodes(f3["approx"]), nodes(f3["exact"])
    iqr = f3["approx"]["IQR"]
    exact_nodes = torch.cat([e_med + f3["exact"]["IQR"] * s[:, None], e_med.expand(pool - chains, 13)])
    layers = [t["fig4b"][f"layer {j}"]["approx"] for j in (1, 2, 3)]
    res = {
        "approx-deep": {
            "node_summary": {
                "median": a_med.tolist(),
                "q25": (a_med - iqr / 2).tolist(),
                "q75": (a_med + iqr / 2).tolist(),
            },
            "layer_summary": {"mean": layers + [layers[-1]] * 4},
            # chain k at the layer mean + 0.02 s_k (the paper gives no spread: an illustration)
            "layer_acceptance": (torch.tensor(layers + [layers[-1]] * 4, dtype=torch.float64) + 0.02 * s[:, None])
            .clamp(max=1.0)
            .tolist(),
            "accuracy": per_chain(acc["approx deep"]),
            "accuracy_median": acc["approx deep"]["median"],
            "seconds_per_chain": t["runtime"]["approx"]["s per chain"],
        },
        "exact-deep": {
            "node_acceptance": exact_nodes.tolist(),
            "num_chains": pool,
            "seconds_per_chain": t["runtime"]["exact"]["s per chain"],
        },
        "approx-shallow": {
            "accuracy": per_chain(acc["approx shallow"]),
            "accuracy_median": acc["approx shallow"]["median"],
        },
    }
    scen = {"scenario 2": {"retained": list(range(chains)), "accuracy": per_chain(acc["exact deep"])}}
    scen["scenario 2"]["accuracy_median"] = acc["exact deep"]["median"]
    for k, (name, bound) in enumerate((("exact >= 5 %", 0.05), ("exact >= 20 %", 0.2))):
        ratio = t["chains"][f"scenario {3 + k}"]["run per retained"]
        run = round(ratio * chains) if math.isfinite(ratio) else ratio  # NaN / inf: the run produced it
        scen[f"scenario {3 + k}"] = {
            "bound": bound,
            "retained": list(range(chains)),
            "chains_run": run,
            "accuracy": per_chain(acc[name]),
            "accuracy_median": acc[name]["median"],
        }
    return res, scen


def _width_numbers(t, chains=10, spread=0.02):
    """The width study (gibbs_xor._run_width) for the answer ``t["width"]``: chain k of a width at
    mean + spread·s_k (s evenly in [-1, 1]); node blocks: the same, output 5 pp lower per width."""
    s = torch.linspace(-1, 1, chains, dtype=torch.float64)
    ws = sorted(t["width"])

    def per_chain(means):
        return (torch.tensor(means, dtype=torch.float64) + spread * s[:, None]).tolist()

    fn = [per_chain([t["width"][w]["layer 1"], t["width"][w]["output"]]) for w in ws]
    nb = [per_chain([t["width"][w]["layer 1"], t["width"][w]["output"] - 0.05 * k]) for k, w in enumerate(ws)]
    return {"widths": ws, "fnbg": {"layer_acceptance": fn}, "nbg": {"layer_acceptance": nb}}


def _xor_passes(t):
    return passes(G.comparisons(G.Config(), *_xor_numbers(t), width=_width_numbers(t)))


def _each(t, f):
    return {fig: f(table) for fig, table in t.items()}


def test_wrong_answers_do_not_pass_the_verdicts():
    """Adversarial numbers (issue 26 §1), shuffled and reversed within each figure across the methods
    it compares: the paper's answer passes all 23 claim rows (12 values, 9 orderings, Observation 2, Sect. 4.2); each
    constant at most 3 (a constant does not fall with width: Observation 2 is a weak claim of no change),
    shuffled at most a quarter (Fig. 3b's exact 86.92 % and Fig. 7's shallow 86.75 % are 0.17 pp apart, closer
    than any tolerance can tell; "node 1 above node 13" survives a swap of methods; the chains-run counts
    are within each other's negative-binomial noise), reversed at most a quarter (a middle method keeps
    its own number). Widths shuffled (each width the next one's rates) or
    reversed (acceptance falling with width) fail Observation 2."""
    from structmc_papers._report import smallest_gap

    assert _xor_passes(XOR) == (23, 23)
    pooled = sorted(v for table in XOR.values() for by_c in table.values() for v in by_c.values())
    for q in (0.0, 0.25, 0.5, 0.75, 1.0):
        v = pooled[round(q * (len(pooled) - 1))]
        const = _each(XOR, lambda table, v=v: {m: {c: v for c in by_c} for m, by_c in table.items()})
        assert _xor_passes(const)[0] <= 3, v
    # issue 35: the chains-run rows are judged on the negative-binomial noise of 11 and 23 chains run for 10
    # (SE 0.11 and 0.55 per retained chain), so one scenario's count passes as the other's; at most a quarter
    for answer in (_each(XOR, shuffled), _each(XOR, reversed_ranks)):
        at_most_a_quarter(G.comparisons(G.Config(), *_xor_numbers(answer), width=_width_numbers(answer)))
    # each tolerance below the smallest gap between the paper's numbers it judges
    cfg = G.Config()
    assert cfg.tol_rate < smallest_gap(G.PAPER_RATES) == pytest.approx(0.0584)
    assert cfg.tol_accuracy < smallest_gap(G.PAPER_ACCURACIES_FIG3B) == pytest.approx(0.0112)
    assert cfg.tol_chains_rel * 2.3 < 2.3 - 1.1
    for bad in ({"tol_rate": 0.10}, {"tol_accuracy": 0.05}, {"tol_chains_rel": 0.6}, {"tol_rate": 0.0}):
        with pytest.raises(ValueError, match=f"Config.{next(iter(bad))} must be > 0"):
            G.Config(**bad)


def _width_verdict(t, **kw):
    rows = {r["key"]: r for r in G._width_rows(_width_numbers({"width": t}, **kw), G.Config())}
    return rows["width_no_fall"]["verdict"], rows["width_nbg_output"]["verdict"]


def test_width_rule_fails_a_fall_and_needs_power():
    """Observation 2's rule on numbers: flat or rising acceptance passes; a fall between consecutive
    widths of Fig. 4b's smallest depth step (9.62 pp), or a steady 3 pp fall per width with chains
    tight enough to see it, fails; chains too spread to see a depth-sized fall (2 SE >= 9.62 pp) or
    a single chain are "n/a" (not comparable), never "agrees"."""
    flat = {w: {"layer 1": 0.8, "output": 0.7} for w in (2, 5, 11, 23)}
    assert _width_verdict(flat) == ("agrees", "agrees")  # node blocks: output 5 pp lower per width, a fall
    depth = {**flat, 11: {"layer 1": 0.8 - 0.0962, "output": 0.7}, 23: {"layer 1": 0.8 - 0.0962, "output": 0.7}}
    assert _width_verdict(depth)[0] == "differs"
    steady = {w: {"layer 1": 0.8 - 0.03 * k, "output": 0.7} for k, w in enumerate((2, 5, 11, 23))}
    assert _width_verdict(steady, spread=0.02)[0] == "differs"
    assert _width_verdict(depth, spread=0.25)[0] == "n/a"  # 2 SE of the difference >= 9.62 pp
    assert _width_verdict(flat, chains=1)[0] == "n/a"
    # the quick preset's width study (published files, 10 chains x 1,100 sweeps): layer 1 and output rise
    quick = {
        2: {"layer 1": 0.756, "output": 0.656},
        5: {"layer 1": 0.804, "output": 0.708},
        11: {"layer 1": 0.856, "output": 0.769},
        23: {"layer 1": 0.889, "output": 0.786},
    }
    assert _width_verdict(quick)[0] == "agrees"
    # the widths must keep every block at 3 parameters, the power bar at most Fig. 4b's step
    for bad in ({"widths": (2, 4)}, {"widths": (5, 2)}, {"widths": (2,)}, {"width_power": 0.2}, {"width_power": 0}):
        with pytest.raises(ValueError, match=f"Config.{next(iter(bad))} must"):
            G.Config(**bad)
    space = G.energy_for("mlp_xor", hidden=(11,)).space
    fine, nodes = G.width_partitions(space, 11)
    assert fine.sizes().eq(3).all() and fine.num_groups == 11 + 4 and nodes.num_groups == 12


def test_exact_evidence_rows_tell_the_defect_from_the_correct_kernel():
    """The exact evidence rows' rules on numbers: the correct kernel's node rates of the full run
    (node 1 76.8 %, node 13 76.9 %) against the defect's (75.6 %, 13.3 %: the output node's gap
    shows, its level is 7.4 pp from the paper's) and against the paper's own medians."""

    def nodes(first, last, spread=0.02, chains=10):
        s = torch.linspace(-1, 1, chains, dtype=torch.float64)[:, None]
        base = torch.linspace(first, last, 13, dtype=torch.float64)
        return (base + spread * s).clamp(0, 1)

    def verdicts(correct, defect):
        rows = G._exact_defect_rows(correct, {"node_acceptance": defect.tolist()}, G.PRESETS["full"])
        assert all(r["check"] and r["evidence_of"] == "exact-deep" for r in rows)
        return {r["key"]: r["verdict"] for r in rows}

    correct, ours, paper = nodes(0.768, 0.769), nodes(0.756, 0.133), nodes(0.6383, 0.2072)
    assert verdicts(correct, ours) == {"defect_exact_output": "agrees", "defect_exact_paper": "differs"}
    assert verdicts(correct, paper) == {"defect_exact_output": "agrees", "defect_exact_paper": "agrees"}
    # the switch does nothing, or the defect narrows the gap: no evidence; the paper's rates for both: not both
    assert verdicts(correct, correct) == {"defect_exact_output": "differs", "defect_exact_paper": "differs"}
    assert verdicts(ours, correct)["defect_exact_output"] == "differs"
    assert verdicts(paper, paper)["defect_exact_paper"] == "differs"
    assert verdicts(correct[:1], ours[:1])["defect_exact_output"] == "n/a"


# -- issue 35 §4: the five families, through this experiment's own comparisons() -------------------------------
#: (figure, method, cell) of XOR -> the key of the value row that judges it
VALUE_CELLS = {
    ("fig3a", "exact", "node 1"): "exact_node1",
    ("fig3a", "exact", "node 13"): "exact_node13",
    **{("fig4b", f"layer {j}", "approx"): f"approx_layer{j}" for j in (1, 2, 3)},
    ("accuracy", "approx deep", "median"): "acc_approx_deep",
    ("accuracy", "approx shallow", "median"): "acc_approx_shallow",
    ("accuracy", "exact deep", "median"): "acc_exact_deep",
    ("accuracy", "exact >= 5 %", "median"): "acc_exact_deep_5",
    ("accuracy", "exact >= 20 %", "median"): "acc_exact_deep_20",
    ("chains", "scenario 3", "run per retained"): "chains_3",
    ("chains", "scenario 4", "run per retained"): "chains_4",
}


def _xor_rows(t, cfg=None, drop=()):
    res, scen = _xor_numbers(t)
    for name in drop:
        res.pop(name, None)
    if "exact-deep" in drop:
        scen = {}
    width = None if "width" in drop else _width_numbers(t)
    return G._rows(res, scen, cfg or G.Config(), width)


def _allowed():
    """Each value row's allowed difference on the paper's answer: 3 combined SEs (the issue's k = 3,
    fixed here: a rule loosened in the module lets these offsets pass, and the test fails)."""
    return {
        r["key"]: 3.0 * math.hypot(r["se"]["ours"], r["se"]["paper"]) for r in _xor_rows(XOR) if r["kind"] == "value"
    }


def _family(t, f):
    """The answer ``f`` gives figure by figure (each figure's own methods)."""
    return {fig: f(table) for fig, table in t.items()}


def test_value_rows_are_claims_judged_on_the_noise_over_chains():
    """Issue 35 §1: each published value (12) is a claim judged on the noise over chains, not a
    fixed tolerance; its rule states its numbers. The paper's answer passes them all."""
    rows = _xor_rows(XOR)
    values = [r for r in rows if r["kind"] == "value"]
    assert {r["key"] for r in values} == set(PAPER_ROWS)
    assert all("se" in r and not r.get("check") and "SE" in r["rule"] for r in values)
    assert all(G.row_comparison(r).verdict == "reproduced" for r in values)
    # a check is never a claim of the paper, and says why
    checks = [r for r in rows if r.get("check")]
    assert {r["key"] for r in checks} == {"width_nbg_output"}  # the evidence runs are not in these numbers
    assert all(r["check_reason"] for r in checks)


def test_offsets_beyond_each_value_rule_fail():
    """Offsets just beyond each value row's allowed difference (1.5 x), all up, all down,
    alternating by method: at most a quarter of the value rows pass (an offset shifts every number
    alike, so the orderings between methods, claims of their own, may still hold); at k = 30 (a
    loosened rule) the offsets pass."""
    allowed = _allowed()

    def beyond(fig):
        return lambda m, c, v: allowed.get(VALUE_CELLS.get((fig, m, c)), 0.0)

    for k in range(3):
        answer = {fig: list(offsets(table, beyond(fig)))[k] for fig, table in XOR.items()}
        values = [G.row_comparison(r) for r in _xor_rows(answer) if r["kind"] == "value"]
        at_most_a_quarter(values, f"offsets {k}")
    loose = [G.row_comparison({**r, "se": {**r["se"], "k": 30}}) for r in _xor_rows(answer) if "se" in r]
    assert sum(c.verdict.startswith("reproduced") for c in loose) > len(loose) / 4


def test_absurd_values_fractions_and_nan_fail():
    """Right order with absurd values (every number x 10, below 0, above 1), accuracies and rates as
    fractions of a percent, NaN or inf in every method: at most a quarter of the 23 claims pass."""
    for answer in zip(*(list(absurd(table, low=0.0, high=1.0)) for table in XOR.values())):
        t = dict(zip(XOR, answer))
        at_most_a_quarter([G.row_comparison(r) for r in _xor_rows(t)], "absurd")
    at_most_a_quarter([G.row_comparison(r) for r in _xor_rows(_family(XOR, fractions))], "fractions")
    for bad in (math.nan, math.inf):
        t = {fig: {m: {c: bad for c in by_c} for m, by_c in table.items()} for fig, table in XOR.items()}
        rows = [G.row_comparison(r) for r in _xor_rows(t)]
        at_most_a_quarter(rows, f"{bad} everywhere")
        assert passes(rows)[1] == 23


def test_nan_in_one_method_fails_its_rows():
    """NaN or inf in one method of a figure (the others keep the paper's numbers): every value row of
    that method is "not reproduced: the run produced nan/inf", never dropped nor "not run"."""
    allowed_keys = {(fig, m): k for (fig, m, _c), k in VALUE_CELLS.items()}
    for fig, table in XOR.items():
        for answer in non_finite(table):
            bad = [m for m, by_c in answer.items() if any(not math.isfinite(v) for v in by_c.values())]
            rows = {r["key"]: G.row_comparison(r) for r in _xor_rows({**XOR, fig: answer})}
            assert passes(list(rows.values()))[1] == 23
            for m in bad:
                key = allowed_keys.get((fig, m))
                if key is not None:
                    assert rows[key].verdict.startswith("not reproduced: the run produced"), (fig, m, rows[key].verdict)


def test_a_setting_left_out_is_not_run_not_dropped():
    """A setting the run left out (or the width study off): its rows are "not run" with the reason, the
    denominator (23 claims) is the complete answer's, and nothing raises."""
    full = passes([G.row_comparison(r) for r in _xor_rows(XOR)])
    for name, keys in (
        ("approx-shallow", {"acc_approx_shallow", "deep_above_shallow", "acc_iqr_depth"}),
        ("exact-deep", {"exact_node1", "exact_node13", "acc_exact_deep", "chains_3", "depth_exact", "runtime"}),
        ("approx-deep", {"approx_layer1", "acc_approx_deep", "depth_layers", "approx_above_exact"}),
        ("width", {"width_no_fall", "width_blocks"}),
    ):
        rows = {r["key"]: G.row_comparison(r) for r in _xor_rows(XOR, drop=(name,))}
        assert passes(list(rows.values()))[1] == full[1] == 23, name
        for key in keys:
            assert rows[key].verdict.startswith("not run"), (name, key, rows[key].verdict)
    # the families' own form: one method of a figure left out of the answer
    for method, answer in missing_method(XOR["accuracy"]):
        if method in ("approx deep", "approx shallow"):
            t = {**XOR, "accuracy": {**answer, method: {"median": math.nan, "IQR": 0.0}}}
            rows = [G.row_comparison(r) for r in _xor_rows(t, drop=(method.replace(" ", "-"),))]
            assert passes(rows)[1] == 23


def test_passes_agrees_with_the_written_tally(tmp_path):
    """passes() counts as the README's tally (claim_tally of a re-judged record) does."""
    from .adversarial import written_tally

    rows = [G.row_comparison(r) for r in _xor_rows(_family(XOR, reversed_ranks))]
    written_tally(tmp_path, "gibbs-xor", rows)


def test_rejudge_reads_a_record_back(tmp_path, no_files):
    """rejudge(report) rebuilds the rows of a written report from its numbers alone: the same
    verdicts as the run wrote."""
    report = G.run("tiny", tmp_path, progress=False)
    again = G.rejudge(json.loads((tmp_path / "report.json").read_text()))
    assert [c.verdict for c in again] == [c["verdict"] for c in report["comparisons"]]
