"""Statlog Australian (pSGLD Fig. 2): the whitespace-normalised "text" digest, the parser's
checks, and the loader on a stand-in file (the real one is not in the repository)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from structmc.data import ChecksumError, DataError, Digest, checksums, load, load_australian
from structmc.data.australian import CLASS_COUNTS, read_australian
from structmc.data.files import FileSpec, hash_text, normalized_text, verify_file


def _table(seed: int = 0, rows: int = 690) -> np.ndarray:
    g = np.random.default_rng(seed)
    x = np.column_stack([g.integers(0, 2, rows), g.normal(30, 10, rows), g.exponential(1e3, (rows, 12))])
    return np.column_stack([x, (np.arange(rows) < 307).astype(float)])


def _write(path: Path, table: np.ndarray, *, eol: str = "\n", trailing: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [" ".join(f"{v:g}" for v in row) + trailing for row in table]
    path.write_bytes((eol.join(lines)).encode())
    return path


def test_the_text_digest_ignores_layout_and_pins_every_field(tmp_path):
    t = _table()
    a = _write(tmp_path / "a.dat", t)
    b = _write(tmp_path / "b.dat", t, eol="\r\n", trailing=" ")  # CRLF, trailing blanks, no final newline
    assert normalized_text(a.read_bytes()) == normalized_text(b.read_bytes() + b"\r\n\r\n")
    assert hash_text(a, ["sha256"]) == hash_text(b, ["sha256"])
    changed = t.copy()
    changed[19, -1] = 1 - changed[19, -1]  # one label flipped, the defect of one public copy
    c = _write(tmp_path / "c.dat", changed)
    assert hash_text(c, ["sha256"]) != hash_text(a, ["sha256"])
    spec = FileSpec("x", "a.dat", digests=(Digest("sha256", hash_text(a, ["sha256"])["sha256"], "text"),))
    verify_file(b, spec, use_memo=False)  # another layout of the same rows is accepted
    with pytest.raises(ChecksumError, match="sha256 of text"):
        verify_file(c, spec, use_memo=False)
    with pytest.raises(ValueError, match="Digest.of"):
        Digest("sha256", "00", "lines")


def test_the_parser_checks_fields_and_labels(tmp_path):
    t = _table()
    x, y = read_australian(_write(tmp_path / "ok.dat", t))
    assert x.shape == (690, 14) and int(y.sum()) == CLASS_COUNTS[1]
    short = tmp_path / "short.dat"
    short.write_text("1 2 3\n")
    with pytest.raises(DataError, match="line 1 has 3 fields, expected 15"):
        read_australian(short)
    bad = t.copy()
    bad[5, -1] = 2.0
    with pytest.raises(DataError, match="labels must be 0 or 1"):
        read_australian(_write(tmp_path / "bad.dat", bad))


def test_the_loader_standardises_and_verifies(tmp_path):
    root = tmp_path / "data"
    _write(root / "statlog-australian" / "australian.dat", _table())
    with pytest.raises(ChecksumError):  # a stand-in is not UCI's file
        load_australian(data_dir=root, cache_dir=tmp_path / "cache", download=False)
    d = load_australian(data_dir=root, cache_dir=tmp_path / "cache", download=False, verify=False)
    assert d.x_train.shape == (690, 14) and d.task == "binary" and d.feature_names[0] == "A1"
    assert torch.allclose(d.x_train.mean(0), torch.zeros(14), atol=1e-4)
    assert torch.allclose(d.x_train.std(0, unbiased=False), torch.ones(14), atol=1e-3)
    raw = load(
        "australian", data_dir=root, cache_dir=tmp_path / "cache", download=False, verify=False, standardize=False
    )
    assert float(raw.x_train.max()) > 100  # the raw codes' scales
    assert checksums.AUSTRALIAN in checksums.all_specs()


def test_the_real_file_when_present():
    root = os.environ.get("STRUCTMC_DATA")
    path = None if root is None else Path(root) / "statlog-australian" / "australian.dat"
    if path is None or not path.is_file():
        pytest.skip("australian.dat is not in $STRUCTMC_DATA (the shared data folder does not have it)")
    d = load_australian(data_dir=root, download=False)
    assert d.x_train.shape == (690, 14) and int(d.y_train.sum()) == 307
