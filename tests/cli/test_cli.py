"""Every entry point runs end to end with tiny arguments (numpyro test_examples style)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from support.paths import REPO_ROOT, SHARED_DATA

from structmc.cli import main
from structmc.storage import RunFolder

ROOT = REPO_ROOT


def test_demo_tiny_writes_report(tmp_path):
    assert main(["demo", "--preset", "tiny", "--out", str(tmp_path), "--quiet"]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["samplers"]) == {"SGLD", "pSGLD", "SGHMC", "SGNHT", "SGLD-CV"}
    for r in report["samplers"].values():
        assert 0 < r["sd_ratio_median"] < 3 and r["test_rmse"] > 0
    assert (tmp_path / "report.md").read_text().startswith("# structmc demo")
    assert (tmp_path / "demo.png").stat().st_size > 10_000


def test_ssgmcmc_linreg_reproduce_tiny(tmp_path):
    """`reproduce` under the new name and the old one (an alias); the common report format;
    the data set's exact MAP is the paper's within 0.1 per coordinate, whatever the sampling."""
    from structmc_papers._report import COMPARISON_FIELDS, REPORT_FIELDS

    assert (
        main(["reproduce", "ssgmcmc-linreg", "--preset", "tiny", "--out", str(tmp_path), "--quiet", "--seed", "4"]) == 0
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(REPORT_FIELDS) <= set(report) and report["seed"] == 4 and report["experiment"] == "ssgmcmc-linreg"
    assert all(set(COMPARISON_FIELDS) <= set(c) for c in report["comparisons"])
    maps = [c for c in report["comparisons"] if c["quantity"].startswith("exact MAP")]
    assert len(maps) == 4 and all(c["verdict"] == "check (reproduced)" and c["check"] for c in maps)
    assert report["numbers"]["map_distance_to_paper"] < 0.1
    scen = report["numbers"]["scenarios"]
    assert len(scen) == 5 and scen["S-SGLD {w1},{w2},{w3},{b}"]["exact_structured_optimum"]["corr"][0][1] == 0.0
    assert report["numbers"]["exact_posterior"]["corr"][0][1] < -0.9  # the w1-w2 dependence of the figure
    assert report["reduced"] and (tmp_path / "pairs.png").exists()
    assert main(["experiment", "structured_linreg", "--preset", "tiny", "--out", str(tmp_path / "old"), "--quiet"]) == 0


def test_expected_map_of_the_fitted_covariate_law_is_the_papers():
    from structmc_papers.ssgmcmc_linreg import PAPER_MAP, expected_map, fit_covariate_law

    mu, cov = fit_covariate_law()
    assert (expected_map(mu, cov) - torch.tensor(PAPER_MAP, dtype=torch.float64)).abs().max() < 1e-5
    eig = torch.linalg.eigvalsh(cov)
    assert 1e-4 < eig[0] < 1e-2 and (eig[1:] - 1).abs().max() < 0.05  # nearest N(0, I): one thin direction


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_sample_from_config_file(tmp_path, suffix):
    body = {
        ".toml": 'dataset = "iris"\nmodel = "mlp"\nhidden = [8]\nsampler = "sgnht"\nlr = 1e-4\nnum_steps = 60\n'
        'burn_in = 20\n[schedule]\nkind = "cyclical"\nnum_steps = 60\n',
        ".yaml": "dataset: iris\nsampler: psgld\nlr: 1.0e-5\nnum_steps: 60\nburn_in: 20\ngradient: cv\n",
        ".json": json.dumps({"dataset": "diabetes", "sampler": "sghmc", "lr": 1e-6, "num_steps": 60, "burn_in": 20}),
    }[suffix]
    cfg = tmp_path / f"run{suffix}"
    cfg.write_text(body)
    out = tmp_path / "out"
    assert main(["sample", "--config", str(cfg), "--out", str(out), "--quiet", "--chains", "2"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["metrics"]["num_draws"] == 2 * (60 - 20) // 5
    assert (out / "trace.png").exists() and RunFolder(out / "run").checkpoint_file().exists()


def test_sample_rejects_bad_config(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('sampler = "sgld"\nlearning_rate = 0.1\n')
    with pytest.raises(SystemExit, match="unknown keys"):
        main(["sample", "--config", str(cfg), "--out", str(tmp_path / "o")])
    assert main(["sample", "--lr", "-1", "--out", str(tmp_path / "o2"), "--quiet"]) == 2
    assert "lr must be positive" in capsys.readouterr().err


def test_console_script_and_benchmark_quick(tmp_path):
    out = subprocess.run([sys.executable, "-m", "structmc.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "demo" in out.stdout
    bench = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_samplers.py"),
            "--quick",
            "--num-data",
            "1000",
            "--json",
            str(tmp_path / "b.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bench.returncode == 0, bench.stderr
    rows = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert rows["tuned hand loop (SGLD)"]["ratio_to_tuned_hand_loop"] == 1.0
    assert rows["structmc SGLD, 8 chains"]["chains"] == 8
    assert all(r["ms_per_step"] > 0 for r in rows.values())


def test_structured_benchmark_quick(tmp_path):
    bench = subprocess.run(
        [sys.executable, "bench_structured.py", "--quick", "--json", str(tmp_path / "s.json")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT / "bench",
    )
    assert bench.returncode == 0, bench.stderr
    rows = json.loads((tmp_path / "s.json").read_text())
    assert rows["Sd-SGLD K=4"]["copies"] == 4 and rows["S-SGLD M=8"]["ratio_to_base"] > 0


SHARED = SHARED_DATA


@pytest.mark.skipif(not (SHARED / "SHA256SUMS").exists(), reason="reference data folder ../shared/data not found")
def test_sample_on_a_paper_data_set(tmp_path):
    out = tmp_path / "mnist"
    assert (
        main(
            [
                "sample",
                "--dataset",
                "mnist",
                "--data-dir",
                str(SHARED),
                "--model",
                "mlp",
                "--hidden",
                "50,50",
                "--sampler",
                "psgld",
                "--lr",
                "3e-8",
                "--steps",
                "300",
                "--burn-in",
                "150",
                "--thin",
                "10",
                "--batch-size",
                "100",
                "--chains",
                "1",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "report.json").read_text())["metrics"]
    assert metrics["test_accuracy"] > 0.8  # 10 classes: chance is 0.1


def test_diagnose_a_saved_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "sample",
                "--dataset",
                "iris",
                "--sampler",
                "sgld",
                "--lr",
                "1e-3",
                "--steps",
                "200",
                "--burn-in",
                "50",
                "--chains",
                "2",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["diagnose", str(out / "run"), "--out", str(tmp_path / "diag")]) == 0
    text = capsys.readouterr().out
    assert "ess" in text.lower() and "hat" in text.lower()
    assert any((tmp_path / "diag").glob("*.png"))


def test_sample_overwrite_replaces_a_run_killed_before_its_first_checkpoint(tmp_path, capsys):
    """After a kill before the first checkpoint there is nothing to resume: ``--overwrite`` (the
    CLI's ``overwrite=True``) starts the run again in the same folder; ``--resume`` and a plain
    rerun say to pass it."""
    import structmc as sm

    def killed(iteration, state):
        if iteration == 3:
            raise RuntimeError("killed")

    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="killed"):
        sm.sample(
            lambda theta, batch: -0.5 * (theta * theta).sum(),
            torch.zeros(2),
            sm.SGLD(0.1),
            50,
            out_dir=out / "run",
            callback=killed,
            progress=False,
        )
    argv = ["sample", "--quiet", "--steps", "20", "--burn-in", "5", "--chains", "1", "--out", str(out)]
    for extra in (["--resume"], []):
        with pytest.raises(SystemExit) as exit_info:
            main(argv + extra)
        assert exit_info.value.code == 2 and "pass --overwrite" in capsys.readouterr().err
    assert main(argv + ["--overwrite"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["metrics"]["num_draws"] == (20 - 5) // 5
    assert RunFolder(out / "run").checkpoint_file() is not None
    assert main(argv + ["--resume"]) == 0  # a finished run with a checkpoint resumes (nothing left to do)


def test_config_files_take_the_flag_names(tmp_path):
    """README: config files use the same keys as the flags (issue 22 §6.6: 'steps = 60' was an
    unknown key); hyphens or underscores, and the old keys (num_steps) still work."""
    out = tmp_path / "o"
    cfg = tmp_path / "run.toml"
    cfg.write_text('dataset = "iris"\nsteps = 60\nburn-in = 20\nthin = 4\nchains = 2\nbatch_size = 16\n')
    assert main(["sample", "--config", str(cfg), "--out", str(out), "--quiet"]) == 0
    report = json.loads((out / "report.json").read_text())
    s = report["settings"]
    assert (s["num_steps"], s["burn_in"], s["thin"], s["num_chains"], s["batch_size"]) == (60, 20, 4, 2, 16)
    assert report["metrics"]["num_draws"] == 2 * (60 - 20) // 4
    old = tmp_path / "old.yaml"
    old.write_text("dataset: iris\nnum_steps: 60\nburn_in: 20\nnum_chains: 1\nbatch-size: 16\n")
    assert main(["sample", "--config", str(old), "--out", str(tmp_path / "o2"), "--quiet"]) == 0
    twice = tmp_path / "twice.toml"
    twice.write_text("steps = 60\nnum_steps = 50\n")
    with pytest.raises(SystemExit, match="sets num_steps twice, as 'steps' and 'num_steps'"):
        main(["sample", "--config", str(twice), "--out", str(tmp_path / "o3")])


def test_sample_batch_size_takes_the_fraction_tune_prints(tmp_path, capsys):
    """`structmc tune` reports batch sizes as fractions of N; `sample --batch-size 0.1` takes one
    (issue 22 §6.6: 'invalid int value') and runs exactly the chain of ⌊0.1·N⌋ rows."""
    from structmc import load_chain

    argv = ["sample", "--dataset", "iris", "--steps", "40", "--burn-in", "10", "--chains", "1", "--quiet"]
    assert main(argv + ["--batch-size", "0.1", "--out", str(tmp_path / "f")]) == 0
    rows = json.loads((tmp_path / "f" / "report.json").read_text())["batch_rows"]
    assert rows == 12  # iris: N = 120 training rows
    assert main(argv + ["--batch-size", str(rows), "--out", str(tmp_path / "r")]) == 0
    assert torch.equal(load_chain(tmp_path / "f" / "run").samples, load_chain(tmp_path / "r" / "run").samples)
    capsys.readouterr()
    for bad in ("0", "1.5", "-0.1", "lots"):
        with pytest.raises(SystemExit):
            main(argv + ["--batch-size", bad, "--out", str(tmp_path / "bad")])
        assert "--batch-size must be a number of rows" in capsys.readouterr().err


def test_sample_length_errors_name_the_flags(tmp_path, capsys):
    """`--steps 10` used to fail after loading the data with 'burn_in (1000) must be smaller than
    num_steps (10)', the Python names: the CLI names its flags (or config keys), before any work."""
    with pytest.raises(SystemExit) as info:
        main(["sample", "--steps", "10", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--burn-in = 1000 (the default) must be smaller than --steps = 10" in err
    assert "burn_in" not in err and "num_steps" not in err and not (tmp_path / "o").exists()
    cfg = tmp_path / "run.toml"
    cfg.write_text("steps = 30\nburn-in = 20\nthin = 20\n")
    with pytest.raises(SystemExit):
        main(["sample", "--config", str(cfg), "--out", str(tmp_path / "o")])
    assert "no draw would be kept with steps (in" in capsys.readouterr().err


# -- the papers' reproductions: a companion package (issue 38) -------------------------------------
def test_reproduce_finds_the_companion_by_its_entry_point(capsys):
    from importlib.metadata import entry_points

    import structmc_papers
    from structmc.cli.reproduce import ENTRY_POINT_GROUP, reproductions

    assert [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)] == ["structmc_papers"]
    assert reproductions() is structmc_papers
    assert main(["reproduce", "--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in structmc_papers.REGISTRY.choices())


def test_reproduce_without_the_companion_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [])
    for argv in (["reproduce", "--list"], ["reproduce", "psgld-blr", "--preset", "tiny"], ["experiment", "--list"]):
        with pytest.raises(SystemExit) as exit_:  # UsageError: status 2, one line on stderr
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "structmc-papers" in err and "pip install -e ./papers" in err, err
    # the library's own demo needs no companion (the README's first command)
    assert main(["demo", "--preset", "tiny", "--out", str(tmp_path / "demo"), "--quiet"]) == 0
    assert (tmp_path / "demo" / "report.json").exists()


def test_the_library_alone_never_imports_the_companion():
    """``import structmc``, its CLI's parser and ``structmc demo``'s module load no module of
    ``structmc_papers`` (nor its former name ``structmc.experiments``)."""
    code = (
        "import sys, structmc, structmc.cli, structmc.demo, structmc.fingerprint\n"
        "bad = [m for m in sys.modules if m.startswith(('structmc_papers', 'structmc.experiments'))]\n"
        "assert not bad, bad\n"
        "assert not hasattr(structmc, 'experiments')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
