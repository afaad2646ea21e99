"""Issue 36, items 3, 4, 5 and 7: run.json is verified like every other file of a run folder, a
resume never deletes draws it cannot attribute, a chain.pt never hides a run's draws, and a
changed control-variate centre is refused on resume."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from support.runs import gaussian_log_prob, mlp_energy

import structmc as sm
from structmc.cli import main
from structmc.storage import RunFolder, RunFolderError


class _Crash(Exception):
    pass


def _mlp_run(out, **kw):
    energy, data = mlp_energy()
    args = dict(data=data, batch_size=30, seed=2, num_chains=2, progress=False, out_dir=out)
    return sm.sample(energy, None, sm.SGLD(1e-3), 20, **{**args, **kw})


# -- item 3: run.json is in the manifest, verified on load, resume and diagnose -------------------
def test_run_json_is_listed_in_the_manifest(tmp_path):
    _mlp_run(tmp_path)
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert "run.json" in m["files"] and m["format"] == 3 and "pending" not in m
    RunFolder(tmp_path).check()


def test_swapped_parameters_in_run_json_are_refused_not_read_as_other_draws(tmp_path, capsys):
    chain = _mlp_run(tmp_path)
    assert torch.equal(sm.load_chain(tmp_path)["0.weight"], chain["0.weight"])
    p = tmp_path / "run.json"
    settings = json.loads(p.read_text())
    names = [name for name, _ in settings["space"]]
    assert names[:2] == ["0.weight", "0.bias"]
    settings["space"][0], settings["space"][1] = settings["space"][1], settings["space"][0]
    p.write_text(json.dumps(settings, indent=2))
    with pytest.raises(RunFolderError, match=r"run\.json: (truncated or altered|corrupted)"):
        sm.load_chain(tmp_path)
    assert main(["diagnose", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "structmc: error:" in err and "run.json" in err and "Traceback" not in err
    with pytest.raises(RunFolderError, match=r"run\.json"):  # and resume, before touching anything
        _mlp_run(tmp_path, resume=True)


@pytest.mark.parametrize("content", ["", '{"space": [["0.weight", [6, 4]]', "[1, 2]"])
def test_an_empty_or_truncated_run_json_is_an_error_naming_it(tmp_path, content, capsys):
    _mlp_run(tmp_path)
    (tmp_path / "run.json").write_text(content)
    with pytest.raises(RunFolderError, match=r"run\.json"):
        sm.load_chain(tmp_path)
    assert main(["diagnose", str(tmp_path)]) == 2
    assert "run.json" in capsys.readouterr().err


def _as_folder_from_before_manifests(path):
    (path / "manifest.json").unlink()
    settings = json.loads((path / "run.json").read_text())
    del settings["folder_format"]
    return settings


def test_run_json_without_space_is_an_error_naming_it_in_an_unverified_folder(tmp_path, capsys):
    """Where nothing can be verified (a folder from before manifests), a run.json without the
    parameter layout is still a one-line error naming the file, not a KeyError traceback."""
    _mlp_run(tmp_path)
    settings = _as_folder_from_before_manifests(tmp_path)
    del settings["space"]
    (tmp_path / "run.json").write_text(json.dumps(settings))
    with pytest.warns(UserWarning, match="unverified"), pytest.raises(RunFolderError, match=r"run\.json: no 'space'"):
        sm.load_chain(tmp_path)
    assert main(["diagnose", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "run.json: no 'space'" in err and "Traceback" not in err


def test_a_folder_whose_manifest_predates_run_json_loads_with_a_warning_and_resume_lists_it(tmp_path):
    energy, data = mlp_energy()
    kw = dict(data=data, batch_size=30, seed=2, num_chains=2, progress=False)
    full = sm.sample(energy, None, sm.SGLD(1e-3), 20, **kw)
    sm.sample(energy, None, sm.SGLD(1e-3), 12, out_dir=tmp_path, **kw)
    m = json.loads((tmp_path / "manifest.json").read_text())
    del m["files"]["run.json"]
    m["format"] = 2  # as the structmc before this one wrote it
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    with pytest.warns(UserWarning, match=r"run\.json.*unverified"):
        sm.load_chain(tmp_path)
    resumed = sm.sample(energy, None, sm.SGLD(1e-3), 20, out_dir=tmp_path, resume=True, **kw)
    assert torch.equal(resumed.samples, full.samples)
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert "run.json" in m["files"] and m["format"] == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(sm.load_chain(tmp_path).samples, full.samples)


def test_a_kill_while_run_json_is_replaced_leaves_a_verifiable_folder(tmp_path, monkeypatch):
    """run.json is rewritten on resume (num_steps may grow): the manifest names the new digest
    as pending first, so a kill before or after the file is replaced leaves one it accepts."""
    import structmc.storage.manifest as manifest_mod

    energy, data = mlp_energy()
    kw = dict(data=data, batch_size=30, seed=2, num_chains=2, progress=False)
    full = sm.sample(energy, None, sm.SGLD(1e-3), 20, **kw)
    for replaced in (False, True):
        out = tmp_path / f"replaced-{replaced}"
        sm.sample(energy, None, sm.SGLD(1e-3), 12, out_dir=out, **kw)
        real = manifest_mod._atomic_write_bytes

        def killed(data_, path, real=real, replaced=replaced):
            if path.name == "run.json":
                if replaced:
                    real(data_, path)
                raise _Crash
            real(data_, path)

        with monkeypatch.context() as mp:
            mp.setattr(manifest_mod, "_atomic_write_bytes", killed)
            with pytest.raises(_Crash):
                sm.sample(energy, None, sm.SGLD(1e-3), 20, out_dir=out, resume=True, **kw)
        assert "pending" in json.loads((out / "manifest.json").read_text())
        RunFolder(out).check()
        assert sm.load_chain(out).num_draws == 12
        resumed = sm.sample(energy, None, sm.SGLD(1e-3), 20, out_dir=out, resume=True, **kw)
        assert torch.equal(resumed.samples, full.samples)
        assert "pending" not in json.loads((out / "manifest.json").read_text())


# -- item 4: run.json missing, no checkpoint: resume=True refuses to delete the draws -------------
def test_resume_without_run_json_or_checkpoint_refuses_to_delete_the_draws(tmp_path):
    kw = dict(thin=2, chunk_draws=3, seed=4, num_chains=2, progress=False, out_dir=tmp_path)

    def die(t, state):
        if t == 50:
            raise _Crash  # killed before any checkpoint

    with pytest.raises(_Crash):
        sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGLD(0.05), 60, callback=die, **kw)
    (tmp_path / "run.json").unlink()
    chunks = sorted(p.name for p in (tmp_path / "samples").iterdir())
    assert chunks
    with pytest.raises(
        ValueError, match=r"holds 8 sample chunk\(s\) in .*samples.* but no run\.json and no checkpoint"
    ):
        sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGLD(0.05), 60, resume=True, **{**kw, "seed": 9})
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == chunks  # untouched
    assert not (tmp_path / "run.json").exists()


# -- item 5: a chain.pt never hides a run's draws ------------------------------------------------
def test_save_chain_into_a_run_folder_is_refused_and_a_stray_chain_pt_is_ignored(tmp_path):
    chain = _mlp_run(tmp_path / "run")
    other = sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGLD(0.05), 10, progress=False)
    with pytest.raises(ValueError, match=r"save_chain: .*run.* is a structmc run or tuning folder"):
        sm.save_chain(other, tmp_path / "run")
    assert not (tmp_path / "run" / "chain.pt").exists()
    sm.save_chain(other, tmp_path / "saved")  # elsewhere: as before
    assert torch.equal(sm.load_chain(tmp_path / "saved").samples, other.samples)
    # a chain.pt put there by hand (or by an earlier structmc's save_chain): the run's draws win
    (tmp_path / "run" / "chain.pt").write_bytes((tmp_path / "saved" / "chain.pt").read_bytes())
    with pytest.warns(UserWarning, match=r"chain\.pt is ignored"):
        back = sm.load_chain(tmp_path / "run")
    assert torch.equal(back.samples, chain.samples)


def test_diagnose_reads_the_run_not_a_stray_chain_pt(tmp_path, capsys):
    _mlp_run(tmp_path / "run")
    other = sm.sample(gaussian_log_prob, torch.zeros(3), sm.SGLD(0.05), 10, progress=False)
    sm.save_chain(other, tmp_path / "saved")
    (tmp_path / "run" / "chain.pt").write_bytes((tmp_path / "saved" / "chain.pt").read_bytes())
    assert main(["diagnose", str(tmp_path / "run"), "--out", str(tmp_path / "diag")]) == 0
    out = capsys.readouterr().out
    assert "2 chains x" in out and "3 parameters" not in out


# -- item 7: a changed control-variate centre is refused on resume -------------------------------
def test_resume_refuses_a_changed_control_variate_centre(tmp_path):
    energy, data = mlp_energy()
    centre = energy.initial_position() + 0.01
    kw = dict(data=data, batch_size=30, seed=1, progress=False, out_dir=tmp_path)
    sm.sample(energy, None, sm.SGLD(1e-3), 12, gradient=sm.ControlVariate(centre), **kw)
    with pytest.raises(ValueError, match=r"cannot resume: the ControlVariate centre differs"):
        sm.sample(energy, None, sm.SGLD(1e-3), 20, gradient=sm.ControlVariate(centre + 1.0), resume=True, **kw)
    # the same values in another dtype, or -0.0 for +0.0, are the same centre
    same = centre.double().float().clone()
    assert sm.sample(energy, None, sm.SGLD(1e-3), 20, gradient=sm.ControlVariate(same), resume=True, **kw).num_draws


def test_an_in_place_change_of_the_centre_is_seen(tmp_path):
    energy, data = mlp_energy()
    centre = energy.initial_position() + 0.01
    cv = sm.ControlVariate(centre)
    kw = dict(data=data, batch_size=30, seed=1, progress=False, out_dir=tmp_path, gradient=cv)
    sm.sample(energy, None, sm.SGLD(1e-3), 12, **kw)
    centre += 0.5  # the caller's tensor, which the estimator shares
    with pytest.raises(ValueError, match=r"ControlVariate centre differs"):
        sm.sample(energy, None, sm.SGLD(1e-3), 20, resume=True, **kw)


def test_a_checkpoint_without_the_centre_fingerprint_resumes_with_a_warning(tmp_path):
    energy, data = mlp_energy()
    centre = energy.initial_position() + 0.01
    kw = dict(data=data, batch_size=30, seed=1, progress=False, gradient=sm.ControlVariate(centre))
    full = sm.sample(energy, None, sm.SGLD(1e-3), 20, **kw)
    sm.sample(energy, None, sm.SGLD(1e-3), 12, out_dir=tmp_path, **kw)
    folder = RunFolder(tmp_path)
    ckpt = folder.load_checkpoint()
    del ckpt["settings"]["config"]["gradient"]["centre"]  # as an earlier structmc wrote it
    folder.lock()
    try:
        folder.save_checkpoint(ckpt)
    finally:
        folder.unlock()
    with pytest.warns(UserWarning, match="did not record the ControlVariate centre"):
        resumed = sm.sample(energy, None, sm.SGLD(1e-3), 20, out_dir=tmp_path, resume=True, **kw)
    assert torch.equal(resumed.samples, full.samples)


def test_diagnose_names_an_unreadable_diverged_json(tmp_path, capsys):
    _mlp_run(tmp_path)
    (tmp_path / "diverged.json").write_text("{")
    assert main(["diagnose", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "diverged.json: unreadable" in err and "Traceback" not in err
