"""``structmc sample --chains N --executor ...`` (issue 25): the chains run as independent tasks of
:func:`structmc.executors.run_chains`, each in ``OUT/chains/chain_i``, merged into ``OUT/run``,
which ``structmc diagnose`` and the report read; ``--resume`` continues each chain from its own
checkpoint. Tiny runs on iris (bundled with scikit-learn: no data files)."""

from __future__ import annotations

import json
import shutil
from unittest import mock

import pytest
import torch

import structmc as sm
from structmc.cli import main
from structmc.executors import chain_seeds, run_chains
from structmc.storage import RunFolder

BASE = ["sample", "--dataset", "iris", "--steps", "60", "--burn-in", "20", "--chains", "2", "--quiet"]


def _problem(**settings):
    """What ``structmc sample`` builds from these settings (data, energy, sampler, start, gradient)."""
    from structmc.cli.common import _load_dataset, _model_energy
    from structmc.cli.settings import SAMPLE_DEFAULTS, sampler_config
    from structmc.samplers import sampler_from_config

    s = {**SAMPLE_DEFAULTS, **settings}
    data = _load_dataset(s)
    energy = _model_energy(s, data)
    sampler = sampler_from_config(sampler_config(s))
    train = (data.x_train, data.y_train)
    init, gradient = energy.initial_position(), "minibatch"
    if s["gradient"] == "cv":  # the MAP centre, found once, as the CLI does
        init = sm.find_map(energy, init, data=train, batch_size=min(len(data.x_train), 128), num_steps=2000)
        gradient = sm.ControlVariate(init)
    return s, data, energy, sampler, train, init, gradient


def _reference(**settings):
    """``run_chains`` on the serial executor with the CLI's problem: the chains --executor must give."""
    s, data, energy, sampler, train, init, gradient = _problem(**settings)
    chain = run_chains(
        energy,
        init,
        sampler,
        s["num_steps"],
        num_chains=s["num_chains"],
        executor="serial",
        seed=s["seed"],
        data=train,
        batch_size=s["batch_size"],
        burn_in=s["burn_in"],
        thin=s["thin"],
        gradient=gradient,
    )
    return chain, data, energy


def test_process_executor_gives_the_serial_run_chains_draws_merged_for_diagnose_and_report(tmp_path, capsys):
    """``--executor process --chains 2 --gradient cv``: chain i of OUT/run (and of OUT/chains/chain_i)
    is chain i of ``run_chains(..., executor="serial")`` with the same seed (its seed from
    ``chain_seeds``, the MAP centre found once in the parent); the report's metrics are the merged
    chain's; ``structmc diagnose OUT/run`` reads it as 2 chains (R-hat across them) and says it is
    merged."""
    out = tmp_path / "out"
    assert main(BASE + ["--gradient", "cv", "--executor", "process", "--out", str(out)]) == 0
    ref, data, energy = _reference(dataset="iris", num_steps=60, burn_in=20, num_chains=2, gradient="cv")
    merged = sm.load_chain(out / "run")
    assert merged.samples.shape == (2, 8, 15) and torch.equal(merged.samples, ref.samples)
    assert not torch.equal(merged.samples[0], merged.samples[1])  # two chains, two seeds
    assert torch.equal(merged.info["energy"], ref.info["energy"]) and merged.info["energy"].shape == (2, 60)
    for i in range(2):
        assert torch.equal(sm.load_chain(out / "chains" / f"chain_{i}").samples[0], ref.samples[i])
    assert merged.config["chain_seeds"] == chain_seeds(0, 2) == ref.config["chain_seeds"]
    assert (
        merged.config["merged_from"]["num_chains"] == 2 and merged.config["gradient"]["gradient"] == "control_variate"
    )
    assert json.loads((out / "chains" / "chains.json").read_text())["num_chains"] == 2
    report = json.loads((out / "report.json").read_text())
    pred = sm.predictive(energy, ref, data.x_test)
    nll = sm.diagnostics.classification_metrics(pred["probs"].double(), data.y_test.long())["nll"]
    assert report["metrics"]["num_draws"] == 16 and report["metrics"]["test_nll"] == pytest.approx(nll, rel=1e-12)
    assert report["executor"] == "process" and report["chain_seeds"] == chain_seeds(0, 2)
    assert "2 independent chains" in (out / "report.md").read_text() and (out / "trace.png").exists()
    capsys.readouterr()
    assert main(["diagnose", str(out / "run"), "--out", str(tmp_path / "diag")]) == 0
    text = capsys.readouterr().out
    rhat = sm.diagnostics.mixing(ref.samples)["rhat"]
    assert "chain: 2 chains x 8 draws" in text and "merged from 2 independent chains" in text
    assert f"max {float(rhat.max()):.4g}" in next(line for line in text.splitlines() if "R-hat  " in line)
    assert "sampling time" in text and "(the slowest chain)" in text  # per-chain time records [2, S]


