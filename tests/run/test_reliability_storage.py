"""Reliability of run folders: compact chunks, refusing to reuse a folder, target fingerprints at
resume, integrity (manifest digests), streamed info records, Ctrl-C checkpoints, blow-up watch."""

from __future__ import annotations

import json
import os
import signal
import warnings

import pytest
import torch
from support.runs import gaussian_log_prob, mlp_energy

import structmc as sm
from structmc.recording import InfoLog
from structmc.storage import RunFolder, RunFolderError


def _flip_byte(path, where=0.5):
    data = bytearray(path.read_bytes())
    i = int(len(data) * where)
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------------------------------
# 1. chunk files hold only their draws
# ---------------------------------------------------------------------------------------
def test_chunk_file_size_is_the_draws_size_not_the_buffer(tmp_path):
    P = 1000
    sm.sample(gaussian_log_prob, torch.zeros(P), sm.SGLD(0.1), 1000, out_dir=tmp_path, chunk_draws=100, progress=False)
    files = RunFolder(tmp_path).chunk_files()
    assert len(files) == 10
    for f in files:
        assert f.stat().st_size < 1.2 * 100 * P * 4


# ---------------------------------------------------------------------------------------
# 2. reusing an out_dir
# ---------------------------------------------------------------------------------------
def test_a_new_run_refuses_a_non_empty_run_folder(tmp_path):
    sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 500, out_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"resume=True.*overwrite=True"):
        sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 200, out_dir=tmp_path, progress=False)
    assert sm.load_chain(tmp_path).num_draws == 500  # untouched


def test_overwrite_replaces_the_previous_run(tmp_path):
    sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 500, out_dir=tmp_path, chunk_draws=100, progress=False)
    new = sm.sample(
        gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 200, out_dir=tmp_path, overwrite=True, seed=5, progress=False
    )
    back = sm.load_chain(tmp_path)
    assert back.num_draws == 200 and torch.equal(back.samples, new.samples)
    assert back.info["energy"].shape == (1, 200)


def test_overwrite_refuses_a_folder_that_is_not_a_run_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a structmc run folder"):
        sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 20, out_dir=tmp_path, overwrite=True, progress=False)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    with pytest.raises(ValueError, match="contradict"):
        sm.sample(
            gaussian_log_prob,
            torch.zeros(2),
            sm.SGLD(0.1),
            20,
            out_dir=tmp_path / "x",
            overwrite=True,
            resume=True,
            progress=False,
        )


# ---------------------------------------------------------------------------------------
# 3. what defines the target is checked at resume
# ---------------------------------------------------------------------------------------
def _mlp_run(tmp_path, energy, data, steps, **kw):
    return sm.sample(
        energy, None, sm.SGLD(1e-3), steps, data=data, batch_size=20, out_dir=tmp_path, progress=False, **kw
    )


def test_resume_refuses_a_changed_target(tmp_path):
    energy, (X, y) = mlp_energy()
    _mlp_run(tmp_path, energy, (X, y), 10)
    with pytest.raises(ValueError, match="cannot resume: the target changed.*the data"):
        X2 = X.clone()
        X2[7, 1] += 1.0
        _mlp_run(tmp_path, energy, (X2, y), 20, resume=True)
    with pytest.raises(ValueError, match="float64"):  # caught before resume, by the data check
        _mlp_run(tmp_path, energy, (X.double(), y), 20, resume=True)
    with pytest.raises(ValueError, match="cannot resume: the target changed.*num_data"):
        _mlp_run(tmp_path, energy.with_num_data(10 * len(X)), (X, y), 20, resume=True)
    other, _ = mlp_energy()
    other_prior = sm.ModuleEnergy(other.module, "categorical", prior_std=2.0)
    with pytest.raises(ValueError, match="cannot resume: the target changed.*the prior"):
        _mlp_run(tmp_path, other_prior, (X, y), 20, resume=True)

    def tempered_categorical(out, y):  # another likelihood for the same labels
        return 0.5 * torch.distributions.Categorical(logits=out).log_prob(y).sum()  # one scalar (issue 36 §9)

    other_lik = sm.ModuleEnergy(other.module, tempered_categorical)
    with pytest.raises(ValueError, match="cannot resume: the target changed.*the likelihood"):
        _mlp_run(tmp_path, other_lik, (X, y), 20, resume=True)
    _mlp_run(tmp_path, energy, (X.clone(), y.clone()), 20, resume=True)  # same target: fine


