"""psgld-fnn (Table 2 of the pSGLD paper): tiny end to end, the step-size mapping, no-data fallback."""

from __future__ import annotations

import json

import pytest

from structmc_papers import get
from structmc_papers._report import COMPARISON_FIELDS, REPORT_FIELDS

fnn = get("psgld-fnn")


def test_step_sizes_map_the_papers_per_datum_epsilon():
    cfg = fnn.PRESETS["full"]
    p = fnn.make_sampler("psgld", 60_000, 600, cfg)
    s = fnn.make_sampler("sgld", 60_000, 600, cfg)
    assert p.lr(0) == pytest.approx(2 * 5e-4 / 60_000) and s.lr(0) == pytest.approx(2 * 0.5 / 60_000)
    assert p.lr(20 * 600) == pytest.approx(p.lr(0) / 2) and p.lr(20 * 600 - 1) == p.lr(0)  # halved every 20 epochs
    assert p.alpha == 0.99 and p.eps == 1e-5 and p.v_init == "first"


def test_tiny_end_to_end(tmp_path):
    report = fnn.run("tiny", tmp_path, progress=False)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert set(REPORT_FIELDS) <= set(on_disk) and all(set(COMPARISON_FIELDS) <= set(c) for c in on_disk["comparisons"])
    by_t = report["numbers"]["results_by_temperature"]
    assert list(by_t) == ["T = 1", "T = 1/N"]  # both temperatures, side by side (issue 26 §2)
    for method in ("pSGLD (σ² = 100)", "SGLD"):
        for res in by_t.values():
            r = res[method]["50"]
            assert r["draws"] > 0 and len(r["curve_pct"]) == 1
            # 1,000 images, 10 steps: far from the paper, but the predictive must beat chance (90%)
            assert r["test_error_pct"] < 85
        assert by_t["T = 1"][method]["50"]["curve_pct"] != by_t["T = 1/N"][method]["50"]["curve_pct"]
    # each setting has its rows and tally; the paper's numbers are the authors' T = 1/N
    assert report["paper_setting"] == "T = 1/N"
    assert {c["setting"] for c in report["comparisons"]} == {"", "T = 1", "T = 1/N"}  # "": rows no setting runs
    assert set(report["verdicts_by_setting"]) == {"T = 1", "T = 1/N"}
    assert report["verdicts"] == report["verdicts_by_setting"]["T = 1/N"]
    assert "| T = 1/N |" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "learning_curves.png").stat().st_size > 5_000
    assert report["reduced"] and any("epochs" in r for r in report["reductions"])
    again = fnn.run("tiny", tmp_path / "again", progress=False)

    def numbers(rep):
        return {
            m: {w: {k: v for k, v in r.items() if k != "seconds"} for w, r in d.items()}
            for t, by_method in rep["numbers"]["results_by_temperature"].items()
            for m, d in by_method.items()
        }

    assert numbers(again) == numbers(report)  # same seed, same numbers


def test_without_the_files_tiny_says_stand_in_and_the_others_refuse(tmp_path, no_files):
    """tiny runs on the stand-in, says so (report.md's top, report["stand_in"]) and leaves every
    claim not run (still counted); quick, converged and full refuse before compute."""
    report = fnn.run("tiny", tmp_path, progress=False)
    assert all(c["verdict"].startswith("not run") for c in report["comparisons"])
    assert report["verdicts"]["claims"] == 37 and report["verdicts"]["run"] == 0
    assert report["stand_in"] and "Stand-in data" in (tmp_path / "report.md").read_text()
    assert any("synthetic" in n for n in report["notes"])
    for preset in ("quick", "converged", "full"):
        with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte.gz"):
            fnn.run(preset, tmp_path / preset, progress=False)


def test_an_interrupted_run_resumes_to_the_uninterrupted_numbers(tmp_path):
    """The chains are sampled through structmc.sample with a checkpoint every epoch: a run of 1
    epoch continued with resume=True to 2 gives the 2-epoch run's numbers exactly."""
    from dataclasses import replace

    cfg2 = replace(fnn.PRESETS["tiny"], epochs=2)
    whole = fnn.run(cfg2, tmp_path / "whole", progress=False)
    fnn.run(replace(cfg2, epochs=1), tmp_path / "split", progress=False)
    resumed = fnn.run(cfg2, tmp_path / "split", progress=False, resume=True)

    def numbers(rep):
        return {
            (t, m): {w: {k: v for k, v in r.items() if k != "seconds"} for w, r in d.items()}
            for t, by_method in rep["numbers"]["results_by_temperature"].items()
            for m, d in by_method.items()
        }

    assert numbers(resumed) == numbers(whole)
    assert len(next(iter(numbers(whole).values()))["50"]["curve_pct"]) == 2


def test_both_temperatures_run_by_default():
    """The authors' Matlab noise is 1/√N of the posterior's (T = 1/N); both T = 1 and the
    authors' run by default; a bad temperature is refused by name."""
    from structmc_papers import psgld_fnn as pf

    assert pf.Config().temperatures == (1.0, "1/N")
    for kind in ("psgld", "sgld"):
        assert pf.make_sampler(kind, 60_000, 600, pf.Config()).temperature == 1.0
        assert pf.make_sampler(kind, 60_000, 600, pf.Config(), "1/N").temperature == 1 / 60_000
    for bad in (0.0, -1.0, "1/M"):
        with pytest.raises(ValueError, match="temperature"):
            pf.resolve_temperature(bad, 60_000)


PAPER = {m: dict(d) for m, d in fnn.PAPER_ERROR_PCT.items()}


