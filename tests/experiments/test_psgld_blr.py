"""psgld-blr (Li et al. 2016, Table 1 / Fig. 3): the a9a-like encoding, the step-size mapping,
the posterior predictive from the thinned draws, the tiny preset end to end (with the Adult
files, and the synthetic stand-in without them), reproducibility and resume."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import structmc_papers as E
from structmc import load_chain
from structmc.data import DataError, checksums, files
from structmc_papers import psgld_blr as B
from structmc_papers._report import COMPARISON_FIELDS, REPORT_FIELDS
from structmc_papers._shared import default_data_dir


def _adult_dir():
    """The data folder when it holds the Adult files; these tests check the real files' sizes
    and error rates, which no stand-in has, so they skip without them (the synthetic fallback
    is tested below)."""
    root = default_data_dir()
    missing = [spec.label for spec in checksums.ADULT.values() if files.find(spec, data_dir=root) is None]
    if missing:
        pytest.skip(
            f"{' and '.join(missing)} not found in {root} (set STRUCTMC_DATA to a folder holding them, or "
            f"structmc.data.load_adult(download=True) fetches them, checksummed, into the cache)"
        )
    return root


# -- pieces --------------------------------------------------------------------------------------
def test_step_size_mapping_and_kept_draws():
    # the paper's per-datum ε = 5e-2 is lr = 2ε/N in the library's convention
    assert B.library_lr(5e-2, 32_561) == pytest.approx(2 * 5e-2 / 32_561)
    s = B.make_sampler("pSGLD", B.PRESETS["full"], 32_561)
    assert s.lr(0) == pytest.approx(3.0711e-6, rel=1e-4) and s.alpha == 0.99 and s.eps == 1e-5
    assert B.make_sampler("SGLD", B.PRESETS["full"], 32_561).lr(0) == pytest.approx(s.lr(0))
    # the paper's schedule: kept after iterations 500 + 50 k, recorded on a grid that contains them
    full = B.PRESETS["full"]
    assert (full.num_steps, full.burn_in, full.thin, full.batch_size, full.prior_var) == (15_000, 500, 50, 50, 10.0)
    assert B.record_every(full) == 50
    steps = torch.arange(50, 15_001, 50)
    keep = B.kept_mask(steps, 500, 50)
    assert int(keep.sum()) == 290 and int(steps[keep][0]) == 550 and int(steps[keep][-1]) == 15_000
    assert B.record_every(B.PRESETS["tiny"]) == 10


def test_quantile_bins_merge_ties():
    v = np.array([0.0] * 90 + [5.0, 7.0, 100.0] * 3 + [1.0])  # mostly zeros, like capital-gain
    e = B.quantile_edges(v, 5)
    assert e.tolist() == [0.0]
    oh = B.one_hot_bins(v, e)
    assert oh.shape == (100, 2) and oh.sum(1).tolist() == [1.0] * 100 and oh[:90, 0].sum() == 90
    e = B.quantile_edges(np.arange(100.0), 5)
    assert len(e) == 4 and B.one_hot_bins(np.arange(100.0), e).sum(0).tolist() == [20.0] * 5


def test_convergence_iterations():
    steps = [100, 200, 300, 400, 500]
    curve = [math.nan, 15.0, 14.8, 15.2, 14.9]
    assert B.settle_iteration(steps, curve, 15.0) == 500  # leaves the band at 400
    assert B.first_iteration(steps, curve, 15.0) == 200
    assert B.settle_iteration(steps, [16, 15, 15, 15, 15], 15.0) == 200
    assert B.settle_iteration(steps, [15, 15, 15, 15, 16], 15.0) is None


def test_a9a_like_encoding_of_the_adult_files():
    root = _adult_dir()
    cfg = B.Config(map_reference=False)
    data = B.load_data(cfg, root)
    x, xt = data["x_train"], data["x_test"]
    assert x.shape == (32_561, 121) and xt.shape == (16_281, 121) and data["source"]["source"] == "files"
    assert set(torch.unique(x).tolist()) == {0.0, 1.0}  # binary, like a9a
    assert {k: len(v) + 1 for k, v in data["edges"].items()} == {
        "age": 5,
        "fnlwgt": 5,
        "education-num": 4,
        "capital-gain": 2,
        "capital-loss": 2,
        "hours-per-week": 4,
    }
    assert float(x[:, :22].sum(1).min()) == 6 == float(x[:, :22].sum(1).max())  # one bin per numeric attribute
    assert x.sum(1).max() <= 14 and len(data["names"]) == 121
    std = B.load_data(replace(cfg, encoding="standardized"), root)
    assert std["x_train"].shape == (32_561, 105) and torch.equal(std["y_test"], data["y_test"])


# -- the experiment --------------------------------------------------------------------------------
def _check_report(out, report):
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk == report
    assert set(REPORT_FIELDS) <= set(on_disk)
    assert on_disk["comparisons"] and all(set(COMPARISON_FIELDS) <= set(c) for c in on_disk["comparisons"])
    assert on_disk["figures"] == [B.FIGURE, B.FIGURE.replace(".png", "-T1.png")]  # the paper's T = 1/N first
    png = out / B.FIGURE
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert (out / "report.md").is_file() and "## Paper vs ours" in (out / "report.md").read_text()
    return on_disk


def test_tiny_preset_on_adult_end_to_end(tmp_path):
    root = _adult_dir()
    out = tmp_path / "run"
    report = B.run("tiny", out, progress=False, data_dir=root)
    rep = _check_report(out, report)
    assert rep["preset"] == "tiny" and rep["reduced"] is True and rep["seed"] == 0
    assert any("lr" in s and "2ε/N" in s for s in rep["step_size_mapping"])
    data = rep["numbers"]["data"]
    assert data["source"] == "files" and data["num_train"] == 4000 and data["dim"] == 121
    assert rep["numbers"]["library_lr"] == pytest.approx(2 * 5e-2 / 4000)
    assert 20 < data["majority_error_test_pct"] < 28
    samplers = rep["numbers"]["samplers"]
    for name in ("pSGLD", "SGLD"):
        s = samplers[name]
        # far better than predicting the majority class (~24 %), and a bit worse than a9a's ~15 %
        assert 13.0 < s["test_error_pct"] < 18.0, s["test_error_pct"]
        assert s["num_kept_draws"] == (1500 - 100) // 10 == 140
        assert len(s["curve"]["posterior_predictive"]) == len(rep["numbers"]["curve_iterations"]) == 150
    # both temperatures judged side by side; the tally and numbers["samplers"] are the authors' T = 1/N
    assert rep["paper_setting"] == "T = 1/N" and set(rep["numbers"]["by_temperature"]) == {"T = 1", "T = 1/N"}
    assert rep["verdicts"] == rep["verdicts_by_setting"]["T = 1/N"]
    assert {c["setting"] for c in rep["comparisons"]} == {"", "T = 1", "T = 1/N"}  # "": the VI values, not run
    rows = {c["quantity"].split(" (")[0]: c for c in rep["comparisons"] if c["setting"] == "T = 1/N"}
    assert rows["pSGLD test error"]["paper"] == 14.85 and rows["SGLD test error"]["paper"] == 14.85
    assert all(
        c["verdict"].split(":")[0] in ("reproduced", "not reproduced", "same ordering, smaller margin")
        for c in rep["comparisons"]
        if c["setting"]
    )
    assert all(c["verdict"].startswith("not run") for c in rep["comparisons"] if not c["setting"])

    # the posterior predictive is that of the thinned draws on disk (iterations 100 + 10 k)
    chain = load_chain(out / "runs" / "psgld-seed0-T1overN")
    keep = B.kept_mask(chain.draw_steps, 100, 10)
    draws = chain.samples[0][keep]
    assert draws.shape[0] == 140
    d = B.load_data(replace(B.PRESETS["tiny"], map_reference=False), root)
    p = torch.sigmoid(d["x_test"] @ draws.T).to(torch.float64).mean(1)
    err = 100 * float(((p > 0.5).to(torch.float64) != d["y_test"].to(torch.float64)).to(torch.float64).mean())
    assert err == pytest.approx(samplers["pSGLD"]["test_error_pct"], abs=1e-9)

    # same seed: the same numbers (fresh folder); resume=True reads the finished runs back
    again = B.run("tiny", tmp_path / "again", progress=False, data_dir=root)
    resumed = B.run("tiny", out, progress=False, data_dir=root, resume=True)
    # a run stopped at 800 iterations and resumed to 1,500 is the uninterrupted run
    B.run(replace(B.PRESETS["tiny"], num_steps=800), tmp_path / "cut", progress=False, data_dir=root)
    extended = B.run("tiny", tmp_path / "cut", progress=False, data_dir=root, resume=True)
    for other in (again, resumed, extended):
        for name in ("pSGLD", "SGLD"):
            assert other["numbers"]["samplers"][name]["test_error_pct"] == samplers[name]["test_error_pct"]
            assert other["numbers"]["samplers"][name]["curve"] == samplers[name]["curve"]
    other_seed = B.run("tiny", tmp_path / "seed1", progress=False, data_dir=root, seed=1)
    assert other_seed["seed"] == 1
    assert other_seed["numbers"]["samplers"]["SGLD"]["curve"] != samplers["SGLD"]["curve"]


def test_no_data_falls_back_to_the_synthetic_stand_in(no_files, tmp_path):
    out = tmp_path / "run"
    report = B.run("tiny", out, progress=False)
    rep = _check_report(out, report)
    data = rep["numbers"]["data"]
    assert data["source"] == "synthetic" and "not found" in data["reason"] and data["dim"] == 123
    assert any("synthetic" in n.lower() for n in rep["notes"])
    assert "synthetic" in (out / "report.md").read_text().lower()
    # nothing is judged against a9a's numbers on the stand-in: every claim stays, "not run", and
    # the report says it ran on a stand-in (issue 35 §5)
    assert all(c["verdict"].startswith("not run") for c in rep["comparisons"])
    assert rep["verdicts"]["claims"] == 10 and rep["verdicts"]["run"] == 0
    assert rep["stand_in"] and "Stand-in data" in (out / "report.md").read_text()
    errors = {k: v["test_error_pct"] for k, v in rep["numbers"]["samplers"].items()}
    assert max(errors.values()) < data["majority_error_test_pct"] - 2
    # pSGLD reaches the stand-in's MAP error in 1,500 iterations (SGLD, slower, is still above it)
    assert errors["pSGLD"] < rep["numbers"]["map_reference"]["synthetic"]["test_error"] + 1.0
    with pytest.raises(DataError, match="adult"):
        B.run(replace(B.PRESETS["tiny"], data="files"), tmp_path / "files", progress=False)
    for preset in ("quick", "full"):  # the paper's presets refuse before compute
        with pytest.raises(DataError, match="adult"):
            B.run(preset, tmp_path / preset, progress=False)


def test_registry_and_presets():
    assert E.get("psgld-blr") is B
    exp = E.REGISTRY.get("psgld-blr")
    assert exp.paper is E.PAPERS["psgld"] and {"tiny", "quick", "full"} <= set(exp.presets)
    assert exp.published["test_error_pct"]["pSGLD"] == 14.85
    for name in ("quick", "full"):  # every run at the paper's settings: nothing reduced
        assert B._reductions(B.PRESETS[name]) == []
        assert B.PRESETS[name].encoding == "a9a-like" and B.PRESETS[name].step == 5e-2
    with pytest.raises(ValueError, match="unknown preset"):
        B.run("huge", "/nonexistent")
    with pytest.raises(ValueError, match="encoding"):
        B.load_data(B.Config(encoding="raw"))


Z = [1.0, -1.0] * 10  # 20 seeds around a value, sd 1.026 (before scaling)
SEED_SD = 0.03  # about one seed's sd in the full record (0.008-0.048 pp)


def _res(answer, claim=None):
    """_comparisons' input for ``answer[sampler]["error"]`` (20 seeds with sd SEED_SD around it; a
    sampler left out of the answer is not run), ``claim`` the convergence numbers (None: no curve)."""
    res = {
        name: {
            "test_error_pct": d["error"],
            "test_error_sd_over_seeds": SEED_SD,
            "test_error_per_seed": [d["error"] + SEED_SD * z for z in Z],
            "num_kept_draws": 290,
            "psgld_level_pct": d["error"] + 0.2,
        }
        for name, d in answer.items()
    }
    res["_claim"] = claim
    return res


def _rows(answer, claim=None):
    from structmc_papers import psgld_blr as pb

    cfg = pb.Config(samplers=tuple(answer))
    return pb._comparisons(cfg, _res(answer, claim), files=True) + pb.common_rows()


def _paper():
    from structmc_papers import psgld_blr as pb

    pub = pb._published()
    return {"pSGLD": {"error": pub["pSGLD"]}, "SGLD": {"error": pub["SGLD"]}}


def _beyond(method, cell, value):
    """A value row's allowed difference computed here: 3·√(SE_seeds² + rounding²) (k = 3)."""
    import math

    from structmc_papers._report import seed_se

    return 3 * math.hypot(seed_se([value + SEED_SD * z for z in Z]), 0.005 / math.sqrt(3))