def test_resume_of_an_interrupted_multi_chain_run(tmp_path, capsys):
    """A run killed with chain 0 at iteration 50 (last checkpoint 40), chain 1 not started and no
    merged folder: ``--resume`` continues chain 0 from its checkpoint, runs chain 1, and merges
    exactly the chains of the uninterrupted run. A different --chains or --seed, a plain rerun
    and a resume without --executor are refused before any compute; a batched --overwrite
    removes the chains."""
    out = tmp_path / "out"
    argv = BASE[:3] + ["--steps", "100", "--burn-in", "20", "--checkpoint-every", "20", "--chains", "2"]
    argv += ["--quiet", "--out", str(out)]
    parallel = argv + ["--executor", "process"]
    assert main(parallel) == 0
    whole = sm.load_chain(out / "run")

    # the kill: chain 0 again, stopped at iteration 50; chain 1 and the merge never happened
    s, data, energy, sampler, train, init, gradient = _problem(dataset="iris", num_steps=100, burn_in=20)

    def killed(iteration, state):
        if iteration == 50:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        sm.sample(
            energy, init, sampler, 100, data=train, batch_size=32, burn_in=20, thin=5,
            seed=chain_seeds(0, 2)[0], out_dir=out / "chains" / "chain_0", checkpoint_every=20,
            overwrite=True, progress=False, callback=killed,
        )  # fmt: skip
    assert RunFolder(out / "chains" / "chain_0").checkpoint_file().name == "checkpoint-00000040.pt"
    # the chunks the checkpoint refers to: a resumed chain keeps them (a restarted one rewrites them)
    kept = {
        f.name: (f.stat().st_ino, f.stat().st_mtime_ns) for f in RunFolder(out / "chains" / "chain_0").chunk_files()
    }
    assert kept
    shutil.rmtree(out / "chains" / "chain_1")
    shutil.rmtree(out / "run")

    capsys.readouterr()
    with mock.patch("structmc.cli.sample._load_dataset", side_effect=AssertionError("computed")):
        for extra, phrase in [
            (["--executor", "process", "--resume", "--chains", "3"], "has 2 chains (in"),
            (["--executor", "process", "--resume", "--seed", "1"], "pass --seed 0 to continue them"),
            (["--executor", "process"], "holds a previous run (the chains in"),
            (["--resume"], "pass --executor (process, dask, ...; each gives the same chains) to resume them"),
            ([], "pass --resume --executor ... to continue them, --overwrite to replace them"),
        ]:
            with pytest.raises(SystemExit) as info:
                main(argv + extra)
            assert info.value.code == 2 and phrase in capsys.readouterr().err

    assert main(parallel + ["--resume"]) == 0
    after = {
        f.name: (f.stat().st_ino, f.stat().st_mtime_ns) for f in RunFolder(out / "chains" / "chain_0").chunk_files()
    }
    assert all(after[name] == ino for name, ino in kept.items())  # continued from iteration 40
    resumed = sm.load_chain(out / "run")
    assert torch.equal(resumed.samples, whole.samples) and torch.equal(resumed.draw_steps, whole.draw_steps)
    assert torch.equal(resumed.info["energy"], whole.info["energy"])

    assert main(argv + ["--overwrite"]) == 0  # the batched run replaces the chains and their merge
    assert not (out / "chains").exists() and RunFolder(out / "run").checkpoint_file() is not None
    assert "merged_from" not in sm.load_chain(out / "run").config


@pytest.mark.parametrize(
    "extra, phrase",
    [
        (["--executor", "bogus"], "--executor: unknown executor 'bogus'; choose serial (the default), process"),
        (["--executor", "ray"], 'needs ray, which is not installed: pip install "structmc[ray]"'),
        (["--executor", "ray://head:10001"], "needs ray, which is not installed"),
        (["--executor", "tcp://127.0.0.1"], "is not a cluster address: expected tcp://host:port"),
        (["--executor", "tcp://127.0.0.1:8786", "--workers", "2"], "--workers is not used with the running cluster"),
        (["--workers", "2"], "--workers sets the workers of --executor process, dask or ray"),
        (["--executor", "process", "--resume"], "--resume: nothing to resume in"),
    ],
)
def test_bad_executor_settings_are_refused_before_any_compute(tmp_path, capsys, extra, phrase):
    """Ray is absent here (sys.modules["ray"] = None: as if not installed): refused, naming the
    extra to install; unknown or malformed executors and --workers where it is not used too; all
    before the data are loaded and before --out is created."""
    out = tmp_path / "out"
    with (
        mock.patch.dict("sys.modules", {"ray": None}),
        mock.patch("structmc.cli.sample._load_dataset", side_effect=AssertionError("computed")),
        pytest.raises(SystemExit) as info,
    ):
        main(BASE + ["--out", str(out)] + extra)
    assert info.value.code == 2 and phrase in capsys.readouterr().err
    assert not out.exists()


def test_process_executor_with_one_chain_and_a_config_file(tmp_path):
    """``--executor process --chains 1`` is fine; ``executor`` / ``workers`` are config keys too."""
    cfg = tmp_path / "run.toml"
    cfg.write_text('dataset = "iris"\nsteps = 40\nburn-in = 20\nchains = 1\nexecutor = "process"\nworkers = 1\n')
    out = tmp_path / "out"
    assert main(["sample", "--config", str(cfg), "--quiet", "--out", str(out)]) == 0
    ref, _, _ = _reference(dataset="iris", num_steps=40, burn_in=20, num_chains=1)
    assert torch.equal(sm.load_chain(out / "run").samples, ref.samples)
    assert json.loads((out / "report.json").read_text())["settings"]["workers"] == 1


def test_dask_executor_gives_the_same_chains(tmp_path):
    """``--executor dask --workers 2``: a LocalCluster of two single-threaded workers runs the
    chains of run_chains (same seeds, same draws as serially). About 8 s on 2 CPUs."""
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    assert main(BASE + ["--executor", "dask", "--workers", "2", "--out", str(out)]) == 0
    ref, _, _ = _reference(dataset="iris", num_steps=60, burn_in=20, num_chains=2)
    assert torch.equal(sm.load_chain(out / "run").samples, ref.samples)
