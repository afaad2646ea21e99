"""gibbs-mnist / gibbs-augment (Papamarkou 2023, Sect. 5.6–5.8): tiny presets end to end, the
augmentation transforms, the paper's 130-block partition, the registry entries."""

import json
import math
from dataclasses import replace
from typing import Any

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
from structmc.partitions import by_finer_nodes
from structmc.zoo import energy_for
from structmc_papers import REGISTRY
from structmc_papers import gibbs_augment as ga
from structmc_papers import gibbs_mnist as gm

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
    # every table row carries the verdict of its Comparison; claims the run did not cover are rows too
    assert rows and len(comps) >= len(rows)
    assert all(r["verdict"] in {c["verdict"] for c in comps.values()} for r in rows)
    md = (out / "report.md").read_text()
    assert "verdict" in md and "Reduced run" in md and "Paper vs ours" in md
    return saved, comps


def test_gibbs_mnist_tiny(tmp_path, common_report):
    out = tmp_path / "mnist"
    report = gm.run("tiny", out, progress=False)
    saved, comps = _check_report(out, report, ("accuracy", "chain_length", "acceptance"), common_report)
    # the old rules, as Comparisons: acceptance >= min per layer, accuracy non-decreasing with window
    # batch 50 is not one of the paper's: its acceptance and chain-length rows are checks ("beyond the paper")
    stand_in = bool(report["stand_in"])  # a fresh clone has no MNIST files: every row "check (not run: ...)"
    for r in saved["tables"]["acceptance"]:
        ok = min(r["ours"]) >= gm.PRESETS["tiny"].min_acceptance
        expected = "check (reproduced)" if ok and not stand_in else r["verdict"]
        assert r["verdict"] == expected and r["verdict"].startswith("check (")
        assert not stand_in or r["verdict"].startswith("check (not run")
    for r in saved["tables"]["chain_length"]:  # issue 26: strictly increasing, no slack, above chance
        ok = all(b > a for a, b in zip(r["ours"], r["ours"][1:])) and min(r["ours"]) > 0.1
        assert r["verdict"].startswith("check (reproduced") == (ok and not stand_in)
    assert all(r["verdict"].startswith("not run") for r in saved["tables"]["batch_ordering"])  # one batch
    for r in saved["tables"]["accuracy"]:  # batch 50: no published value
        assert r["verdict"] == "no published value"
    # Table 2's published cell at batch 3,000 is a row, not run here (issue 35 §3)
    head = comps["MNIST, batch 3,000: test accuracy (Table 2)"]
    assert head["verdict"].startswith("not run") and head["paper"] == 0.9075
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
        assert all("not run" in r.verdict for r in rows)
    assert "The paper's other claims" in (out / "report.md").read_text()


def test_gibbs_mnist_synthetic_paper_blocks(tmp_path):
    cfg = replace(gm.PRESETS["tiny"], data="synthetic", blocks="paper", num_steps=6, windows=(2, 4), predict_window=4)
    top = gm.run(cfg, tmp_path, progress=False, seed=3)
    assert top["preset"] == "custom" and top["seed"] == 3 and top["config"]["seed"] == 3
    assert any("synthetic" in n for n in top["notes"])
    assert "synthetic" in top["stand_in"]  # issue 35 §5: said at the top of report.md too
    assert "Stand-in data, not the paper's" in (tmp_path / "report.md").read_text()
    report = top["numbers"]
    assert report["partition"]["num_blocks"] == 130
    assert report["data"]["mnist"]["source"] == "synthetic"
    assert report["tables"]["accuracy"][0]["verdict"] == "no published value"  # batch 50
    assert any("synthetic stand-in" in c["verdict"] for c in top["comparisons"])
    acc = next(c for c in top["comparisons"] if "batch 3,000: test accuracy" in c["quantity"])
    assert acc["verdict"].startswith("not run")


def test_gibbs_augment_tiny(tmp_path, common_report):
    out = tmp_path / "augment"
    report = ga.run("tiny", out, progress=False)
    saved, comps = _check_report(out, report, ("accuracy",), common_report)
    base = {r["dataset"]: r["ours"] for r in saved["tables"]["accuracy"] if r["transform"] == "none"}
    for r in saved["tables"]["accuracy"]:  # issue 26: a quarter of the accuracy above chance lost ("drastic")
        if r["transform"] != "none":
            b = base[r["dataset"]]
            if b <= 0.1:
                assert r["verdict"].startswith("not run"), r
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
    from structmc_papers import _common  # run_chain, shared with gibbs-augment, calls sample there

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


