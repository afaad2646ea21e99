"""psgld-fnn (Table 2 of the pSGLD paper): tiny end to end, the step-size mapping, no-data fallback."""

from __future__ import annotations

import json

import pytest

from structmc.experiments import get
from structmc.experiments._report import COMPARISON_FIELDS, REPORT_FIELDS

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
    assert {c["setting"] for c in report["comparisons"]} == {"T = 1", "T = 1/N"}
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


def test_without_the_files_no_row_is_judged(tmp_path, no_files):
    report = fnn.run("tiny", tmp_path, progress=False)
    assert all(c["verdict"] == "no published value" for c in report["comparisons"])
    assert any("synthetic" in n for n in report["notes"])


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
    from structmc.experiments import psgld_fnn as pf

    assert pf.Config().temperatures == (1.0, "1/N")
    for kind in ("psgld", "sgld"):
        assert pf.make_sampler(kind, 60_000, 600, pf.Config()).temperature == 1.0
        assert pf.make_sampler(kind, 60_000, 600, pf.Config(), "1/N").temperature == 1 / 60_000
    for bad in (0.0, -1.0, "1/M"):
        with pytest.raises(ValueError, match="temperature"):
            pf.resolve_temperature(bad, 60_000)


def test_wrong_answers_do_not_pass_the_verdicts():
    """Adversarial numbers (issue 26 §1): the paper's own numbers pass every row; constant
    answers, the paper's numbers shuffled across methods, and every ordering reversed fail most
    rows. The tolerance sits below the smallest gap between the paper's methods."""
    from structmc.experiments import psgld_fnn as pf
    from structmc.experiments._report import REPRODUCED, SMALLER_MARGIN

    cfg = pf.Config()
    paper = {m: dict(d) for m, d in pf.PAPER_ERROR_PCT.items()}
    assert 0.9 * pf.smallest_gap_pct() < pf.smallest_gap_pct() == pytest.approx(0.05)

    def passed(errors):
        rows = pf.comparisons(cfg, errors)
        return sum(r.verdict.startswith((REPRODUCED, SMALLER_MARGIN)) for r in rows), len(rows)

    ok, n = passed(paper)
    assert ok == n == 12  # 9 values, 3 orderings
    methods = list(paper)
    for value in (1.2, 1.3, 1.4, 1.5):  # a constant answer: it can hit a few cells, never most
        assert passed({m: {w: value for w in paper[m]} for m in methods})[0] <= n // 4
    shuffled = {m: {w: paper[methods[(k + 1) % 3]][w] for w in paper[m]} for k, m in enumerate(methods)}
    assert passed(shuffled)[0] <= n // 4
    reversed_ = {m: {} for m in methods}  # at every width the best method gets the worst number, and so on
    for w in paper["SGLD"]:
        ranked = sorted(methods, key=lambda m: paper[m][w])
        for m, other in zip(ranked, reversed(ranked)):
            reversed_[m][w] = paper[other][w]
    assert passed(reversed_)[0] <= n // 4  # the middle method keeps its own number
