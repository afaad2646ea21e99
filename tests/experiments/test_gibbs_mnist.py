"""gibbs-mnist / gibbs-augment (Papamarkou 2023, Sect. 5.6–5.8): tiny presets end to end, the
augmentation transforms, the paper's 130-block partition, the registry entries."""

import json
from dataclasses import replace

import pytest
import torch

from structmc.data.augment import (
    TRANSFORMS,
    apply_transform,
    blur_with,
    gaussian_blur,
    gaussian_kernel1d,
    invert,
    rotate,
    rotate_by,
)
from structmc.experiments import REGISTRY
from structmc.experiments import gibbs_augment as ga
from structmc.experiments import gibbs_mnist as gm
from structmc.partitions import by_finer_nodes
from structmc.zoo import energy_for

from .adversarial import constants, passes, reversed_ranks, shuffled


def _images(n=7, seed=0):
    return torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(seed))


# -- transforms --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transform_shape_dtype_and_determinism(name):
    x = _images()
    a = apply_transform(name, x, 3)
    b = apply_transform(name, x, 3)
    c = apply_transform(name, x, 4)
    assert a.shape == x.shape and a.dtype == x.dtype
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert apply_transform(name, x[:, 0], 3).shape == x[:, 0].shape  # [N, H, W] in, same shape out
    assert torch.equal(x, _images())  # the input is not modified


def test_transforms_need_an_explicit_generator():
    with pytest.raises(TypeError, match="Generator"):
        rotate(_images(), 30.0, generator=None)
    with pytest.raises(TypeError, match="Generator"):
        invert(_images(), generator=0)


def test_inversion_is_exact():
    x = _images(50)
    g = torch.Generator().manual_seed(0)
    y = invert(x, 0.5, generator=g)
    flipped = (y != x).flatten(1).any(1)
    assert 10 < int(flipped.sum()) < 40
    assert torch.equal(y[flipped], 1.0 - x[flipped])
    assert torch.equal(y[~flipped], x[~flipped])
    assert torch.equal(invert(x, 1.0, generator=g), 1.0 - x)
    assert torch.equal(invert(x * 255, 1.0, generator=g, max_value=255.0), 255.0 - x * 255)


def test_rotation_by_zero_is_identity_and_direction():
    x = _images()
    assert torch.equal(rotate_by(x, 0.0), x)
    assert torch.allclose(rotate_by(x, 0.0, mode="bilinear"), x, atol=1e-5)
    assert torch.equal(rotate(x, 0.0, generator=torch.Generator().manual_seed(0)), x)
    dot = torch.zeros(1, 1, 5, 5)
    dot[0, 0, 2, 4] = 1.0  # right of the centre
    up = rotate_by(dot, 90.0)  # counter-clockwise as displayed: to the top
    assert up[0, 0, 0, 2] == 1.0 and up.sum() == 1.0
    assert torch.equal(rotate_by(rotate_by(dot, 90.0), -90.0), dot)