# Tables 5, 6 (batch size -> layer -> acceptance; the same for both data sets) and Fig. 5 (the traced
# parameters' sd after burn-in), Fig. 8 (the shown images' top-2 probabilities): the paper's words
# ("do not vanish with depth", "drop across all layers" with the batch; "chain scales decrease in deeper
# layers"; 0.98 / 0.97 and 0.35 vs 0.28) with illustrative numbers where the text gives none.
ACCEPT = {
    600: {"layer 1": 0.80, "layer 2": 0.95, "layer 3": 0.95, "output": 0.98},
    1800: {"layer 1": 0.76, "layer 2": 0.93, "layer 3": 0.93, "output": 0.97},
    3000: {"layer 1": 0.72, "layer 2": 0.91, "layer 3": 0.92, "output": 0.96},
    4200: {"layer 1": 0.68, "layer 2": 0.89, "layer 3": 0.90, "output": 0.95},
}
FIG5 = {"sd": {"θ_1005": 4.0, "θ_7872": 1.0, "θ_8008": 0.5, "θ_8107": 0.2}}
FIG8 = {"confident": {"top": 0.98, "runner": 0.01}, "uncertain": {"top": 0.35, "runner": 0.28}}


def _mnist_tables(t2, t3, accept=None):
    """The tables of gibbs_mnist._tables for answers ``t2``, ``t3`` (and ``accept``: Tables 5, 6),
    as report.json holds them (accuracy_by_batch with JSON's string keys)."""
    names = ("mnist", "fashion-mnist")
    ws = sorted(t3)
    accept = accept or {3000: {"layer 1": 0.3, "layer 2": 0.2, "layer 3": 0.2, "output": 0.25}}
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
            if d in t2[b]
        ],
        "chain_length": [
            {"dataset": d, "batch_size": 3000, "windows": ws, "ours": [t3[w][d] for w in ws]} for d in names
        ],
        "acceptance": [
            {"dataset": d, "batch_size": b, "proposal_var": [1e-2, 1e-4, 1e-4, 1e-5], "ours": list(accept[b].values())}
            for d in names
            for b in sorted(accept)
        ],
        "batch_ordering": [
            {"dataset": d, "accuracy_by_batch": {str(b): t2[b][d] for b in t2 if d in t2[b]}} for d in names
        ],
    }


def _trace(sd: dict, after: int = 10_000, points: int = 200) -> dict:
    """A trace whose four parameters alternate ±sd (sample sd ≈ sd) after sweep ``after``."""
    sign = [(-1) ** k for k in range(points)]
    return {
        "params": [1005, 7872, 8008, 8107],
        "steps": [after + 1 + k for k in range(points)],
        "values": [[[s * float(v) for v in sd.values()] for s in sign]],
    }


def _examples(f8: dict) -> list:
    return [
        {"index": k, "label": 0, "predicted": 0, "top": [[0, c["top"]], [1, c["runner"]], [2, 0.0]]}
        for k, c in enumerate(f8.values())
    ]


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


PAPER: dict[str, Any] = {
    "table2": TABLE2,
    "table3": TABLE3,
    "accept": ACCEPT,
    "fig5": FIG5,
    "fig8": FIG8,
    **{k: {m: {"v": v} for m, v in table.items()} for k, table in CLAIMS.items()},  # type: ignore[attr-defined]
}


def _mnist_rows(t, cfg=None):
    """gm.comparisons of the whole answer ``t`` (every table of PAPER) under the full preset:
    28 claims, two data sets of 14 (Table 2's cell and ordering, Table 3, Tables 5-6 at four batch
    sizes and their fall, Fig. 5, Fig. 8, Observation 6 (not run), the claims section's three)."""
    claims = {k: {m: c["v"] for m, c in t[k].items()} for k in ("layer blocks", "common", "fig6")}
    tables = {**_mnist_tables(t["table2"], t["table3"], t["accept"]), "claims": _claims_numbers(claims)}
    names = ("mnist", "fashion-mnist")
    return gm.comparisons(
        cfg or gm.PRESETS["full"],
        tables,
        n_test={d: 10_000 for d in names},
        examples={d: _examples(t["fig8"]) for d in names},
        traces={d: _trace(t["fig5"]["sd"]) for d in names},
    )


def _mnist_passes(t2, t3, claims=CLAIMS):
    wrapped = {k: {m: {"v": v} for m, v in table.items()} for k, table in claims.items()}
    return passes(_mnist_rows({**PAPER, "table2": t2, "table3": t3, **wrapped}))


def _family(t, f):
    return {k: f(table) for k, table in t.items()}


