"""Issue 36, item 6: a tuner's out_dir has a run folder's guarantees (structmc.storage): every
file in the manifest and checked when read, the writer's lock, and a previous tuning run never
replaced without resume=True or overwrite=True."""

from __future__ import annotations

import json

import pytest
import torch
from support.tuning import InterruptedKSD, linreg

from structmc import Budget
from structmc.storage import RunFolderBusy, RunFolderError
from structmc.storage.tuning_folder import TuningFolder
from structmc.tuning import grid, grid_search, mamba

ARMS = grid("sgld", lr=[0.02, 0.05, 0.1], batch_size=[None, 6, 3])  # 9 arms, eta 3: rounds of 9 and 3


def _tune(out_dir, resume=False, metric="ksd", seed=5, **kw):
    e, d, _ = linreg(N=12, d=2)
    return mamba(
        e,
        torch.zeros(2, dtype=torch.float64),
        ARMS,
        Budget(iterations=360),
        data=d,
        seed=seed,
        thin=1,
        out_dir=out_dir,
        resume=resume,
        progress=False,
        metric=metric,
        **kw,
    )


def _interrupted(out):
    with pytest.raises(KeyboardInterrupt):
        _tune(out, metric=InterruptedKSD(at=len(ARMS) + 1))


def test_every_file_of_the_tuning_folder_is_in_the_manifest(tmp_path):
    _tune(tmp_path)
    m = json.loads((tmp_path / "manifest.json").read_text())
    names = {"progress.pt", "trace.json"} | (
        {"metric_by_round.png"} if (tmp_path / "metric_by_round.png").exists() else set()
    )
    assert set(m["files"]) == names and "pending" not in m
    assert json.loads((tmp_path / "trace.json").read_text())["folder_format"] == 2
    TuningFolder(tmp_path).check()
    assert not (tmp_path / ".structmc.lock").exists()  # released


def test_a_second_tuner_without_resume_is_refused_and_replaces_nothing(tmp_path):
    first = _tune(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match=r"out_dir .* is not empty .*resume=True.*overwrite=True"):
        _tune(tmp_path, seed=6)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    again = _tune(tmp_path, seed=6, overwrite=True)  # asked for: replaced
    assert again.settings["seed"] == 6 and json.loads((tmp_path / "trace.json").read_text())["settings"]["seed"] == 6
    assert first.settings["seed"] == 5
    with pytest.raises(ValueError, match="contradict"):
        _tune(tmp_path, resume=True, overwrite=True)


def test_overwrite_refuses_a_folder_that_is_not_a_tuning_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"refuses to clear .*not a structmc tuning folder.*notes\.txt"):
        _tune(tmp_path, overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_progress_file_is_an_error_naming_it(tmp_path, damage):
    _interrupted(tmp_path)
    p = tmp_path / "progress.pt"
    data = bytearray(p.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    what = r"truncated or altered" if damage == "truncate" else r"corrupted"
    with pytest.raises(RunFolderError, match=rf"progress\.pt: {what}"):
        _tune(tmp_path, resume=True)


def test_a_deleted_manifest_is_an_error_not_an_unverified_resume(tmp_path):
    _interrupted(tmp_path)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(RunFolderError, match=r"manifest is missing, so the tuning folder's files cannot be verified"):
        _tune(tmp_path, resume=True)


def test_a_progress_file_replaced_by_hand_is_refused(tmp_path):
    _interrupted(tmp_path / "a")
    _interrupted(tmp_path / "b")
    (tmp_path / "b" / "progress.pt").write_bytes((tmp_path / "a" / "progress.pt").read_bytes() + b"\0")
    with pytest.raises(RunFolderError, match=r"progress\.pt"):
        _tune(tmp_path / "b", resume=True)


def test_a_second_tuner_on_the_folder_is_refused(tmp_path):
    held = TuningFolder(tmp_path)
    held.lock()  # a tuner in progress
    try:
        with pytest.raises(RunFolderBusy, match="in use by another run"):
            _tune(tmp_path)
        with pytest.raises(RunFolderBusy):
            _tune(tmp_path, resume=True)
    finally:
        held.unlock()
    assert not (tmp_path / "progress.pt").exists()


def test_grid_search_has_the_same_guarantees(tmp_path):
    energy, data, _ = linreg(N=12, d=2)
    kw = dict(data=data, batch_size=None, thin=1, out_dir=tmp_path, progress=False)
    grid_search(energy, torch.zeros(2, dtype=torch.float64), ARMS[:3], Budget(iterations=20), **kw)
    assert "progress.pt" in json.loads((tmp_path / "manifest.json").read_text())["files"]
    with pytest.raises(ValueError, match="is not empty"):
        grid_search(energy, torch.zeros(2, dtype=torch.float64), ARMS[:3], Budget(iterations=20), **kw)
    grid_search(energy, torch.zeros(2, dtype=torch.float64), ARMS[:3], Budget(iterations=20), overwrite=True, **kw)


def test_resume_refuses_a_changed_control_variate_centre(tmp_path):
    """Arms with a control variate keep their centre in their states: another one on resume
    would be silently ignored, so it is refused."""
    e, d, _ = linreg(N=12, d=2)
    arms = grid("sgld", lr=[0.02, 0.05, 0.1], batch_size=[6, 3], gradient=["control_variate"])  # eta 2: 6, 3

    def tune(centre, **kw):
        return mamba(
            e, torch.zeros(2, dtype=torch.float64), arms, Budget(iterations=240), data=d, eta=2, thin=1,
            progress=False, out_dir=tmp_path, centre=centre, **kw,
        )  # fmt: skip

    centre = torch.tensor([0.1, -0.2], dtype=torch.float64)
    with pytest.raises(KeyboardInterrupt):
        tune(centre, metric=InterruptedKSD(at=len(arms) + 1))  # in round 1
    with pytest.raises(ValueError, match=r"cannot resume from .*progress\.pt: the control-variate centre differs"):
        tune(centre + 1.0, resume=True)
    assert tune(centre.clone(), resume=True).complete