def test_resume_refuses_a_changed_partition(tmp_path):
    from structmc.partitions import random_partition, round_robin
    from structmc.structured import StructuredEnergy

    base = sm.LogDensityEnergy(gaussian_log_prob, 6)
    kw = dict(out_dir=tmp_path, progress=False)
    sm.sample(StructuredEnergy(base, round_robin(6, 2), 50), torch.zeros(6), sm.SGLD(0.1), 10, **kw)
    with pytest.raises(ValueError, match="the partition"):
        sm.sample(
            StructuredEnergy(base, random_partition(6, 2, seed=1), 50),
            torch.zeros(6),
            sm.SGLD(0.1),
            20,
            resume=True,
            **kw,
        )
    with pytest.raises(ValueError, match="the partition"):
        sm.sample(StructuredEnergy(base, round_robin(6, 3), 50), torch.zeros(6), sm.SGLD(0.1), 20, resume=True, **kw)


def test_resume_refuses_changed_structured_settings_and_accepts_older_fingerprints(tmp_path):
    """K, the mask law and split_batch are part of the target; a checkpoint written before
    they were fingerprinted still resumes (to the uninterrupted chain)."""
    from structmc.partitions import round_robin
    from structmc.storage import RunFolder
    from structmc.structured import BernoulliMask, StructuredEnergy

    X = torch.randn(40, 3, generator=torch.Generator().manual_seed(0))
    y = X.sum(1, keepdim=True)
    base = sm.ModuleEnergy(torch.nn.Linear(3, 1), "gaussian", noise_std=1.0)

    def sd(K=2, rho=0.5, split=False):
        return StructuredEnergy(base, round_robin(4, 2), 50, mask=BernoulliMask(rho), num_copies=K, split_batch=split)

    kw = dict(data=(X, y), batch_size=8, progress=False)
    full = sm.sample(sd(), None, sm.SGLD(1e-3), 20, **kw)
    sm.sample(sd(), None, sm.SGLD(1e-3), 10, out_dir=tmp_path, **kw)
    for changed in (sd(K=4), sd(rho=0.3), sd(split=True)):
        with pytest.raises(ValueError, match="the structured energy's settings"):
            sm.sample(changed, None, sm.SGLD(1e-3), 20, out_dir=tmp_path, resume=True, **kw)
    folder = RunFolder(tmp_path)
    ckpt = folder.load_checkpoint()
    # as written by structmc 0.1 (version-1 fingerprint) before "structured" was fingerprinted
    ckpt["settings"]["target"] = {k: v for k, v in ckpt["settings"]["target"]["v1"].items() if k != "structured"}
    folder.save_checkpoint(ckpt)
    with pytest.warns(UserWarning, match="weaker fingerprint"):
        resumed = sm.sample(sd(), None, sm.SGLD(1e-3), 20, out_dir=tmp_path, resume=True, **kw)
    assert torch.equal(resumed.samples, full.samples)


def test_split_batch_refuses_an_indivisible_batch_before_any_compute():
    from structmc.partitions import round_robin
    from structmc.structured import BernoulliMask, StructuredEnergy

    calls = []
    energy = sm.LogDensityEnergy(
        log_likelihood=lambda t, b: calls.append(1) or -((b[0] @ t - b[1]) ** 2).sum(),
        log_prior=lambda t: -0.5 * (t * t).sum(),
        dim=3,
    )
    sd = StructuredEnergy(energy, round_robin(3, 3), 10, mask=BernoulliMask(0.5), num_copies=4, split_batch=True)
    X = torch.randn(30, 3)
    with pytest.raises(ValueError, match="n = 10 rows into K = 4 slices"):
        sm.sample(sd, torch.zeros(3), sm.SGLD(1e-3), 5, data=(X, X.sum(1)), batch_size=10, progress=False)
    with pytest.raises(ValueError, match="stratified"):
        sm.sample(
            sd,
            torch.zeros(3),
            sm.SGLD(1e-3),
            5,
            data=(X, torch.arange(30) % 2),
            batch_size=8,
            batching="stratified",
            progress=False,
        )
    assert not calls


