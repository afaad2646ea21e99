"""The common report format: verdict rules on synthetic numbers, and the files written."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from structmc_papers import REGISTRY
from structmc_papers._report import (
    COMPARISON_FIELDS,
    NOT_REPRODUCED,
    REPORT_FIELDS,
    REPRODUCED,
    SMALLER_MARGIN,
    TIED,
    Comparison,
    Ordering,
    Tolerance,
    row_comparison,
    verdict_counts,
    write_report,
)


def test_tolerance_reproduced_and_failed_rows():
    rule = Tolerance(abs=0.2, rel=0.1)  # allowed: 0.2 + 0.1 * |paper|
    assert rule.judge(1.55, 1.40) == REPRODUCED  # |0.15| <= 0.34
    assert rule.judge(1.74, 1.40) == REPRODUCED  # 0.34 exactly
    v = rule.judge(1.80, 1.40)
    assert v.startswith(NOT_REPRODUCED) and "+0.4" in v and "0.34" in v
    # issue 35 §4: a non-finite value is a failed claim, never dropped; a missing one was not run
    assert rule.judge(math.nan, 1.4) == "not reproduced: the run produced nan"
    assert rule.judge(math.inf, 1.4) == "not reproduced: the run produced inf"
    assert rule.judge(None, 1.4).startswith("not run")
    with pytest.raises(ValueError):
        Tolerance()


def test_ordering_reproduced_smaller_margin_and_reversed():
    rule = Ordering(("pSGLD", "SGLD"), lower_is_better=True, margin=0.5)
    assert rule.judge([1.2, 1.6], [1.26, 1.41]) == REPRODUCED  # same ranking, margin 0.4 >= 0.5 * 0.15
    assert rule.judge([1.30, 1.35], [1.26, 1.41]).startswith(SMALLER_MARGIN)  # 0.05 < 0.075
    v = rule.judge([1.5, 1.3], [1.26, 1.41])
    assert v.startswith(NOT_REPRODUCED) and "SGLD (1.3) beats pSGLD (1.5)" in v
    higher = Ordering(("Sd", "S", "base"), lower_is_better=False, tie=0.01)
    assert higher.judge([0.963, 0.955, 0.942], [0.963, 0.950, 0.942]) == REPRODUCED
    # S and base reversed within the tie 0.01: tied, never "reproduced" (issue 26 §1)
    assert higher.judge([0.963, 0.941, 0.9415], [0.963, 0.950, 0.942]).startswith(TIED)
    with pytest.raises(ValueError):
        higher.judge([1, 2], [1, 2, 3])


def test_a_reversed_ordering_is_never_reproduced_nor_same_ordering():
    """The audit's case: the paper has 8 < 9, ours 9.6 vs 9.0 (reversed) with a tie of 0.7 was
    "reproduced" at margin 0 and "same ordering, smaller margin" at margin 1."""
    for margin in (0.0, 0.5, 1.0):
        v = Ordering(("a", "b"), lower_is_better=True, margin=margin, tie=0.7).judge([9.6, 9.0], [8.0, 9.0])
        assert v.startswith(TIED) and "neither shown nor contradicted" in v, v
    # adversarial: random paper values, ours any reversal of them (scaled, shifted): never passes
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        n = int(torch.randint(2, 5, (1,), generator=g))
        paper = torch.randn(n, generator=g).tolist()
        lower = bool(torch.rand(1, generator=g) < 0.5)
        rule = Ordering(
            tuple("abcd"[:n]),
            lower_is_better=lower,
            margin=float(torch.rand(1, generator=g)),
            tie=float(torch.rand(1, generator=g)),
        )
        ranked = sorted(paper, reverse=not lower)
        reversed_values = {v: w for v, w in zip(ranked, reversed(ranked))}
        ours = [3.0 * reversed_values[v] + 1.0 for v in paper]
        verdict = rule.judge(ours, paper)
        assert not verdict.startswith((REPRODUCED, SMALLER_MARGIN)), (paper, ours, verdict)
        # constants: no ordering shown
        assert not rule.judge([0.5] * n, paper).startswith((REPRODUCED, SMALLER_MARGIN))


def test_checks_are_reported_but_not_counted():
    rows = [
        Comparison("a claim", 1.0, 1.0, Tolerance(abs=0.1)),
        Comparison("ours, true by construction", 1.0, 1.0, Tolerance(abs=0.1), check=True, check_reason="ours"),
    ]
    assert rows[1].verdict == "check (reproduced)"
    counts = verdict_counts(rows)
    assert counts[REPRODUCED] == 1 and counts["claims"] == 1 and counts["check"] == 1
    with pytest.raises(ValueError, match="check_reason"):  # a check says why it is not a claim (issue 35 §1)
        Comparison("a published value", 1.0, 1.0, Tolerance(abs=0.1), check=True)


def test_write_report_has_every_field_and_a_table(tmp_path):
    exp = REGISTRY.get("ssgmcmc-linreg")
    rows = [
        Comparison("test error, pSGLD", 1.3, 1.26, Tolerance(abs=0.2), unit="%"),
        Comparison("ranking", [1.3, 1.5], [1.26, 1.41], Ordering(("pSGLD", "SGLD"))),
        Comparison("ESS, not published", 120.0, None),
    ]
    report = write_report(
        tmp_path,
        experiment=exp,
        preset="tiny",
        config={"epochs": 1},
        seed=3,
        comparisons=rows,
        numbers={"curve": [1.0, math.inf]},
        wall_time_s=1.5,
        step_sizes=["ε = 5e-4 -> lr = 2ε/N"],
        reductions=["1 epoch instead of 100: accuracy lower"],
        figures=["fig.png"],
    )
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk == report and set(REPORT_FIELDS) <= set(on_disk)
    assert all(set(COMPARISON_FIELDS) <= set(c) for c in on_disk["comparisons"])
    assert on_disk["numbers"]["curve"] == [1.0, "inf"] and on_disk["reduced"] is True
    assert on_disk["verdicts"] == {
        REPRODUCED: 2,
        SMALLER_MARGIN: 0,
        TIED: 0,
        NOT_REPRODUCED: 0,
        "not run": 0,
        "check": 0,
        "claims": 2,
        "run": 2,
    }
    assert abs(on_disk["comparisons"][0]["difference"] - 0.04) < 1e-12
    md = (tmp_path / "report.md").read_text()
    assert "| test error, pSGLD | 1.26 % | 1.3 % |" in md and "**reproduced**" in md
    assert "Reduced from the paper's settings" in md and "lr = 2ε/N" in md and "![fig](fig.png)" in md


def test_claim_rows():
    from structmc_papers._report import Claim

    rule = Claim("|corr| falls: SGLD > Sd > S", lambda v: v[0] > v[1] > v[2])
    assert Comparison("|corr(w1, w2)|", [0.9, 0.5, 0.02], "figure", rule).verdict == REPRODUCED
    assert Comparison("|corr(w1, w2)|", [0.9, 0.95, 0.02], "figure", rule).verdict.startswith(NOT_REPRODUCED)


def test_mamba_method_rows_compare_the_winners_sampler_by_sampler():
    """A method that is near the best on as many samplers as in the paper, but on other ones,
    passed the former count rule (±1 sampler); per sampler it differs (issue 26 §1)."""
    from structmc_papers import _mamba as M

    samplers = ["SGLD", "SGHMC", "SGNHT"]
    paper = {"MAMBA": [1.0, 5.0, 1.0], "Grid": [5.0, 1.0, 5.0]}
    same = M.method_rows("ksd", "KSD", "Table 1", paper, paper, samplers)
    assert all(r["verdict"] == "agrees" and r["samplers_differing"] == [] for r in same)
    swapped = {"MAMBA": [5.0, 1.0, 1.0], "Grid": [1.0, 5.0, 5.0]}  # MAMBA still near-best on 2 samplers
    rows = {r["method"]: r for r in M.method_rows("ksd", "KSD", "Table 1", swapped, paper, samplers)}
    assert rows["MAMBA"]["ours_count"] == rows["MAMBA"]["paper_count"] == 2  # the old rule: "agrees"
    assert rows["MAMBA"]["verdict"] == "differs" and rows["MAMBA"]["samplers_differing"] == ["SGLD", "SGHMC"]
    c = row_comparison(rows["MAMBA"] | {"magnitude": ""})
    assert c.verdict.startswith(NOT_REPRODUCED) and c.ours == 2


def test_a_report_judged_under_two_settings_tallies_the_papers(tmp_path):
    """Issue 26 §2: rows of the posterior (T = 1) and of the authors' temperature side by side,
    each with its verdicts; the tally counts the setting the paper's numbers come from, and a
    paper_setting that no row has is refused."""
    from structmc_papers import REGISTRY
    from structmc_papers._report import Comparison, Tolerance, write_report

    rows = [
        Comparison("error", 1.0, 1.0, Tolerance(abs=0.1), setting="T = 1", note="Fig. 2"),
        Comparison("error", 2.0, 1.0, Tolerance(abs=0.1), setting="T = 1/N", note="Fig. 2"),
        Comparison("shared", 5.0, 5.0, Tolerance(abs=0.1)),
    ]
    exp = REGISTRY.get("psgld-fnn")
    kw = dict(experiment=exp, preset="tiny", config={}, seed=0, numbers={}, wall_time_s=0.0)
    with pytest.raises(ValueError, match="paper_setting"):
        write_report(tmp_path, comparisons=rows, paper_setting="T = 2", **kw)
    report = write_report(tmp_path, comparisons=rows, paper_setting="T = 1/N", **kw)
    assert report["verdicts"]["reproduced"] == 1 and report["verdicts"]["not reproduced"] == 1
    assert report["verdicts_by_setting"]["T = 1"]["reproduced"] == 2
    md = (tmp_path / "report.md").read_text()
    assert "| T = 1/N | error |" in md and "| all | shared |" in md and "**T = 1/N**" in md
    assert md.count("- *error*: Fig. 2") == 1  # the row's note, once for both settings
    single = write_report(tmp_path / "one", comparisons=rows[2:], **kw)  # one setting: no column
    assert single["verdicts_by_setting"] == {} and "| setting |" not in (tmp_path / "one" / "report.md").read_text()


def test_the_results_table_tallies_claims_only(tmp_path):
    """The README/docs results table: checks and the other run setting's rows are not counted;
    ``structmc reproduce --table`` prints it for the reports under a folder."""
    from structmc.cli import main
    from structmc_papers import REGISTRY
    from structmc_papers._report import Comparison, Tolerance, claim_tally, results_table, write_report

    rows = [
        Comparison("a", 1.0, 1.0, Tolerance(abs=0.1), setting="T = 1/N"),
        Comparison("a", 3.0, 1.0, Tolerance(abs=0.1), setting="T = 1"),
        Comparison("b", 2.0, 1.0, Tolerance(abs=0.1)),
        Comparison("ours", 1.0, 1.0, Tolerance(abs=0.1), check=True, check_reason="our own target"),
        Comparison("c", None, 1.0, Tolerance(abs=0.1), not_run="needs a GPU"),
    ]
    kw = dict(experiment=REGISTRY.get("psgld-fnn"), preset="quick", config={}, seed=0, numbers={}, wall_time_s=90.0)
    report = write_report(tmp_path / "r", comparisons=rows, paper_setting="T = 1/N", **kw)
    t = claim_tally(report)
    assert (t["reproduced"], t["not reproduced"], t["not run"], t["check"], t["claims"], t["run"]) == (1, 1, 1, 1, 3, 2)
    table = results_table([report])
    # claims in the paper 3, run 2, reproduced 1, ... not reproduced 1, not run 1, checks 1
    assert "| `psgld-fnn` |" in table and "| 3 | 2 | **1** | 0 | 0 | 1 | 1 | 1 | T = 1/N |" in table
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["reproduce", "--table", str(tmp_path)]) == 0
    assert "| 3 | 2 | **1** |" in buf.getvalue()
    # every counted claim that is not reproduced is listed with the paper's number, ours and the
    # rule; the reproduced one, the other setting's row and the check are not
    from structmc_papers._report import unreproduced_table

    failing = unreproduced_table([report])
    assert (
        failing.count("\n| `psgld-fnn` (quick, ") == 2
        and "| b | 1 | 2 | \\|ours − paper\\| ≤ ±0.1 | not reproduced" in failing
    )
    assert "Claims not reproduced" in buf.getvalue() and "| b | 1 | 2 |" in buf.getvalue()
    # --claims: every counted claim, one row each, the reproduced one too (not the check)
    every = io.StringIO()
    with contextlib.redirect_stdout(every):
        assert main(["reproduce", "--table", str(tmp_path), "--claims"]) == 0
    assert every.getvalue().count("\n| `psgld-fnn` (quick, ") == 3 and "| b | 1 | 2 |" in every.getvalue()
    with pytest.raises(SystemExit):
        main(["reproduce", "--table", str(tmp_path / "empty")])


def test_the_results_table_counts_the_work_of_every_sitting():
    from structmc_papers._report import work_seconds

    assert work_seconds({"wall_time_s": 30.0}) == 30.0
    assert work_seconds({"wall_time_s": 30.0, "compute_time_s": 4000.0}) == 4000.0  # resumed
    # a Gibbs report whose chains were read back from checkpoints (before compute_time_s)
    resumed = {"wall_time_s": 47.0, "numbers": {"runs": {"mnist/b3000": {"seconds": 6366.0}}}}
    assert work_seconds(resumed) == 47.0 + 6366.0
    fresh = {"wall_time_s": 100.0, "numbers": {"runs": {"a": {"seconds": 60.0}, "b": {"seconds": 30.0}}}}
    assert work_seconds(fresh) == 100.0  # its sampling is part of its call


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="contention reads /proc (Linux)")
def test_the_report_says_how_much_of_the_machine_the_run_had():
    import time as _time

    from structmc_papers._report import hardware

    t0 = _time.process_time()
    while _time.process_time() - t0 < 0.2:  # some CPU of our own
        pass
    hw = hardware()
    assert hw["process_cpu_s"] >= 0.2 and hw["process_wall_s"] > 0
    assert 0 < hw["cores_used"] <= (os.cpu_count() or 1) + 0.5 and len(hw["load_average"]) == 3


def test_report_tables_keep_a_rule_with_pipes_in_its_cell_and_figures_appear_once(tmp_path):
    import re

    exp = REGISTRY.get("ssgmcmc-linreg")
    write_report(
        tmp_path,
        experiment=exp,
        preset="tiny",
        config={},
        seed=0,
        comparisons=[Comparison("test error, pSGLD", 1.3, 1.26, Tolerance(abs=0.2), unit="%")],
        numbers={},
        wall_time_s=1.0,
        figures=["shown.png", "other.png"],
        extra_md="## Details\n\n![shown](shown.png)\n",
    )
    md = (tmp_path / "report.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| quantity |"))
    row = next(line for line in md.splitlines() if line.startswith("| test error, pSGLD |"))
    cells = lambda line: re.split(r"(?<!\\)\|", line)  # noqa: E731 (unescaped pipes only)
    assert len(cells(row)) == len(cells(header)), row
    assert "\\|ours − paper\\|" in row
    assert md.count("](shown.png)") == 1 and md.count("](other.png)") == 1
    assert " thread" in md and " 1 threads" not in md


def test_report_header_counts_one_core_in_the_singular(tmp_path):
    from structmc_papers._report import render_markdown

    report = write_report(
        tmp_path,
        experiment=REGISTRY.get("ssgmcmc-linreg"),
        preset="tiny",
        config={},
        seed=0,
        comparisons=[Comparison("test error, pSGLD", 1.3, 1.26, Tolerance(abs=0.2), unit="%")],
        numbers={},
        wall_time_s=1.0,
    )
    for used, words in ((1.0, "used 1 core on average"), (0.5, "used 0.5 cores on average")):
        report["hardware"] = {**report["hardware"], "cores_used": used, "load_average": [1.0, 1.0, 1.0]}
        assert words in render_markdown(report)


def test_claims_table_keeps_its_columns_with_pipes_in_any_cell(tmp_path):
    import re

    from structmc_papers._report import claims_table

    rows = [Comparison("max |var/q − 1| at 10^6 steps", 0.0, 0.35, Tolerance(abs=0.1), note="see |x|")]
    report = write_report(
        tmp_path,
        experiment=REGISTRY.get("ssgmcmc-theorem1"),
        preset="tiny",
        config={},
        seed=0,
        comparisons=rows,
        numbers={},
        wall_time_s=1.0,
    )
    lines = claims_table([report]).splitlines()
    cells = lambda line: re.split(r"(?<!\\)\|", line)  # noqa: E731 (unescaped pipes only)
    assert len(lines) == 3 and len(cells(lines[2])) == len(cells(lines[0])), lines[2]
    assert "max \\|var/q − 1\\| at 10^6 steps" in lines[2] and "see \\|x\\|" in lines[2]


def test_a_value_row_is_judged_on_the_noise_of_both_sides():
    """Issue 35 §1: |ours − paper| ≤ k·√(SE_ours² + SE_paper²), the rule stating its numbers."""
    from structmc_papers._report import WithinNoise, binomial_se, seed_se

    rule = WithinNoise(ours_se=0.003, paper_se=0.004, k=3.0, source="5 seeds each")
    assert rule.allowed == pytest.approx(0.015)
    assert rule.judge(0.0360, 0.0236) == REPRODUCED  # 0.0124 ≤ 0.015
    v = rule.judge(0.0400, 0.0236)
    assert v.startswith(NOT_REPRODUCED) and "3.3 combined SEs" in v
    assert "0.015" in rule.describe() and "5 seeds each" in rule.describe()
    assert rule.judge(math.nan, 0.02) == "not reproduced: the run produced nan"
    with pytest.raises(ValueError):
        WithinNoise(ours_se=0.0, paper_se=0.0)
    with pytest.raises(ValueError):
        WithinNoise(ours_se=math.nan)
    assert seed_se([1.0, 2.0, 3.0]) == pytest.approx(1.0 / math.sqrt(3))
    assert math.isnan(seed_se([1.0]))
    assert binomial_se(0.9, 10_000) == pytest.approx(0.003)


def test_implausible_values_fail_whatever_the_rule():
    """Issue 35 §4: an accuracy of 250 %, a negative error or MSE, an IAC below 1, an ESS of 0,
    an ECE of 509 % are "not reproduced: implausible", even where the ordering holds."""
    from structmc_papers._report import plausible_range

    cases = [
        ("test accuracy, SGLD", 250.0, 93.0, "%"),
        ("test error, pSGLD", -5.0, 1.26, "%"),
        ("Housing: test MSE, By Layer", -0.01, 0.024, ""),
        ("IAC of w1, SGLD", 0.5, 3.0, ""),
        ("ESS, S-SGLD", 0.0, 400.0, ""),
        ("SGLD: ECE of MAMBA", 509.0, 0.8, "%"),
        ("acceptance, node 1", 1.3, 0.64, "fraction"),
    ]
    for quantity, ours, paper, unit in cases:
        row = Comparison(quantity, ours, paper, Tolerance(abs=1e9), unit=unit)
        assert row.verdict.startswith("not reproduced: implausible"), (quantity, row.verdict)
    order = Comparison(
        "SGLD: test accuracy of MAMBA, grid", [250.0, 240.0], [93.8, 93.3], Ordering(("MAMBA", "Grid"), False)
    )
    assert order.verdict.startswith("not reproduced: implausible")
    # signed quantities get no range; a valid value passes the check
    assert plausible_range("MSE difference, S − base") is None and plausible_range("log10 h") is None
    assert Comparison("test accuracy", 93.1, 93.0, Tolerance(abs=0.5), unit="%").verdict == REPRODUCED
    assert Comparison("bias of w1", -0.3, -0.3, Tolerance(abs=0.1)).verdict == REPRODUCED


def test_non_finite_values_in_orderings_and_claims_fail_and_missing_ones_stay_counted():
    from structmc_papers._report import Claim, tally

    o = Ordering(("pSGLD", "SGLD"))
    assert o.judge([math.nan, 1.0], [1.0, 2.0]).startswith("not reproduced: the run produced [nan] for pSGLD")
    assert o.judge([None, None], [1.0, 2.0]).startswith("not run")
    c = Claim("a < b", lambda v: v[0] < v[1])
    assert c.judge([math.nan, 1.0], None).startswith("not reproduced: the run produced nan")
    rows = [
        Comparison("a", math.nan, 1.0, Tolerance(abs=0.1)),
        Comparison("b", None, 1.0, Tolerance(abs=0.1), not_run="the preset leaves SGHMC out"),
        Comparison("c", 1.0, 1.0, Tolerance(abs=0.1)),
    ]
    t = tally(rows)
    assert (t["claims"], t["run"], t[REPRODUCED], t[NOT_REPRODUCED], t["not run"]) == (3, 2, 1, 1, 1)
    # an older report's "not comparable" stays in the denominator, as not run
    old = [{"quantity": "x", "verdict": "not comparable: ours nan", "check": False, "setting": ""}]
    assert tally(old)["claims"] == 1 and tally(old)["not run"] == 1


def test_a_weak_claim_cannot_carry_a_tally_by_itself():
    """Issue 35 §4: "no systematic trend" holds for any constant answer; it counts as reproduced
    only while at least half of the report's other claims are."""
    from structmc_papers._report import Claim, tally

    weak = Comparison("no trend", 0.0, 0.5, Claim("spread ≤ 2 sds", lambda r: r <= 2, weak=True))
    assert weak.verdict == REPRODUCED and weak.weak
    bad = [Comparison(f"MSE {k}", 0.3, 0.03, WithinNoise_(), unit="") for k in range(3)]
    t = tally([weak, *bad])
    assert t[REPRODUCED] == 0 and t[NOT_REPRODUCED] == 4
    good = [Comparison(f"MSE {k}", 0.031, 0.03, WithinNoise_(), unit="") for k in range(3)]
    assert tally([weak, *good])[REPRODUCED] == 4
    assert tally([weak])[REPRODUCED] == 0  # alone it carries nothing