def test_rotation_angles_within_range():
    # a centred square rotated by at most 30 degrees stays inside its circumscribed disc
    x = torch.zeros(20, 1, 28, 28)
    x[:, :, 10:18, 10:18] = 1.0
    y = rotate(x, 30.0, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(y, x)
    assert ((y.sum((1, 2, 3)) - 64).abs() <= 16).all()  # nearest neighbour keeps the area roughly


def test_blur_preserves_constant_images_and_mean():
    const = torch.full((4, 1, 28, 28), 0.37)
    out = blur_with(const, torch.tensor([1.0, 1.2, 1.4, 1.5]))
    assert torch.allclose(out, const, atol=1e-6)
    out = gaussian_blur(const, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(out, const, atol=1e-6)
    assert torch.allclose(out.mean(), const.mean())
    k = gaussian_kernel1d(9, torch.tensor([1.0, 1.5]))
    assert k.shape == (2, 9) and torch.allclose(k.sum(1), torch.ones(2, dtype=k.dtype))
    assert torch.allclose(k, k.flip(1))


def test_blur_probability_and_smoothing():
    x = _images(200)
    y = gaussian_blur(x, 9, (1.0, 1.5), 0.9, generator=torch.Generator().manual_seed(0))
    blurred = (y != x).flatten(1).any(1)
    assert 160 <= int(blurred.sum()) <= 195
    assert y[blurred].var() < x[blurred].var() / 4  # white noise loses most of its variance
    assert torch.equal(gaussian_blur(x, p=0.0, generator=torch.Generator().manual_seed(0)), x)


# -- partitions --------------------------------------------------------------------------------
def test_paper_partition_has_130_blocks():
    space = energy_for("mlp_gibbs").space
    part = gm.paper_partition(space, 10)
    assert part.num_groups == 10 * 10 + 30
    sizes = part.sizes()
    layer = part.layer
    assert torch.bincount(layer).tolist() == [100, 10, 10, 10]
    first = sizes[layer == 0]
    assert sorted(set(first.tolist())) == [78, 79]
    assert int(first.sum()) == 7850 and (first == 79).sum() == 50
    assert sizes[layer > 0].eq(11).all()
    assert part.unit[:10].eq(0).all() and part.unit[10:20].eq(1).all()  # node by node
    # every first-layer sub-block lies in one node; blocks cover each parameter once
    assert bool((part.unit >= 0).all())
    assert by_finer_nodes(space, 10).num_groups == 810
    assert gm.make_partition(space, gm.Config(blocks="paper")).num_groups == 130
    assert gm.make_partition(space, gm.Config(blocks="reference")).num_groups == 810
    assert gm.PRESETS["full"].blocks == "paper"  # the paper's protocol (§4.4); "reference" stays an option


# -- data --------------------------------------------------------------------------------------
def test_missing_files_name_the_data_dir(tmp_path):
    cfg = replace(gm.PRESETS["tiny"], data="files", data_dir=str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        gm.load_images("mnist", cfg)
    cfg = replace(cfg, data="auto")
    assert gm.load_images("mnist", cfg).source == "synthetic"


# -- experiments -------------------------------------------------------------------------------
def _check_report(out, report, keys, common_report):
    for name in ("report.json", "report.md"):
        assert (out / name).is_file()
    assert list(out.glob("*.png"))
    top = json.loads((out / "report.json").read_text())
    comps = common_report(top, "tiny")
    assert top["reduced"] is True and top["seed"] == 0 and top["config"]["seed"] == 0
    assert set(top["figures"]) == {p.name for p in out.glob("*.png")}
    saved = top["numbers"]  # the old report: every number
    assert "tables" in saved and saved["wall_time_s"] > 0
    rows = [r for k in keys for r in saved["tables"][k]]
    tables = {k: t for k, t in saved["tables"].items() if k != "claims"}
    claims = gm.claims_comparisons(gm.PRESETS["tiny"], saved["tables"].get("claims", {}))
    assert rows and len(comps) == sum(len(t) for t in tables.values()) + len(claims)  # one Comparison per old row
    assert all(r["verdict"] in {c["verdict"] for c in comps.values()} for r in rows)
    md = (out / "report.md").read_text()
    assert "verdict" in md and "Reduced run" in md and "Paper vs ours" in md
    return saved, comps


def test_gibbs_mnist_tiny(tmp_path, common_report):
    out = tmp_path / "mnist"
    report = gm.run("tiny", out, progress=False)
    saved, comps = _check_report(out, report, ("accuracy", "chain_length", "acceptance"), common_report)
    # the old rules, as Comparisons: acceptance >= min per layer, accuracy non-decreasing with window
    for r in saved["tables"]["acceptance"]:  # a check (σ² is chosen for it), shown but not tallied
        ok = min(r["ours"]) >= gm.PRESETS["tiny"].min_acceptance
        assert r["verdict"] == ("check (reproduced)" if ok else r["verdict"]) and r["verdict"].startswith("check (")
    for r in saved["tables"]["chain_length"]:  # issue 26: strictly increasing, no slack
        ok = all(b > a for a, b in zip(r["ours"], r["ours"][1:]))
        assert r["verdict"].startswith("reproduced") == ok
    assert all(r["verdict"].startswith("not comparable") for r in saved["tables"]["batch_ordering"])  # one batch
    for r in saved["tables"]["accuracy"]:  # a value is judged against the paper's, even in a reduced run
        if r["paper"] is not None and not r["verdict"].startswith("not comparable"):
            close = abs(r["ours"] - r["paper"]) <= gm.PRESETS["tiny"].tolerance
            assert r["verdict"].startswith("reproduced") == close, r
    run = next(iter(saved["runs"].values()))
    assert len(run["acceptance_per_layer"]) == 4
    assert all(0 <= a <= 1 for a in run["acceptance_per_layer"])
    assert saved["partition"]["num_blocks"] == 810
    assert (out / "predictive_examples.png").is_file()
    # the claims section (issue 26 §5): its own chains, 3 claims + 2 checks (the reference defect)
    claims = saved["tables"]["claims"]["mnist"]
    assert set(claims["chains"]["settings"]) == {
        "per-layer σ²",
        "layer blocks",
        *(f"common σ² {v:g}" for v in (5e-2, 5e-4, 5e-5)),
        "layer blocks, reference defect",
        "common σ² 0.05, reference defect",
    }
    assert claims["chains"]["settings"]["layer blocks"]["num_blocks"] == 4
    vol = claims["volatility"]
    assert vol["batch_sizes"][-1] == claims["num_train"] and vol["sd"][-1] < 1e-12  # the whole set: no volatility
    rows = gm.claims_comparisons(gm.PRESETS["tiny"], saved["tables"]["claims"])
    assert [r.check for r in rows] == [False, False, True, True, False]
    if claims["synthetic"]:
        assert all("not comparable" in r.verdict for r in rows)
    assert "The paper's other claims" in (out / "report.md").read_text()


def test_gibbs_mnist_synthetic_paper_blocks(tmp_path):
    cfg = replace(gm.PRESETS["tiny"], data="synthetic", blocks="paper", num_steps=6, windows=(2, 4), predict_window=4)
    top = gm.run(cfg, tmp_path, progress=False, seed=3)
    assert top["preset"] == "custom" and top["seed"] == 3 and top["config"]["seed"] == 3
    assert any("synthetic" in n for n in top["notes"])
    report = top["numbers"]
    assert report["partition"]["num_blocks"] == 130
    assert report["data"]["mnist"]["source"] == "synthetic"
    assert report["tables"]["accuracy"][0]["verdict"].startswith("not comparable: synthetic")
    acc = next(c for c in top["comparisons"] if "test accuracy" in c["quantity"])
    assert acc["paper"] is None or acc["verdict"].startswith("not comparable")


def test_gibbs_augment_tiny(tmp_path, common_report):
    out = tmp_path / "augment"
    report = ga.run("tiny", out, progress=False)
    saved, comps = _check_report(out, report, ("accuracy",), common_report)
    base = {r["dataset"]: r["ours"] for r in saved["tables"]["accuracy"] if r["transform"] == "none"}
    for r in saved["tables"]["accuracy"]:  # issue 26: a quarter of the accuracy above chance lost ("drastic")
        if r["transform"] != "none":
            b = base[r["dataset"]]
            if b <= 0.1:
                assert r["verdict"].startswith("not comparable"), r
            else:
                ok = (b - r["ours"]) / (b - 0.1) >= ga.PRESETS["tiny"].drastic_loss
                assert r["verdict"].startswith("reproduced") == ok, r
    assert saved["tables"]["fmnist_worse"] == []  # tiny runs MNIST only
    assert {r["transform"] for r in saved["tables"]["accuracy"]} == {"none", "rotation", "blur", "inversion"}
    assert (out / "augment_examples.png").is_file()


def test_registry_lists_both():
    for name, module in (("gibbs-mnist", gm), ("gibbs-augment", ga)):
        entry = REGISTRY.get(name)
        assert entry.load() is module
        assert entry.presets[:3] == ("tiny", "quick", "full")  # gibbs-mnist adds "converged" (issue 24)
        assert entry.paper.key == "blocked-gibbs"
        assert set(entry.datasets) == {"mnist", "fashion-mnist"}
    assert REGISTRY.get("gibbs-mnist").published["accuracy_batch3000"] == {"mnist": 0.9075, "fashion-mnist": 0.8089}


def test_gibbs_mnist_resumes_from_checkpoints(tmp_path):
    cfg = replace(
        gm.PRESETS["tiny"],
        data="synthetic",
        blocks="paper",
        num_steps=8,
        windows=(2, 4),
        predict_window=4,
        checkpoint_every=4,
        resume=True,
    )
    whole = gm.run(cfg, tmp_path, progress=False)
    first = whole["numbers"]
    assert (tmp_path / "chains" / "mnist-b50").is_dir() and whole["compute_time_s"] is None  # one sitting
    report = gm.run(cfg, tmp_path, progress=False)
    again = report["numbers"]  # everything is read back from the checkpoint
    # the table's time is the work of both sittings: this call's plus the sampling read back
    earlier = sum(r["seconds"] - r["seconds_this_sitting"] for r in again["runs"].values())
    assert earlier > 0 and report["compute_time_s"] == pytest.approx(report["wall_time_s"] + earlier, rel=1e-9)
    assert sum(r["seconds"] for r in again["runs"].values()) == sum(r["seconds"] for r in first["runs"].values())
    for key, r in first["runs"].items():
        assert again["runs"][key]["by_window"] == r["by_window"]
        assert again["runs"][key]["acceptance_per_layer"] == r["acceptance_per_layer"]
        assert again["runs"][key]["trace"] == r["trace"]  # kept beside the checkpoints


def test_gibbs_mnist_interrupted_chain_resumes_with_its_traces(tmp_path, monkeypatch):
    cfg = replace(
        gm.PRESETS["tiny"],
        data="synthetic",
        blocks="paper",
        num_steps=12,
        windows=(2, 4),
        predict_window=4,
        checkpoint_every=4,
    )
    whole = gm.run(cfg, tmp_path / "whole", progress=False)["numbers"]["runs"]
    from structmc.experiments import _common  # run_chain, shared with gibbs-augment, calls sample there

    real = _common.sample

    def interrupted(*args, callback=None, **kw):
        def cb(t, state):
            if callback is not None:
                callback(t, state)
            if t == 6:  # Ctrl-C at sweep 6: sample() checkpoints there, the traces' recorder with it
                raise KeyboardInterrupt

        return real(*args, callback=cb, **kw)

    monkeypatch.setattr(_common, "sample", interrupted)
    with pytest.raises(KeyboardInterrupt):
        gm.run(cfg, tmp_path / "cut", progress=False)
    monkeypatch.setattr(_common, "sample", real)
    resumed = gm.run(cfg, tmp_path / "cut", progress=False, resume=True)
    assert resumed["preset"] == "custom" and resumed["config"]["resume"] is True
    for key, r in whole.items():
        got = resumed["numbers"]["runs"][key]
        assert got["trace"] == r["trace"] and len(r["trace"]["steps"]) == 12
        assert got["by_window"] == r["by_window"] and got["acceptance_per_layer"] == r["acceptance_per_layer"]


# -- verdict rules (issue 26) --------------------------------------------------------------------
# Table 2 (batch size -> data set -> accuracy) and Table 3 (window -> data set; batch 3,000). Our copy of
# the text gives only batch 3,000's cells (90.75 %, 80.89 %) and the orderings: 600 < 1,800 < 3,000 > 4,200
# ("the highest accuracy ... attained by employing a batch size of 3000"), accuracy rising with the window
# (Table 3's last 10,000 is Table 2's cell: the same chain). The other cells are illustrations of those
# words, 2.5-3 pp apart: the real gaps are not in our text (the value rows compare batch 3,000 only).
TABLE2 = {
    600: {"mnist": 0.860, "fashion-mnist": 0.760},
    1800: {"mnist": 0.885, "fashion-mnist": 0.785},
    3000: {"mnist": 0.9075, "fashion-mnist": 0.8089},
    4200: {"mnist": 0.880, "fashion-mnist": 0.780},
}
TABLE3 = {
    1000: {"mnist": 0.880, "fashion-mnist": 0.780},
    10000: {"mnist": 0.9075, "fashion-mnist": 0.8089},
    20000: {"mnist": 0.915, "fashion-mnist": 0.815},
    30000: {"mnist": 0.918, "fashion-mnist": 0.818},
}


def _mnist_tables(t2, t3):
    """The tables of gibbs_mnist._tables for answers ``t2``, ``t3``, as report.json holds them
    (accuracy_by_batch with JSON's string keys)."""
    names = ("mnist", "fashion-mnist")
    ws = sorted(t3)
    return {
        "accuracy": [
            {
                "dataset": d,
                "batch_size": b,
                "paper": gm.PAPER_ACCURACY.get((d, b)),
                "ours": t2[b][d],
                "nll": 0.3,
                "ece": 0.02,
            }
            for d in names
            for b in sorted(t2)
        ],
        "chain_length": [
            {"dataset": d, "batch_size": 3000, "windows": ws, "ours": [t3[w][d] for w in ws]} for d in names
        ],
        "acceptance": [
            {"dataset": d, "batch_size": 3000, "proposal_var": [1e-2, 1e-4, 1e-4, 1e-5], "ours": [0.3, 0.2, 0.2, 0.25]}
            for d in names
        ],
        "batch_ordering": [{"dataset": d, "accuracy_by_batch": {str(b): t2[b][d] for b in t2}} for d in names],
    }


# The claims section (issue 26 §5), {method: {cell: value}}: the paper's words with illustrative numbers
# (none are in the text): layer blocks' first layer "zero or near-zero" beside the 130 blocks; one σ² for
# every block "high in the first hidden layer", "near zero in the output", the per-layer σ² not; Fig. 6's
# sd falling with the batch (sd ∝ √((N − n)/(N n)) for subsets without replacement, 0 at n = N).
SIZES = [5000 * k for k in range(1, 13)]
CLAIMS = {
    "layer blocks": {"layer blocks": 0.0, "130 blocks": 0.30},
    "common": {"layer 1": 0.60, "output": 0.0, "per-layer output": 0.25},
    "fig6": {n: 3.0 * ((60000 - n) / (60000 * n)) ** 0.5 for n in SIZES},
}


def _claims_numbers(t, synthetic=False, names=("mnist", "fashion-mnist")):
    """gibbs_mnist.run_claims's numbers for the answer ``t`` (the other layers at 0.3)."""
    lb, cm = t["layer blocks"], t["common"]
    grid = [1e-2, 1e-4, 1e-5]
    per = [lb["130 blocks"], 0.3, 0.3, cm["per-layer output"]]
    settings = {
        "per-layer σ²": {"mean": per},
        "layer blocks": {"mean": [lb["layer blocks"], 0.3, 0.3, 0.3]},
        "common σ² 0.01": {"mean": [cm["layer 1"], 0.3, 0.3, cm["output"]]},
        "common σ² 0.0001": {"mean": [0.9, 0.5, 0.5, 0.02]},
        "common σ² 1e-05": {"mean": [0.97, 0.9, 0.9, 0.3]},
    }
    chains = {"grid": grid, "proposal_var": [1e-2, 1e-4, 1e-4, 1e-5], "batch_size": 3000, "chains": 2}
    chains.update(steps=50, pretrain=100, settings=settings)
    vol = {"batch_sizes": SIZES, "sd": [t["fig6"][n] for n in SIZES], "full": -2.3, "samples": 1000}
    return {d: {"synthetic": synthetic, "chains": chains, "volatility": vol} for d in names}


def _mnist_passes(t2, t3, claims=CLAIMS):
    tables = {**_mnist_tables(t2, t3), "claims": _claims_numbers(claims)}
    rows = gm.comparisons(gm.PRESETS["converged"], tables)
    return passes([r for r in rows if r.paper is not None])  # batch sizes without a published value: no verdict


def test_wrong_answers_do_not_pass_the_verdicts():
    """Adversarial numbers (issue 26 §1): the paper's answer passes all 12 claim rows (2 values at
    batch 3,000, 2 chain-length, 2 batch orderings; per data set layer blocks, one common σ², Fig. 6;
    the acceptance rows and the reference-defect rows are checks); constants, Table 2 and 3 shuffled
    across batch sizes / windows, the claims shuffled across their methods / sizes and every ordering
    reversed pass at most 1 (a constant can hit one value row)."""
    assert _mnist_passes(TABLE2, TABLE3) == (12, 12)
    pooled = {**{f"b{b}": v for b, v in TABLE2.items()}, **{f"w{w}": v for w, v in TABLE3.items()}}
    claim_values = [v for table in CLAIMS.values() for v in table.values()]
    for const in constants(pooled):  # one value everywhere: a value row at most, never an ordering
        v = next(iter(next(iter(const.values())).values()))
        for cv in (v, *(sorted(claim_values)[round(q * (len(claim_values) - 1))] for q in (0, 0.5, 1))):
            flat = {k: {m: cv for m in table} for k, table in CLAIMS.items()}
            assert (
                _mnist_passes(
                    {b: {d: v for d in c} for b, c in TABLE2.items()},
                    {w: {d: v for d in c} for w, c in TABLE3.items()},
                    flat,
                )[0]
                <= 1
            )
    claims_shuffled = {k: shuffled({m: {"v": v} for m, v in table.items()}) for k, table in CLAIMS.items()}
    claims_reversed = {k: reversed_ranks({m: {"v": v} for m, v in table.items()}) for k, table in CLAIMS.items()}
    unwrap = lambda t: {k: {m: c["v"] for m, c in table.items()} for k, table in t.items()}  # noqa: E731
    assert _mnist_passes(shuffled(TABLE2), shuffled(TABLE3), unwrap(claims_shuffled))[0] == 0
    assert _mnist_passes(reversed_ranks(TABLE2), reversed_ranks(TABLE3), unwrap(claims_reversed))[0] == 0
    swapped = {b: {"mnist": c["fashion-mnist"], "fashion-mnist": c["mnist"]} for b, c in TABLE2.items()}
    ok, _n = _mnist_passes(swapped, TABLE3)  # MNIST's numbers as FMNIST's: 9.86 pp apart, beyond the 2 pp
    assert ok == 10  # both value rows fail; the orderings within each data set and the claims still hold
    # the old rule's 0.5 pp slack: a plateau, or a longer window 0.2 pp worse, is not "increases"
    flat = {w: TABLE3[10000] for w in TABLE3}
    worse = {w: {d: a - 0.005 * (w == 30000) for d, a in c.items()} for w, c in TABLE3.items()}
    assert _mnist_passes(TABLE2, flat) == (10, 12) and _mnist_passes(TABLE2, worse) == (10, 12)
    # Table 2: 3,000 the best is not enough; 600 < 1,800 < 3,000 must hold too, and 4,200 below 3,000
    bad = {**TABLE2, 1800: TABLE2[600], 600: TABLE2[1800]}
    assert _mnist_passes(bad, TABLE3) == (10, 12)
    tied = {**TABLE2, 4200: TABLE2[3000]}
    assert _mnist_passes(tied, TABLE3) == (10, 12)


def test_accuracy_tolerance_sits_below_the_papers_gap():
    """The 2 pp value tolerance sits below the 9.86 pp between the paper's MNIST and FMNIST cells
    (the only published gap); a tolerance at or above it is refused before anything runs."""
    from structmc.experiments._common import ACCURACY_GAP

    assert ACCURACY_GAP == pytest.approx(0.0986)
    for cfg in gm.PRESETS.values():
        assert 0 < cfg.tolerance < ACCURACY_GAP
    for bad in (ACCURACY_GAP, 0.2, 0.0, -0.01):
        with pytest.raises(ValueError, match="tolerance must lie in"):
            gm.Config(tolerance=bad)
    with pytest.raises(ValueError, match="rule must be"):
        gm.Config(rule="loose")
    # a finished run's report.json is judged again from its numbers (string keys, verdict strings ignored)
    tables = json.loads(json.dumps(_mnist_tables(TABLE2, TABLE3)))
    assert [r.verdict for r in gm.comparisons(gm.PRESETS["converged"], tables)] == [
        r.verdict for r in gm.comparisons(gm.PRESETS["converged"], _mnist_tables(TABLE2, TABLE3))
    ]


def _claim_rows(t, **kw):
    return {
        r.quantity.split(": ")[1].split(" ")[0] + (" defect" if r.check else ""): r.verdict
        for r in gm.claims_comparisons(gm.PRESETS["quick"], _claims_numbers(t, names=("mnist",), **kw))
    }


def test_claims_rules_fail_wrong_answers():
    """The claims section's rules on numbers. The paper's words pass; the probe's numbers with the correct
    kernel (MNIST, batch 3,000, from a 26,000-sweep state: layer blocks' first layer 33.75 % beside the
    130 blocks' 72.06 %; σ² = 0.01 everywhere: layers 72.00 / 48.75 / 51.00 / 47.00 %) fail both
    acceptance claims; a first layer near zero beside an output near zero but the disparity below
    Fig. 4b's 29.75 pp fails; a summed (not batch-normalised) log-likelihood, whose sd grows with the batch
    until N/2, fails Fig. 6; synthetic data is not comparable."""
    assert set(_claim_rows(CLAIMS).values()) == {"reproduced"}
    probe = {
        "layer blocks": {"layer blocks": 0.3375, "130 blocks": 0.7206},
        "common": {"layer 1": 0.72, "output": 0.47, "per-layer output": 0.97},
        "fig6": CLAIMS["fig6"],
    }
    v = _claim_rows(probe)
    assert v["layer"].startswith("not reproduced") and v["one"].startswith("not reproduced")
    assert v["sd"] == "reproduced"
    small = {**CLAIMS, "common": {"layer 1": 0.30, "output": 0.02, "per-layer output": 0.25}}  # 28 pp < 29.75
    assert _claim_rows(small)["one"].startswith("not reproduced")
    vanish = {**CLAIMS, "common": {"layer 1": 0.60, "output": 0.0, "per-layer output": 0.01}}  # per-layer vanishes too
    assert _claim_rows(vanish)["one"].startswith("not reproduced")
    summed = {**CLAIMS, "fig6": {n: CLAIMS["fig6"][n] * n for n in SIZES}}
    assert _claim_rows(summed)["sd"].startswith("not reproduced")
    assert all(
        r.startswith(("not comparable", "check (not comparable")) for r in _claim_rows(CLAIMS, synthetic=True).values()
    )


def test_log_likelihood_volatility_and_claims_config():
    """Fig. 6's measurement: batches without replacement, the sd of the batch means falls as
    √((N − n)/(N n)) and is 0 at n = N (the whole set in the data's order); bad settings are refused."""
    ll = torch.randn(600, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    sizes = [50 * k for k in range(1, 13)]
    out = gm.log_likelihood_volatility(ll, sizes, 2000, seed=1)
    assert out["sd"][-1] < 1e-12 and out["full"] == pytest.approx(float(ll.mean()))
    assert gm.strictly_decreasing(out["sd"])
    theory = [float(ll.std()) * ((600 - n) / (599 * n)) ** 0.5 for n in sizes[:-1]]
    assert out["sd"][:-1] == pytest.approx(theory, rel=0.08)
    assert gm.log_likelihood_volatility(ll, sizes, 50, seed=1) == gm.log_likelihood_volatility(ll, sizes, 50, seed=1)
    with pytest.raises(ValueError, match="batch sizes must lie in"):
        gm.log_likelihood_volatility(ll, [700], 10, seed=0)
    assert gm.common_grid([1e-2, 1e-4, 1e-4, 1e-5]) == [1e-2, 1e-4, 1e-5]
    for bad in ({"near_zero": 0.0}, {"claims_chains": 0}, {"volatility_samples": 1}, {"claims_pretrain": -1}):
        with pytest.raises(ValueError, match=f"Config.{next(iter(bad))} must"):
            gm.Config(**bad)
    assert not gm.PRESETS["full"].claims and not gm.PRESETS["converged"].claims  # their chains are untouched
    assert gm.PRESETS["claims"].batch_sizes == () and gm.PRESETS["quick"].claims


def test_a_data_set_run_alone_draws_the_chain_a_run_of_both_draws_for_it(tmp_path):
    # the chain's seed follows the data set's place in the paper's list, not in the run's: the
    # converged records ran MNIST and FMNIST one at a time
    cfg = replace(gm.PRESETS["tiny"], data="synthetic", claims=False, num_steps=6, windows=(2, 4), predict_window=4)
    both = gm.run(replace(cfg, datasets=("mnist", "fashion-mnist")), tmp_path / "both", progress=False)
    alone = gm.run(replace(cfg, datasets=("fashion-mnist",)), tmp_path / "alone", progress=False)
    key = "fashion-mnist/b50"
    a, b = alone["numbers"]["runs"][key], both["numbers"]["runs"][key]
    assert a["energy_trace"] == b["energy_trace"] and a["metrics"] == b["metrics"]
    assert a["energy_trace"] != both["numbers"]["runs"]["mnist/b50"]["energy_trace"]