def rows_of(answer, cfg=None):
    """The rows of one setting (plus the common not-run rows) for ``answer[method][width]``."""
    return fnn.comparisons(cfg or fnn.Config(), answer) + fnn.common_rows()


def test_wrong_answers_do_not_pass_the_verdicts():
    """Adversarial numbers (issue 26 §1): the paper's own numbers pass every run row (9 values,
    3 + 3 orderings, 2 size claims; Fig. 4(b) needs curves and the optimiser rows are not run:
    37 claims); constant answers pass at most a quarter. The paper's numbers shuffled across
    methods or with every ordering reversed fail every comparison between methods that they
    reverse, but pass value rows: Table 2's gaps between methods (0.05-0.24 pp) lie within 3
    binomial SEs of 10,000 test images (0.33-0.38 pp), and each value row is judged on its own
    noise (issue 35 §1) — 14 and 11 of 37, pinned so that a looser rule fails here."""
    from .adversarial import constants, passes, reversed_ranks, shuffled

    assert passes(rows_of(PAPER)) == (17, 37)
    for answer in constants(PAPER):
        assert passes(rows_of(answer))[0] <= 37 / 4
    for answer, expected in ((shuffled(PAPER), 14), (reversed_ranks(PAPER), 11)):
        rows = rows_of(answer)
        assert passes(rows)[0] == expected
        assert not any(r.verdict.startswith(("reproduced", "same")) for r in rows if "beats" in r.quantity)


def _numbers(x):
    return [float(v) for v in (x if isinstance(x, list) else [x])]


def _beyond(method, width, value):
    """A value row's allowed difference computed here: 3 binomial SEs of 10,000 test images
    (a loosened rule, k = 30, lets the offsets pass the values and fails the test)."""
    from structmc_papers._report import binomial_se

    return 3 * 100 * binomial_se(value / 100, 10_000)


def test_the_five_families_of_issue_35():
    """Offsets beyond each value's noise, the right order with absurd values, fractions for
    percent and NaN in every method pass at most a quarter of the 37 claims; NaN or inf in one
    method fails that method's every row and keeps the denominator (the other two methods' rows
    at the paper's values still pass: 11 of 37); a method not run keeps the denominator, its rows
    "not run"."""
    import math

    from structmc_papers._report import NOT_REPRODUCED, NOT_RUN

    from .adversarial import absurd, at_most_a_quarter, fractions, missing_method, non_finite, offsets, passes

    for k, answer in enumerate(offsets(PAPER, _beyond)):
        at_most_a_quarter(rows_of(answer), f"offsets {k}")
    for k, answer in enumerate(absurd(PAPER, low=0.0, high=100.0)):
        at_most_a_quarter(rows_of(answer), f"absurd {k}")
    at_most_a_quarter(rows_of(fractions(PAPER)), "fractions")
    answers = list(non_finite(PAPER))
    at_most_a_quarter(rows_of(answers[-1]), "NaN everywhere")
    for answer in answers[:-1]:
        rows = rows_of(answer)
        assert passes(rows)[1] == 37
        hit = [r for r in rows if not r.not_run and not all(math.isfinite(v) for v in _numbers(r.ours))]
        assert hit and all(r.verdict.startswith(NOT_REPRODUCED) for r in hit)
        assert passes(rows)[0] < passes(rows_of(PAPER))[0]
    for method, answer in missing_method(PAPER):
        rows = rows_of(answer)
        assert passes(rows)[1] == 37, method
        values = [r for r in rows if r.quantity.startswith(f"test error, {method}, ")]
        without = [r for r in rows if r.ours is None or (isinstance(r.ours, list) and None in r.ours)]
        assert len(values) == 3 and all(r.verdict.startswith(NOT_RUN) for r in values + without), method


def test_value_rows_are_judged_on_the_binomial_test_set_noise():
    """|ours − paper| ≤ 3·SE, SE the binomial SE of 10,000 test images at our value, stated in
    the rule: 2 SEs away passes, 4 fail."""
    from structmc_papers._report import REPRODUCED

    for z, ok in ((2.0, True), (-2.0, True), (4.0, False), (-4.0, False)):
        answer = {m: {w: v + z * fnn.error_se_pct(v, v) for w, v in d.items()} for m, d in PAPER.items()}
        values = [r for r in rows_of(answer) if r.quantity.startswith("test error") and not r.not_run]
        assert len(values) == 9 and all(r.verdict.startswith(REPRODUCED) == ok for r in values), z
        assert all("binomial" in r.rule.describe() and "10,000" in r.rule.describe() for r in values)


def test_a_preset_that_cuts_widths_and_methods_keeps_their_claims():
    """The converged preset (400-400, pSGLD σ² = 100 and SGLD) has the same 37 claims, the cut ones
    "not run" saying why (Table 2's 800/1200 widths, pSGLD σ² = 1, the size and σ² claims)."""
    from .adversarial import passes

    cfg = fnn.PRESETS["converged"]
    answer = {m: {400: PAPER[m][400]} for m in cfg.methods}
    rows = rows_of(answer, cfg)
    assert passes(rows) == (3, 37)
    cut = {r.quantity: r.verdict for r in rows if r.verdict.startswith("not run")}
    assert "widths 400 only" in cut["test error, SGLD, 800-800"]
    assert "pSGLD (σ² = 1) not in the run's methods" in cut["test error, pSGLD (σ² = 1), 400-400"]


def test_the_tally_equals_the_readme_count(tmp_path):

    from .adversarial import offsets, written_tally

    for answer in [PAPER, *offsets(PAPER, _beyond)]:
        rows = rows_of(answer)
        written_tally(tmp_path, "psgld-fnn", rows)  # passes() == the README tally
