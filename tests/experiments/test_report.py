"""The common report format: verdict rules on synthetic numbers, and the files written."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from structmc.experiments import REGISTRY
from structmc.experiments._report import (
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
    assert rule.judge(math.nan, 1.4).startswith("not comparable")
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
        Comparison("ours, true by construction", 1.0, 1.0, Tolerance(abs=0.1), check=True),
    ]
    assert rows[1].verdict == "check (reproduced)"
    counts = verdict_counts(rows)
    assert counts[REPRODUCED] == 1 and sum(counts.values()) == 1


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
    assert on_disk["verdicts"] == {REPRODUCED: 2, SMALLER_MARGIN: 0, TIED: 0, NOT_REPRODUCED: 0, "not comparable": 0}
    assert abs(on_disk["comparisons"][0]["difference"] - 0.04) < 1e-12
    md = (tmp_path / "report.md").read_text()
    assert "| test error, pSGLD | 1.26 % | 1.3 % |" in md and "**reproduced**" in md
    assert "Reduced from the paper's settings" in md and "lr = 2ε/N" in md and "![fig](fig.png)" in md


def test_claim_rows():
    from structmc.experiments._report import Claim

    rule = Claim("|corr| falls: SGLD > Sd > S", lambda v: v[0] > v[1] > v[2])
    assert Comparison("|corr(w1, w2)|", [0.9, 0.5, 0.02], "figure", rule).verdict == REPRODUCED
    assert Comparison("|corr(w1, w2)|", [0.9, 0.95, 0.02], "figure", rule).verdict.startswith(NOT_REPRODUCED)


def test_mamba_method_rows_compare_the_winners_sampler_by_sampler():
    """A method that is near the best on as many samplers as in the paper, but on other ones,
    passed the former count rule (±1 sampler); per sampler it differs (issue 26 §1)."""
    from structmc.experiments import _mamba as M

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
    from structmc.experiments import REGISTRY
    from structmc.experiments._report import Comparison, Tolerance, write_report

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
    from structmc.experiments import REGISTRY
    from structmc.experiments._report import Comparison, Tolerance, claim_tally, results_table, write_report

    rows = [
        Comparison("a", 1.0, 1.0, Tolerance(abs=0.1), setting="T = 1/N"),
        Comparison("a", 3.0, 1.0, Tolerance(abs=0.1), setting="T = 1"),
        Comparison("b", 2.0, 1.0, Tolerance(abs=0.1)),
        Comparison("ours", 1.0, 1.0, Tolerance(abs=0.1), check=True),
    ]
    kw = dict(experiment=REGISTRY.get("psgld-fnn"), preset="quick", config={}, seed=0, numbers={}, wall_time_s=90.0)
    report = write_report(tmp_path / "r", comparisons=rows, paper_setting="T = 1/N", **kw)
    t = claim_tally(report)
    assert (t["reproduced"], t["not reproduced"], t["check"]) == (1, 1, 1)
    table = results_table([report])
    assert "| `psgld-fnn` |" in table and "**1/2**" in table and "| T = 1/N |" in table
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["reproduce", "--table", str(tmp_path)]) == 0
    assert "**1/2**" in buf.getvalue()
    # every counted claim that is not reproduced is listed with the paper's number, ours and the
    # rule; the reproduced one, the other setting's row and the check are not
    from structmc.experiments._report import unreproduced_table

    failing = unreproduced_table([report])
    assert (
        failing.count("\n| `psgld-fnn` (quick, ") == 1
        and "| b | 1 | 2 | \\|ours − paper\\| ≤ ±0.1 | not reproduced" in failing
    )
    assert "Claims not reproduced" in buf.getvalue() and "| b | 1 | 2 |" in buf.getvalue()
    # --claims: every counted claim, one row each, the reproduced one too (not the check)
    every = io.StringIO()
    with contextlib.redirect_stdout(every):
        assert main(["reproduce", "--table", str(tmp_path), "--claims"]) == 0
    assert every.getvalue().count("\n| `psgld-fnn` (quick, ") == 2 and "| b | 1 | 2 |" in every.getvalue()
    with pytest.raises(SystemExit):
        main(["reproduce", "--table", str(tmp_path / "empty")])


def test_the_results_table_counts_the_work_of_every_sitting():
    from structmc.experiments._report import work_seconds

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

    from structmc.experiments._report import hardware

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
    from structmc.experiments._report import render_markdown

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

    from structmc.experiments._report import claims_table

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
