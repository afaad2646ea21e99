"""Issue 36, items 11, 12 and 22: ``structmc sample`` ends a diverged run with the one-line
``structmc: error:`` naming ``diverged.json`` (exit 2, no traceback), refuses ``--out ''``,
takes ``--threads`` and shows its defaults in ``--help``."""

from __future__ import annotations

import json

import pytest
import torch

from structmc.cli import main

TINY = ["sample", "--dataset", "iris", "--steps", "40", "--burn-in", "10", "--chains", "1", "--quiet"]


def test_a_diverging_step_is_one_error_line_naming_diverged_json(tmp_path, capsys):
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + ["--lr", "10", "--out", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("structmc: error:")]
    assert len(lines) == 1, err
    assert "non-finite" in lines[0] and str(out / "run" / "diverged.json") in lines[0] and "--lr" in lines[0]
    assert (out / "run" / "diverged.json").is_file()


def test_empty_out_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + ["--out", ""])
    assert exit_info.value.code == 2
    assert "--out is empty" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_threads_sets_torch_threads_and_is_reported(tmp_path, monkeypatch):
    calls = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (calls.append(n), real(n)))
    before = torch.get_num_threads()
    assert main(TINY + ["--threads", "2", "--out", str(tmp_path / "o")]) == 0
    assert calls[0] == 2 and torch.get_num_threads() == before  # set for the run, then restored
    assert json.loads((tmp_path / "o" / "report.json").read_text())["settings"]["threads"] == 2


def test_threads_below_one_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + ["--threads", "0", "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2 and "--threads must be an integer >= 1" in capsys.readouterr().err


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    text = text[text.index("options:") :]  # the flags' descriptions, not the usage line
    for flag, default in [
        ("--lr", "0.0001"),
        ("--steps", "5000"),
        ("--burn-in", "1000"),
        ("--thin", "5"),
        ("--batch-size", "32"),
        ("--chains", "2"),
        ("--seed", "0"),
    ]:
        assert f"{flag} " in text
        after = text[text.index(f"{flag} ") :]
        assert f"default {default})" in after[:400], (flag, after[:400])
    assert "--threads" in text