def test_checkpoints_without_target_fingerprints_still_resume(tmp_path):
    full = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 30, progress=False)
    sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 10, out_dir=tmp_path, progress=False)
    folder = RunFolder(tmp_path)
    ckpt = folder.load_checkpoint()
    del ckpt["settings"]["target"]  # as written by earlier versions
    folder.save_checkpoint(ckpt)
    with pytest.warns(UserWarning, match="before targets were fingerprinted"):
        resumed = sm.sample(
            gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 30, out_dir=tmp_path, resume=True, progress=False
        )
    assert torch.equal(resumed.samples, full.samples)


# ---------------------------------------------------------------------------------------
# 4. integrity
# ---------------------------------------------------------------------------------------
def _small_run(path, steps=40, **kw):
    return sm.sample(
        gaussian_log_prob,
        torch.zeros(3),
        sm.SGLD(0.1),
        steps,
        out_dir=path,
        chunk_draws=10,
        checkpoint_every=20,
        progress=False,
        **kw,
    )


def test_a_flipped_byte_in_the_checkpoint_is_refused_at_resume(tmp_path):
    _small_run(tmp_path)
    ck = RunFolder(tmp_path).checkpoint_file()
    _flip_byte(ck)
    with pytest.raises(RunFolderError, match=ck.name):
        _small_run(tmp_path, 60, resume=True)


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_chunk_is_an_error_naming_it(tmp_path, damage):
    _small_run(tmp_path)
    bad = tmp_path / "samples" / "chunk_00001.pt"
    if damage == "flip":
        _flip_byte(bad, 0.9)
    elif damage == "truncate":
        bad.write_bytes(bad.read_bytes()[:100])
    else:
        bad.unlink()
    with pytest.raises(RunFolderError, match="chunk_00001.pt"):
        sm.load_chain(tmp_path)
    with pytest.raises(RunFolderError, match="chunk_00001.pt"):
        _small_run(tmp_path, 60, resume=True)
    with pytest.raises(RunFolderError, match="chunk_00001.pt"):
        sm.diagnose_run(tmp_path, plots=False) if hasattr(sm, "diagnose_run") else _diagnose(tmp_path)


def _diagnose(path):
    from structmc.diagnostics.report import diagnose_run

    return diagnose_run(path, plots=False)


def test_a_missing_last_chunk_is_an_error(tmp_path):
    _small_run(tmp_path)
    (tmp_path / "samples" / "chunk_00003.pt").unlink()
    with pytest.raises(RunFolderError, match="chunk_00003.pt"):
        _diagnose(tmp_path)


def test_diagnose_reports_a_diverged_run(tmp_path):
    with pytest.raises(sm.DivergenceError):
        sm.sample(
            gaussian_log_prob, torch.ones(2), sm.SGLD(5.0), 5000, out_dir=tmp_path, progress=False, on_blowup="ignore"
        )
    text = _diagnose(tmp_path)
    step = json.loads((tmp_path / "diverged.json").read_text())["step"]
    assert f"DIVERGED at iteration {step}" in text and "non-finite" in text


def _as_folder_from_before_manifests(path):
    """Rewrite a run folder as structmc 0.1 left it: checkpoint.pt, no manifest, no folder_format."""
    (path / RunFolder(path).checkpoint_file().name).rename(path / "checkpoint.pt")
    (path / "manifest.json").unlink()
    settings = json.loads((path / "run.json").read_text())
    del settings["folder_format"]
    (path / "run.json").write_text(json.dumps(settings))


def test_a_truncated_checkpoint_names_the_file_even_without_a_manifest(tmp_path):
    _small_run(tmp_path)
    _as_folder_from_before_manifests(tmp_path)
    ck = tmp_path / "checkpoint.pt"
    ck.write_bytes(ck.read_bytes()[:200])
    with pytest.warns(UserWarning, match="unverified"), pytest.raises(RunFolderError, match="checkpoint.pt"):
        _small_run(tmp_path, 60, resume=True)