def test_wrong_answers_do_not_pass_the_verdicts():
    """Adversarial numbers (issue 26 §1): the paper's answer passes all 26 claims run (of 28:
    Observation 6's "agreement with human insight" is not run on either data set); constants,
    every table shuffled across its methods and every ordering reversed pass at most a quarter."""
    assert _mnist_passes(TABLE2, TABLE3) == (26, 28)
    pooled = sorted(float(v) for table in PAPER.values() for by_c in table.values() for v in by_c.values())
    for q in (0.0, 0.25, 0.5, 0.75, 1.0):
        v = pooled[round(q * (len(pooled) - 1))]
        const = _family(PAPER, lambda table, v=v: {m: {c: v for c in by_c} for m, by_c in table.items()})
        at_most_a_quarter(_mnist_rows(const), f"constant {v}")
    at_most_a_quarter(_mnist_rows(_family(PAPER, shuffled)), "shuffled")
    at_most_a_quarter(_mnist_rows(_family(PAPER, reversed_ranks)), "reversed")
    swapped = {b: {"mnist": c["fashion-mnist"], "fashion-mnist": c["mnist"]} for b, c in TABLE2.items()}
    ok, _n = _mnist_passes(swapped, TABLE3)  # MNIST's numbers as FMNIST's: 9.86 pp apart, beyond 3 SEs
    assert ok == 24  # both value rows fail; the orderings within each data set and the claims still hold
    # the old rule's 0.5 pp slack: a plateau, or a longer window 0.2 pp worse, is not "increases"
    flat = {w: TABLE3[10000] for w in TABLE3}
    worse = {w: {d: a - 0.005 * (w == 30000) for d, a in c.items()} for w, c in TABLE3.items()}
    assert _mnist_passes(TABLE2, flat) == (24, 28) and _mnist_passes(TABLE2, worse) == (24, 28)
    # Table 2: 3,000 the best is not enough; 600 < 1,800 < 3,000 must hold too, and 4,200 below 3,000
    bad = {**TABLE2, 1800: TABLE2[600], 600: TABLE2[1800]}
    assert _mnist_passes(bad, TABLE3) == (24, 28)
    tied = {**TABLE2, 4200: TABLE2[3000]}
    assert _mnist_passes(tied, TABLE3) == (24, 28)


def test_every_claim_has_a_row_run_or_not():
    """Issue 35 §3: a batch size, window or data set the run left out is "not run" with the reason,
    never dropped; the denominator is the complete answer's (28). The converged preset (batch 3,000
    only, claims section off) keeps Table 2's ordering, Tables 5-6 at the other batch sizes and
    their fall, and the claims section as not-run rows."""
    full = passes(_mnist_rows(PAPER))
    for method, answer in missing_method(TABLE2):
        rows = _mnist_rows({**PAPER, "table2": answer})
        assert passes(rows)[1] == full[1] == 28, method
        order = [r for r in rows if "accuracy by batch size" in r.quantity]
        assert len(order) == 2 and all(r.verdict.startswith("not run") for r in order)
        if method == 3000:
            head = [r for r in rows if "batch 3,000: test accuracy" in r.quantity]
            assert len(head) == 2 and all(r.verdict.startswith("not run") for r in head)
    for method, answer in missing_method(ACCEPT):
        rows = _mnist_rows({**PAPER, "accept": answer})
        assert passes(rows)[1] == 28
        gone = [r for r in rows if f"batch {method:,}: acceptance per layer" in r.quantity]
        assert len(gone) == 2 and all(r.verdict.startswith("not run") for r in gone)
    # the converged records: one batch size, no claims section, no examples or traces
    tables = _mnist_tables({3000: TABLE2[3000]}, TABLE3)
    rows = gm.comparisons(gm.PRESETS["converged"], tables)
    t = passes(rows)
    assert t == (6, 28)  # per data set the value, Table 3 and acceptance at 3,000 (weak, carried by the others)
    nr = [r for r in rows if r.verdict.startswith("not run")]
    assert len(nr) == 2 * 11
    assert all(r.not_run for r in nr if "Observation 6" not in r.quantity or r.not_run)