def test_value_rows_are_judged_on_the_seed_spread():
    """Each published error is a claim judged on the noise of both sides (issue 35 §1): our
    seed-mean's SE (sd / √seeds) and the published rounding; another method's published number
    (L-BFGS-SGVI's 14.91 %, 0.06 pp away) is not pSGLD's 14.85 %, and a one-seed answer is
    judged on the binomial SE of the 16,281 test rows."""
    from structmc_papers import psgld_blr as pb
    from structmc_papers._report import REPRODUCED

    pub = pb._published()
    values = [r for r in _rows(_paper()) if r.quantity.endswith("draws)")]
    assert len(values) == 2 and all(r.verdict == REPRODUCED for r in values)
    assert all("sd over 20 seeds" in r.rule.describe() and "rounding" in r.rule.describe() for r in values)
    for other in ("DSVI", "L-BFGS-SGVI", "HFSGVI"):  # another method's number is not pSGLD's
        rows = _rows({m: {"error": pub[other]} for m in ("pSGLD", "SGLD")})
        assert not any(r.verdict.startswith(REPRODUCED) for r in rows if r.quantity.endswith("draws)")), other
    one = pb._comparisons(pb.Config(), {"pSGLD": {**_res(_paper())["pSGLD"], "test_error_per_seed": [14.85]}}, True)
    assert "binomial SE of 16,281" in one[0].rule.describe()