# ---------------------------------------------------------------------------------------
# 5. records streamed to disk
# ---------------------------------------------------------------------------------------
def test_checkpoint_size_does_not_grow_with_the_iterations(tmp_path, monkeypatch):
    monkeypatch.setattr(InfoLog, "WRITE_EVERY", 256)  # the checkpoint holds < 256 iterations of records
    sizes = []
    for steps in (1000, 10000):
        d = tmp_path / str(steps)
        sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), steps, thin=steps, out_dir=d, progress=False)
        sizes.append(RunFolder(d).checkpoint_file().stat().st_size)
    assert sizes[1] < sizes[0] + 2000


def test_without_memory_the_records_stream_and_reload_complete(tmp_path, monkeypatch):
    monkeypatch.setattr(InfoLog, "WRITE_EVERY", 256)
    full = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 1000, thin=7, num_chains=2, progress=False)
    streamed = sm.sample(
        gaussian_log_prob,
        torch.zeros(2),
        sm.SGLD(0.1),
        1000,
        thin=7,
        num_chains=2,
        progress=False,
        out_dir=tmp_path,
        keep_in_memory=False,
        chunk_draws=30,
    )
    assert len(RunFolder(tmp_path).info_files()) >= 3
    for chain in (streamed, sm.load_chain(tmp_path)):
        assert torch.equal(chain.samples, full.samples) and torch.equal(chain.draw_steps, full.draw_steps)
        assert chain.info.keys() == full.info.keys()
        for k in full.info:
            assert torch.equal(chain.info[k][..., :].nan_to_num(), full.info[k].nan_to_num()) or k == "time"


def test_info_chunks_hold_only_their_iterations(tmp_path, monkeypatch):
    monkeypatch.setattr(InfoLog, "WRITE_EVERY", 512)
    sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 5000, thin=5000, out_dir=tmp_path, progress=False)
    files = RunFolder(tmp_path).info_files()
    assert len(files) >= 8
    assert max(f.stat().st_size for f in files) < 4 * 8 * 600 + 3000  # ~512 iterations of 4 float64 records


def test_a_folder_from_before_manifests_and_streamed_records_resumes(tmp_path):
    full = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 30, num_chains=2, progress=False)
    sm.sample(
        gaussian_log_prob,
        torch.zeros(2),
        sm.SGLD(0.1),
        10,
        num_chains=2,
        out_dir=tmp_path,
        chunk_draws=4,
        progress=False,
    )
    folder = RunFolder(tmp_path)
    ckpt = folder.load_checkpoint()
    info = sm.load_chain(tmp_path).info
    for k in ("info_chunks", "info_written"):
        del ckpt["draws"][k]
    del ckpt["settings"]["target"]
    ckpt["info"] = info  # the old layout: every record in the checkpoint, no info/, no manifest
    _as_folder_from_before_manifests(tmp_path)
    torch.save(ckpt, tmp_path / "checkpoint.pt")
    import shutil

    shutil.rmtree(tmp_path / "info")
    with pytest.warns(UserWarning, match="unverified"):
        assert torch.equal(sm.load_chain(tmp_path).info["energy"], full.info["energy"][:, :10])
    with pytest.warns(UserWarning, match="unverified"):
        resumed = sm.sample(
            gaussian_log_prob,
            torch.zeros(2),
            sm.SGLD(0.1),
            30,
            num_chains=2,
            out_dir=tmp_path,
            chunk_draws=4,
            resume=True,
            progress=False,
        )
    back = sm.load_chain(tmp_path)
    for chain in (resumed, back):
        assert torch.equal(chain.samples, full.samples)
        assert torch.equal(chain.info["energy"], full.info["energy"])