def test_the_five_families_fail():
    """Issue 35 §4 through this experiment's own comparisons(), every table at once: absurd values
    (x 10, below 0, above 1), fractions of the accuracies and rates, NaN or inf in every method pass at
    most a quarter of the 28 claims; NaN or inf in one batch size of Table 2 fails the rows that use
    it. Offsets beyond the two value rows' 3 binomial SEs fail both (an offset shifts every number
    alike, which the orderings, claims of their own, survive); at k = 30 they pass."""
    for answers in zip(*(list(absurd(table, low=0.0, high=1.0)) for table in PAPER.values())):
        at_most_a_quarter(_mnist_rows(dict(zip(PAPER, answers))), "absurd")
    at_most_a_quarter(_mnist_rows(_family(PAPER, fractions)), "fractions")
    for bad in (math.nan, math.inf):
        t = {k: {m: {c: bad for c in by_c} for m, by_c in table.items()} for k, table in PAPER.items()}
        rows = _mnist_rows(t)
        assert passes(rows)[1] == 28
        at_most_a_quarter(rows, f"{bad} everywhere")
    for answer in non_finite(TABLE2):
        bad = [b for b, by_d in answer.items() if any(not math.isfinite(v) for v in by_d.values())]
        if len(bad) != 1:
            continue
        rows = _mnist_rows({**PAPER, "table2": answer})
        order = [r for r in rows if "accuracy by batch size" in r.quantity]
        assert all(r.verdict.startswith("not reproduced: the run produced") for r in order), bad
        if bad == [3000]:
            head = [r for r in rows if "batch 3,000: test accuracy" in r.quantity]
            assert all(r.verdict.startswith("not reproduced: the run produced") for r in head)

    def beyond(m, c, v):  # Table 2's published cells: 3 binomial SEs on 10,000 test images
        return 3 * math.sqrt(v * (1 - v) / 10_000) if m == 3000 else 0.0

    for answer in offsets(TABLE2, beyond):
        values = [r for r in _mnist_rows({**PAPER, "table2": answer}) if "batch 3,000: test accuracy" in r.quantity]
        assert len(values) == 2 and not any(r.verdict.startswith("reproduced") for r in values)
    from structmc_papers._common import accuracy_comparison

    assert (
        accuracy_comparison("x", answer[3000]["mnist"], 0.9075, gm.PRESETS["full"], False, k=30).verdict == "reproduced"
    )


def test_passes_agrees_with_the_written_tally(tmp_path):
    """passes() counts as the README's tally (claim_tally of a re-judged record) does."""
    from .adversarial import written_tally

    rows = _mnist_rows(_family(PAPER, reversed_ranks))
    written_tally(tmp_path, "gibbs-mnist", rows)


def test_rejudge_reads_the_records_back():
    """rejudge(report) rebuilds every row of the converged records from their numbers (no KeyError),
    and the Table 2 value rows are judged on 3 binomial SEs."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "docs" / "results"
    for name in ("gibbs-mnist-converged-mnist", "gibbs-mnist-converged-fmnist"):
        report = json.loads((root / name / "report.json").read_text())
        rows = gm.rejudge(report)
        assert passes(rows)[1] == 14
        head = next(r for r in rows if "batch 3,000: test accuracy" in r.quantity)
        assert "SE" in head.rule.describe() and head.rule.k == 3


def test_accuracy_rule_states_its_noise_and_stays_below_the_papers_gap():
    """The Table 2 value rule: 3 binomial SEs of one chain's test accuracy on 10,000 images (0.87 pp
    at 90.75 %, 1.18 pp at 80.89 %), below the 9.86 pp between the paper's MNIST and FMNIST cells (the
    only published gap); the old tolerance setting is still refused at or above the gap."""
    from structmc_papers._common import ACCURACY_GAP, accuracy_comparison

    assert ACCURACY_GAP == pytest.approx(0.0986)
    for d, b in gm.PAPER_ACCURACY:
        row = accuracy_comparison("x", 0.5, gm.PAPER_ACCURACY[(d, b)], gm.PRESETS["full"], False)
        assert 0 < row.rule.allowed < ACCURACY_GAP / 5
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
    assert all(r.startswith(("not run", "check (not run")) for r in _claim_rows(CLAIMS, synthetic=True).values())


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


def test_named_presets_refuse_missing_files_before_compute(tmp_path, no_files):
    """Issue 35 §5: every preset but tiny needs the paper's files; a missing one is refused before the
    first chain, naming the files and the folder (FMNIST missing is not found after MNIST's chains)."""
    import time

    for module, preset in ((gm, "quick"), (gm, "converged"), (ga, "quick"), (ga, "converged")):
        t0 = time.perf_counter()
        with pytest.raises(FileNotFoundError, match="IDX files"):
            module.run(preset, tmp_path / f"{module.__name__}-{preset}", progress=False)
        assert time.perf_counter() - t0 < 30
        assert not (tmp_path / f"{module.__name__}-{preset}" / "chains").exists()