def WithinNoise_():
    from structmc_papers._report import WithinNoise

    return WithinNoise(ours_se=0.001, paper_se=0.001)


def test_a_preset_beyond_tiny_refuses_stand_in_data_before_compute(tmp_path, monkeypatch):
    """Issue 35 §5: `structmc reproduce psgld-australian --preset full` with no data file exits 2
    naming the file and the switch that downloads it, before any compute; tiny runs on the
    stand-in and says so."""
    import contextlib
    import io

    from structmc.cli import main

    monkeypatch.setenv("STRUCTMC_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("STRUCTMC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("STRUCTMC_NO_SHARED_DATA", "1")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["reproduce", "psgld-australian", "--preset", "full", "--out", str(tmp_path / "run")])
    assert rc == 2
    assert "statlog-australian/australian.dat" in err.getvalue() and "--download" in err.getvalue()
    assert not (tmp_path / "run" / "report.json").exists()
    from structmc_papers import get, resolve_preset

    for preset in ("quick", "full"):
        cfg, _ = resolve_preset(preset, get("psgld-australian").PRESETS)
        assert cfg.data == "files"
    assert resolve_preset("tiny", get("psgld-australian").PRESETS)[0].data == "auto"


def test_an_ordering_cannot_carry_a_report_whose_published_values_fail():
    """Issue 35 §4: the paper's numbers offset per method beyond the tolerance, ×10, or in other
    units keep every ordering; an ordering counts only while at least half of the report's
    published values are reproduced."""
    from structmc_papers._report import tally

    def rows(scale, shift=0.0):
        ours = [1.40 * scale + shift, 1.64 * scale + shift]
        return [
            Comparison("error, pSGLD", ours[0], 1.40, Tolerance(abs=0.05), unit="%"),
            Comparison("error, SGLD", ours[1], 1.64, Tolerance(abs=0.05), unit="%"),
            Comparison("pSGLD beats SGLD", ours, [1.40, 1.64], Ordering(("pSGLD", "SGLD"))),
        ]

    assert tally(rows(1.0))[REPRODUCED] == 3
    for wrong in (rows(10.0), rows(0.01), rows(1.0, shift=0.3)):
        t = tally(wrong)
        assert t[REPRODUCED] == 0 and t[NOT_REPRODUCED] == 3, t
    half = rows(1.0)
    half[1] = Comparison("error, SGLD", 1.80, 1.64, Tolerance(abs=0.05), unit="%")  # one of two values: carried
    assert tally(half)[REPRODUCED] == 2


def test_write_report_writes_each_verdict_as_the_tally_counts_it(tmp_path):
    from structmc_papers._report import claim_tally

    rows = [
        Comparison("error, pSGLD", 14.0, 1.40, Tolerance(abs=0.05)),
        Comparison("error, SGLD", 16.4, 1.64, Tolerance(abs=0.05)),
        Comparison("pSGLD beats SGLD", [14.0, 16.4], [1.40, 1.64], Ordering(("pSGLD", "SGLD"))),
    ]
    report = write_report(
        tmp_path, experiment=REGISTRY.get("psgld-fnn"), preset="full", config={}, seed=0, comparisons=rows,
        numbers={}, wall_time_s=1.0,
    )  # fmt: skip
    assert report["comparisons"][2]["verdict"].startswith("not reproduced: an ordering is not carried")
    assert claim_tally(report)[REPRODUCED] == 0 and "not carried" in (tmp_path / "report.md").read_text()