def test_without_memory_nothing_is_sized_by_the_number_of_steps(tmp_path):
    from structmc.recording import DrawRecorder

    rec = DrawRecorder(
        1, 3, 10**9, dtype=torch.float32, device="cpu", keep_in_memory=False, folder=RunFolder(tmp_path), chunk_draws=5
    )
    assert rec.samples is None and rec.draw_steps is None
    log = InfoLog(RunFolder(tmp_path), keep=False)
    log.WRITE_EVERY = 512
    RunFolder(tmp_path).create({"x": 1})
    for _t in range(3000):
        log.append({"energy": torch.ones(1), "lr": 0.1})
    held = sum(b.shape[-1] for blocks in log._done.values() for b in blocks) // len(log._done)
    assert held <= 512
    assert log.upto()["energy"].shape == (1, 3000)


@pytest.mark.parametrize("keep", [True, False])
def test_resume_across_streamed_info_chunks(tmp_path, monkeypatch, keep):
    monkeypatch.setattr(InfoLog, "WRITE_EVERY", 256)
    energy, data = mlp_energy()
    kw = dict(data=data, batch_size=20, seed=2, thin=3, progress=False)
    full = sm.sample(energy, None, sm.SGLD(1e-3), 700, **kw)

    def stop(t, state):
        if t == 610:
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError):
        sm.sample(
            energy,
            None,
            sm.SGLD(1e-3),
            700,
            out_dir=tmp_path,
            checkpoint_every=300,
            chunk_draws=40,
            keep_in_memory=keep,
            callback=stop,
            **kw,
        )
    resumed = sm.sample(
        energy,
        None,
        sm.SGLD(1e-3),
        700,
        out_dir=tmp_path,
        checkpoint_every=300,
        chunk_draws=40,
        keep_in_memory=keep,
        resume=True,
        **kw,
    )
    back = sm.load_chain(tmp_path)
    for chain in (resumed, back):
        assert torch.equal(chain.samples, full.samples)
        assert torch.equal(chain.info["energy"], full.info["energy"])
        assert torch.equal(chain.info["lr"], full.info["lr"])


