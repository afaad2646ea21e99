"""``structmc tune``: runs MAMBA / grid search / the heuristic on a built-in data set and
writes the trace, plot and report; bad flags are one-line errors."""

import json

import pytest

from structmc.cli import _budget, _log10_range, main


def test_tune_mamba_writes_trace_plot_and_report(tmp_path, capsys):
    out = tmp_path / "tune"
    rc = main(["tune", "--dataset", "breast_cancer", "--model", "linear", "--sampler", "sgld", "--log10-h=-6:-3:1",
               "--batch-size", "1.0,0.1,32", "--budget", "2400it", "--map-steps", "200", "--out", str(out), "--quiet"])
    assert rc == 0
    trace = json.loads((out / "trace.json").read_text())
    assert trace["method"] == "mamba" and len(trace["arms"]) == 12 and trace["complete"]
    assert [len(r["arms"]) for r in trace["rounds"]] == [12, 4]
    assert trace["settings"]["budget"]["iterations"] == 2400
    assert (out / "metric_by_round.png").stat().st_size > 0
    assert "chosen arm" in (out / "report.md").read_text() and "chosen arm" in capsys.readouterr().out


def test_tune_grid_and_heuristic(tmp_path):
    rc = main(["tune", "--method", "grid", "--dataset", "breast_cancer", "--model", "linear", "--sampler", "sghmc",
               "--lr", "1e-6,1e-5", "--num-leapfrog", "2", "--budget", "100it", "--no-map", "--out",
               str(tmp_path / "g"), "--quiet"])
    assert rc == 0
    trace = json.loads((tmp_path / "g" / "trace.json").read_text())
    assert trace["method"] == "grid_search" and all(a["batch_size"] == 0.1 for a in trace["arms"])
    rc = main(["tune", "--method", "heuristic", "--dataset", "breast_cancer", "--model", "linear", "--budget", "100it",
               "--no-map", "--out", str(tmp_path / "h"), "--quiet"])
    assert rc == 0
    arm = json.loads((tmp_path / "h" / "trace.json").read_text())["best"]
    assert arm["sampler"]["lr"] == pytest.approx(2 / 455) and arm["batch_size"] == 0.1  # h = 1/N, N = 455


def test_budget_and_range_parsing_and_errors(capsys):
    assert _budget("30s").seconds == 30.0 and _budget("3000it").iterations == 3000
    assert _budget("1e5grad").grad_evals == 100_000
    assert _log10_range("-3:-1:1") == pytest.approx([1e-3, 1e-2, 1e-1])
    assert main(["tune", "--budget", "30 minutes"]) == 2
    assert "--budget takes" in capsys.readouterr().err
    assert main(["tune", "--budget", "0it"]) == 2
    assert main(["tune", "--lr", "1e-3", "--log10-h=-3:-1:1"]) == 2
    assert main(["tune", "--sampler", "sgld", "--num-leapfrog", "5", "--budget", "10it", "--no-map"]) == 2
    assert "no hyperparameter" in capsys.readouterr().err
