"""``structmc tune``: runs MAMBA / grid search / the heuristic on a built-in data set and
writes the trace, plot and report; bad flags are one-line errors."""

import json

import pytest

from structmc.cli import _budget, _log10_range, main


def test_tune_mamba_writes_trace_plot_and_report(tmp_path, capsys):
    out = tmp_path / "tune"
    rc = main(
        [
            "tune",
            "--dataset",
            "breast_cancer",
            "--model",
            "linear",
            "--sampler",
            "sgld",
            "--log10-h=-6:-3:1",
            "--batch-size",
            "1.0,0.1,32",
            "--budget",
            "2400it",
            "--map-steps",
            "200",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    trace = json.loads((out / "trace.json").read_text())
    assert trace["method"] == "mamba" and len(trace["arms"]) == 12 and trace["complete"]
    assert [len(r["arms"]) for r in trace["rounds"]] == [12, 4]
    assert trace["settings"]["budget"]["iterations"] == 2400
    assert (out / "metric_by_round.png").stat().st_size > 0
    assert "chosen arm" in (out / "report.md").read_text() and "chosen arm" in capsys.readouterr().out


def test_tune_grid_and_heuristic(tmp_path):
    rc = main(
        [
            "tune",
            "--method",
            "grid",
            "--dataset",
            "breast_cancer",
            "--model",
            "linear",
            "--sampler",
            "sghmc",
            "--lr",
            "1e-6,1e-5",
            "--num-leapfrog",
            "2",
            "--budget",
            "100it",
            "--no-map",
            "--out",
            str(tmp_path / "g"),
            "--quiet",
        ]
    )
    assert rc == 0
    trace = json.loads((tmp_path / "g" / "trace.json").read_text())
    assert trace["method"] == "grid_search" and all(a["batch_size"] == 0.1 for a in trace["arms"])
    rc = main(
        [
            "tune",
            "--method",
            "heuristic",
            "--dataset",
            "breast_cancer",
            "--model",
            "linear",
            "--budget",
            "100it",
            "--no-map",
            "--out",
            str(tmp_path / "h"),
            "--quiet",
        ]
    )
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


def test_tune_refuses_an_unscorable_budget_before_the_map_fit(monkeypatch, capsys):
    """The budget check of mamba()/grid_search() runs before the data, the model and the MAP fit,
    in the CLI's words; --thin and --min-samples (the flags it tells to lower) exist and count."""
    import structmc

    def no_map(*args, **kwargs):
        raise RuntimeError("the MAP fit ran")

    monkeypatch.setattr(structmc, "find_map", no_map)
    assert main(["tune", "--dataset", "breast_cancer", "--budget", "600it"]) == 2
    err = capsys.readouterr().err
    assert "lower --thin / --min-samples" in err and "--budget 8100it" in err
    assert main(["tune", "--method", "grid", "--budget", "50it", "--min-samples", "6"]) == 2
    assert "at least --budget 60it per arm" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="the MAP fit ran"):  # 600 / (27 arms x 3 rounds) = 7 >= 2 x 3
        main(["tune", "--dataset", "breast_cancer", "--budget", "600it", "--thin", "2", "--min-samples", "3"])


def test_tune_map_fit_is_bounded_by_its_share_and_reported(tmp_path, capsys):
    """A seconds budget: the MAP fit gets --map-share of it (here 20% of 3 s), the tuning the rest;
    the fit is announced on stderr before and after with its time (not a terminal here), and
    its time is in report.md (issue 22 §6.8: `--budget 30s` took 109 s, silently)."""
    out = tmp_path / "t"
    rc = main(
        [
            "tune",
            "--dataset",
            "breast_cancer",
            "--model",
            "linear",
            "--lr",
            "1e-5,1e-4",
            "--batch-size",
            "0.1",
            "--budget",
            "3s",
            "--map-steps",
            "100000",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "MAP fit: up to 100000 Adam steps on batches of 4 rows, at most 0.6 s" in err
    line = next(x for x in err.splitlines() if x.startswith("MAP fit: ") and " of 100000 Adam steps in " in x)
    assert "stopped at its 0.6 s share of the budget" in line and "tuning gets 2.4 s" in line
    assert float(line.split(" steps in ")[1].split(" s")[0]) < 1.5  # bounded: 1e5 steps take ~30 s
    assert line in (out / "report.md").read_text()
    assert json.loads((out / "trace.json").read_text())["settings"]["budget"]["seconds"] == pytest.approx(2.4)
    assert "structmc: warning: the chosen arm's lr=" in err  # two step sizes: the choice is at an edge


def test_progress_bar_shows_the_best_metric_of_the_round(capsys):
    """MAMBA's progress bar said best=<the latest arm's metric>; it shows the round's lowest."""
    pytest.importorskip("tqdm")
    from structmc.tuning.mamba import _Progress

    bar = _Progress(True, 6, "mamba")
    bar.round(0, 2, 4)
    for metric in (2.0, 1.0, float("inf"), 3.0):
        bar.done(metric)
    assert bar.bar.postfix == "best=1"
    bar.round(1, 2, 2)  # a new round, a new budget: its own best
    bar.done(float("nan"))
    bar.done(5.0)
    assert bar.bar.postfix == "best=5"
    bar.close()


def test_a_choice_at_the_edge_of_the_lr_grid_is_flagged():
    from structmc.tuning import TuningResult, grid
    from structmc.tuning.arms import edge_of_grid

    arms = grid("sgld", lr=[1e-5, 1e-4, 1e-3], batch_size=[0.1, 0.5])
    for index, end in ((0, "smallest"), (5, "largest")):
        result = TuningResult("mamba", arms, {}, best_index=index)
        assert (
            f"warning: the chosen arm's lr={arms[index].sampler['lr']:.3g} is the {end} step size tried"
            in result.summary()
        )
    assert "warning" not in TuningResult("mamba", arms, {}, best_index=1).summary()  # lr=1e-4: inside
    assert edge_of_grid(grid("sgld", lr=[1e-4]), grid("sgld", lr=[1e-4])[0]) == []  # nothing to compare


def test_a_second_tune_into_the_same_out_is_refused_naming_the_flags(tmp_path, capsys):
    """Issue 36 §6 follow-up: the tuning folder is refused without --resume; the message names
    the flags (--resume, --overwrite), and --overwrite replaces it."""
    args = [
        "tune", "--method", "grid", "--dataset", "breast_cancer", "--model", "linear", "--sampler", "sgld",
        "--lr", "1e-6,1e-5", "--budget", "100it", "--map-steps", "50", "--out", str(tmp_path / "t"), "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("structmc: error:") and "--resume" in err and "--overwrite" in err and "=True" not in err
    assert main([*args, "--overwrite"]) == 0