# ---------------------------------------------------------------------------------------
# 6. Ctrl-C
# ---------------------------------------------------------------------------------------
@pytest.fixture
def default_sigint():
    """Ctrl-C as a terminal delivers it: a shell that starts pytest in the background without job
    control (``nohup ... &``) hands it SIGINT ignored, and a run keeps an ignored SIGINT ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("how", ["raise", "signal"])
@pytest.mark.parametrize("keep", [True, False])
def test_ctrl_c_checkpoints_and_resume_continues_bit_for_bit(tmp_path, how, keep, default_sigint):
    energy, data = mlp_energy()
    kw = dict(data=data, batch_size=20, seed=3, num_chains=2, burn_in=5, thin=3, progress=False)
    full = sm.sample(energy, None, sm.SGLD(1e-3), 60, **kw)

    def interrupt(t, state):
        if t == 37:
            if how == "raise":
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        sm.sample(
            energy,
            None,
            sm.SGLD(1e-3),
            60,
            out_dir=tmp_path,
            checkpoint_every=1000,
            chunk_draws=4,
            keep_in_memory=keep,
            callback=interrupt,
            **kw,
        )
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert RunFolder(tmp_path).load_checkpoint()["run"]["iteration"] == 37
    resumed = sm.sample(
        energy,
        None,
        sm.SGLD(1e-3),
        60,
        out_dir=tmp_path,
        checkpoint_every=1000,
        chunk_draws=4,
        keep_in_memory=keep,
        resume=True,
        **kw,
    )
    assert torch.equal(resumed.samples, full.samples)
    assert torch.equal(resumed.draw_steps, full.draw_steps)
    assert torch.equal(resumed.info["energy"], full.info["energy"])
    assert torch.equal(sm.load_chain(tmp_path).samples, full.samples)


# ---------------------------------------------------------------------------------------
# 7. blow-up without NaN
# ---------------------------------------------------------------------------------------
def _growing(theta, batch):  # the energy grows geometrically (not its gradient): finite for long
    _growing.calls += 1
    return -0.5 * (theta * theta).sum() - 1.2**_growing.calls


def test_a_blowing_up_chain_warns_once_naming_iteration_growth_and_lr(tmp_path):
    _growing.calls = 0
    with pytest.warns(
        UserWarning,
        match=r"blowing up: .* at iteration 64, .* times its initial magnitude.*lr=0\.01.*"
        r"conventions",
    ) as rec:
        sm.sample(_growing, torch.ones(2), sm.SGLD(0.01), 200, progress=False)
    assert sum("blowing up" in str(w.message) for w in rec) == 1


def test_on_blowup_raise_keeps_the_draws(tmp_path):
    _growing.calls = 0
    with pytest.raises(sm.DivergenceError, match="blowing up") as err:
        sm.sample(
            _growing, torch.ones(2), sm.SGLD(0.01), 200, thin=10, out_dir=tmp_path, on_blowup="raise", progress=False
        )
    assert err.value.step == 64 and err.value.chain.draw_steps.tolist() == [10, 20, 30, 40, 50, 60]
    assert (tmp_path / "diverged.json").exists()
    _growing.calls = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sm.sample(_growing, torch.ones(2), sm.SGLD(0.01), 200, on_blowup="ignore", progress=False)
    with pytest.raises(ValueError, match="on_blowup"):
        sm.sample(gaussian_log_prob, torch.ones(2), sm.SGLD(0.01), 10, on_blowup="nope")


def test_a_blowup_in_a_short_run_is_caught_at_its_last_iteration():
    _growing.calls = 0
    with pytest.warns(UserWarning, match="blowing up: .* at iteration 50,"):
        sm.sample(_growing, torch.ones(2), sm.SGLD(0.01), 50, progress=False)


def test_no_blowup_warning_for_a_falling_energy_or_a_start_at_the_mode():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # far random init: the energy drops by orders of magnitude during burn-in
        sm.sample(gaussian_log_prob, torch.full((5,), 1e3), sm.SGLD(0.1), 500, progress=False)
        # start at the mode (energy 0): it rises to its stationary level ~ P/2
        sm.sample(gaussian_log_prob, torch.zeros(50), sm.SGLD(0.1), 500, num_chains=3, progress=False)
        energy, data = mlp_energy()
        sm.sample(energy, None, sm.SGLD(1e-3), 300, data=data, batch_size=5, progress=False)


# -- set-up checks wired into Run (energy.validate_data, the initial point, the seed range) ------------
def test_run_checks_the_data_against_the_module_before_compute():
    import torch.nn as nn

    energy = sm.ModuleEnergy(nn.Linear(3, 2), "categorical")
    X, y = torch.randn(20, 3, dtype=torch.float64), torch.randint(0, 2, (20,))
    with pytest.raises(ValueError, match="float64|dtype"):
        sm.sample(energy, None, sm.SGLD(1e-3), 5, data=(X, y), progress=False)
    with pytest.raises(ValueError, match="in_features|shape|width"):
        sm.sample(energy, None, sm.SGLD(1e-3), 5, data=(torch.randn(20, 4), y), progress=False)


def test_a_nan_energy_at_the_initial_point_says_so():
    def log_prob(theta, batch):
        return -0.5 * (theta * theta).sum() + torch.log(theta[0] - 10.0)  # NaN at the start (theta[0] < 10)

    with pytest.raises(sm.DivergenceError, match="initial point"):
        sm.sample(log_prob, torch.zeros(2), sm.SGLD(1e-3), 5, progress=False)


def test_seed_beyond_the_generator_range_names_the_seed():
    with pytest.raises(ValueError, match="seed"):
        sm.sample(lambda t, b: -(t * t).sum(), torch.zeros(2), sm.SGLD(1e-3), 5, seed=2**70, progress=False)


# ---------------------------------------------------------------------------------------
# 8. one writer per run folder (issue 21, finding 11)
# ---------------------------------------------------------------------------------------
def test_a_second_writer_on_a_running_folder_is_refused(tmp_path):
    from structmc.storage import RunFolderBusy

    alone = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 60, seed=1, chunk_draws=7, progress=False)
    refused = []

    def second_writer(t, state):
        if t == 30:
            for kw in (dict(resume=True), dict(overwrite=True), dict()):
                with pytest.raises(RunFolderBusy, match=f"out_dir {tmp_path} is in use by another run") as err:
                    sm.sample(
                        gaussian_log_prob,
                        torch.zeros(2),
                        sm.SGLD(0.1),
                        60,
                        seed=2,
                        out_dir=tmp_path,
                        chunk_draws=7,
                        progress=False,
                        **kw,
                    )
                refused.append(err.value)
            assert sm.load_chain(tmp_path).num_draws == 28  # readers need no lock

    first = sm.sample(
        gaussian_log_prob,
        torch.zeros(2),
        sm.SGLD(0.1),
        60,
        seed=1,
        out_dir=tmp_path,
        chunk_draws=7,
        callback=second_writer,
        progress=False,
    )
    assert len(refused) == 3
    back = sm.load_chain(tmp_path)
    assert torch.equal(first.samples, alone.samples) and torch.equal(back.samples, alone.samples)
    assert not (tmp_path / ".structmc.lock").exists()  # released at the end


def test_a_writer_in_another_process_holds_the_folder(tmp_path):
    import subprocess
    import sys
    import time
    from pathlib import Path

    from structmc.storage import RunFolderBusy

    script = (
        "import sys, time, pathlib, torch, structmc as sm\n"
        "from support.runs import gaussian_log_prob\n"
        "out = pathlib.Path(sys.argv[1])\n"
        "def wait(t, state):\n"
        "    if t == 5:\n"
        "        (out.parent / 'started').touch()\n"
        "        while not (out.parent / 'go').exists(): time.sleep(0.01)\n"
        "sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 10, out_dir=out, callback=wait, progress=False)\n"
    )
    tests = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": tests + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", script, str(out)], env=env)
    try:
        deadline = time.time() + 120
        while not (tmp_path / "started").exists() and child.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert (tmp_path / "started").exists()
        with pytest.raises(RunFolderBusy, match=str(out)):
            sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 10, out_dir=out, overwrite=True, progress=False)
    finally:
        (tmp_path / "go").touch()
        assert child.wait(timeout=120) == 0
    assert sm.load_chain(out).num_draws == 10  # the child's run, untouched


@pytest.mark.parametrize("how", ["return", "error", "ctrl-c"])
def test_the_lock_is_released_on_every_way_out(tmp_path, how):
    def stop(t, state):
        if t == 7 and how != "return":
            raise RuntimeError("boom") if how == "error" else KeyboardInterrupt

    with pytest.raises(RuntimeError if how == "error" else KeyboardInterrupt) if how != "return" else _nothing():
        sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 10, out_dir=tmp_path, callback=stop, progress=False)
    assert not (tmp_path / ".structmc.lock").exists()
    folder = RunFolder(tmp_path)
    folder.lock()  # free again
    folder.unlock()


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_temporary_files_have_unique_names(tmp_path):
    """A writer's temporary file never collides with another's (the old shared manifest.json.tmp)."""
    folder = RunFolder(tmp_path)
    (tmp_path / "manifest.json.tmp").mkdir()  # another writer's file in the way of a fixed temporary name
    (tmp_path / "checkpoint.pt.tmp").mkdir()
    folder.create({"num_chains": 1})
    folder.write_chunk(0, torch.zeros(1, 2, 3), torch.tensor([1, 2]))
    folder.save_checkpoint({"run": {"iteration": 2}})
    assert RunFolder(tmp_path).read_chunks()[1].tolist() == [1, 2]
    assert RunFolder(tmp_path).load_checkpoint() == {"run": {"iteration": 2}}
    assert sorted(p.name for p in tmp_path.rglob("*.tmp")) == ["checkpoint.pt.tmp", "manifest.json.tmp"]


# ---------------------------------------------------------------------------------------
# 9. the manifest is mandatory (finding 12)
# ---------------------------------------------------------------------------------------
def test_a_deleted_manifest_is_an_error_not_unverified_loading(tmp_path):
    from structmc.cli import main

    _small_run(tmp_path)
    (tmp_path / "manifest.json").unlink()
    _flip_byte(tmp_path / "samples" / "chunk_00001.pt", 0.9)  # tampered: nothing could tell
    for attempt in (
        lambda: sm.load_chain(tmp_path),
        lambda: _small_run(tmp_path, 60, resume=True),
        lambda: _diagnose(tmp_path),
    ):
        with pytest.raises(RunFolderError, match="manifest is missing, so the run folder's files cannot be verified"):
            attempt()
    assert not (tmp_path / "manifest.json").exists()  # resume did not re-create it
    assert main(["diagnose", str(tmp_path)]) != 0


def test_a_folder_from_before_manifests_loads_with_a_warning(tmp_path):
    chain = _small_run(tmp_path)
    _as_folder_from_before_manifests(tmp_path)
    with pytest.warns(UserWarning, match=r"earlier structmc, without manifest.json: its files are unverified"):
        back = sm.load_chain(tmp_path)
    assert torch.equal(back.samples, chain.samples)
    assert json.loads((tmp_path / "run.json").read_text()).get("folder_format") is None


# ---------------------------------------------------------------------------------------
# 10. Ctrl-C under a program's own SIGINT handler (finding 14); the handler is always restored
# ---------------------------------------------------------------------------------------
def test_ctrl_c_under_a_custom_sigint_handler_checkpoints_and_chains_it(tmp_path):
    energy, data = mlp_energy()
    kw = dict(data=data, batch_size=20, seed=3, num_chains=2, thin=3, progress=False)
    full = sm.sample(energy, None, sm.SGLD(1e-3), 60, **kw)
    seen = []

    def mine(signum, frame):
        seen.append(signum)

    def interrupt(t, state):
        if t == 37:
            os.kill(os.getpid(), signal.SIGINT)

    before = signal.signal(signal.SIGINT, mine)
    try:
        with pytest.raises(KeyboardInterrupt):
            sm.sample(energy, None, sm.SGLD(1e-3), 60, out_dir=tmp_path, chunk_draws=4, callback=interrupt, **kw)
        assert seen == [signal.SIGINT]  # the program's handler was called too
        assert signal.getsignal(signal.SIGINT) is mine
        assert RunFolder(tmp_path).load_checkpoint()["run"]["iteration"] == 37
        resumed = sm.sample(energy, None, sm.SGLD(1e-3), 60, out_dir=tmp_path, chunk_draws=4, resume=True, **kw)
    finally:
        signal.signal(signal.SIGINT, before)
    assert torch.equal(resumed.samples, full.samples)


@pytest.mark.parametrize("fails", ["progress", "callback", "resume"])
@pytest.mark.parametrize("custom", [False, True])
def test_the_sigint_handler_is_restored_when_a_run_raises(tmp_path, monkeypatch, fails, custom):
    import structmc.run

    if fails == "progress":

        def broken(*args, **kw):
            raise RuntimeError("no progress bar")

        monkeypatch.setattr(structmc.run, "Progress", broken)
    if fails == "resume":
        sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 10, out_dir=tmp_path, progress=False)

    def callback(t, state):
        if fails == "callback" and t == 3:
            raise RuntimeError("callback")

    mine = (lambda signum, frame: None) if custom else signal.default_int_handler
    before = signal.signal(signal.SIGINT, mine)
    try:
        with pytest.raises((RuntimeError, ValueError)):  # resume: the seed differs from the checkpoint
            sm.sample(
                gaussian_log_prob,
                torch.zeros(2),
                sm.SGLD(0.1),
                10,
                out_dir=tmp_path,
                callback=callback,
                seed=1 if fails == "resume" else 0,
                resume=fails == "resume",
                progress=False,
            )
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, before)
    assert not (tmp_path / ".structmc.lock").exists()


def test_write_atomic_replaces_whole_files_and_leaves_no_temporary(tmp_path, monkeypatch):
    from structmc.storage import write_atomic

    path = tmp_path / "piece.json"
    write_atomic(path, "old")
    write_atomic(path, b"new bytes")
    assert path.read_bytes() == b"new bytes"

    # a write that fails midway keeps the old file whole and removes its temporary
    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr("structmc.storage.atomic.os.replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "never seen")
    assert path.read_bytes() == b"new bytes"
    assert [p.name for p in tmp_path.iterdir()] == ["piece.json"]