def test_the_five_families_of_issue_35():
    """Table 1's pSGLD and SGLD are both 14.85 %, so a constant, a swap or a reversal of the two is
    the paper's own answer (the issue-26 families say nothing here). The paper's numbers pass the
    run claims (2 values, "equal" (weak), 2 orderings against the VI values; convergence needs
    learning curves; the VI values are not run: 10 claims). Offsets just beyond each value's noise
    fail both values, and the orderings against the VI values are then not carried (an ordering
    counts only while half of the published values are reproduced): at most a quarter; right order
    ×10 or below zero, NaN in every sampler, fractions: at most a quarter; NaN in one sampler fails
    its rows; a sampler not run keeps the denominator, its rows "not run"."""
    from structmc_papers._report import NOT_REPRODUCED, NOT_RUN

    from .adversarial import absurd, at_most_a_quarter, fractions, missing_method, non_finite, offsets, passes

    paper = _paper()
    assert passes(_rows(paper)) == (5, 10)
    claim = {"psgld_converged_at": 1300, "sgld_reaches_psgld_level_at": 5900, "ratio": 5900 / 1300}
    assert passes(_rows(paper, claim)) == (7, 10)
    for j in range(3):  # the orderings against the VI values are not carried when both values fail
        rows = _rows(list(offsets(paper, _beyond))[j])
        at_most_a_quarter(rows, f"offsets {j}")
        assert all(r.verdict.startswith(NOT_REPRODUCED) for r in rows if r.quantity.endswith("draws)"))
    for j, answer in enumerate(absurd(paper, low=0.0, high=100.0)):
        at_most_a_quarter(_rows(answer), f"absurd {j}")
    # fractions (0.1485 "%") fail both values; the orderings against the VI values then are not carried
    at_most_a_quarter(_rows(fractions(paper)), "fractions")
    answers = list(non_finite(paper))
    at_most_a_quarter(_rows(answers[-1]), "NaN everywhere")
    for answer in answers[:-1]:
        rows = _rows(answer)
        assert passes(rows)[1] == 10
        bad = next(m for m, d in answer.items() if d["error"] != d["error"] or abs(d["error"]) == float("inf"))
        assert next(r for r in rows if r.quantity.startswith(f"{bad} test error")).verdict.startswith(NOT_REPRODUCED)
        assert all(r.verdict.startswith(NOT_REPRODUCED) for r in rows if "SG-MCMC" in r.quantity)
    for method, answer in missing_method(paper):
        rows = _rows(answer)
        assert passes(rows)[1] == 10, method
        assert next(r for r in rows if r.quantity.startswith(f"{method} test error")).verdict.startswith(NOT_RUN)
        assert all(r.verdict.startswith(NOT_RUN) for r in rows if "SG-MCMC" in r.quantity or "−" in r.quantity)


def test_the_tally_equals_the_readme_count(tmp_path):

    from .adversarial import offsets, written_tally

    for answer in [_paper(), *offsets(_paper(), _beyond)]:
        rows = _rows(answer)
        written_tally(tmp_path, "psgld-blr", rows)  # passes() == the README tally
