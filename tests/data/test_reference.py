"""Loaders against the reference copies in ``shared/data`` (checksums, shapes, splits).

Skipped, with the reason shown, when that folder is absent or $STRUCTMC_NO_SHARED_DATA is set (CI runs
the data tests so too, as on a fresh clone); CI's main run has it.
"""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest
import torch
from support.paths import SHARED_DATA

import structmc.data as D
from structmc.data import checksums, files
from structmc_papers._shared import ENV_NO_SHARED


def _shared_data() -> Path | None:
    candidates = [] if os.environ.get(ENV_NO_SHARED, "") not in ("", "0") else [SHARED_DATA]
    if os.environ.get("STRUCTMC_DATA"):
        candidates.append(Path(os.environ["STRUCTMC_DATA"]))
    for c in candidates:
        if (c / "SHA256SUMS").is_file():
            return c
    return None


SHARED = _shared_data()
pytestmark = pytest.mark.skipif(
    SHARED is None,
    reason="reference data folder ../shared/data not found or "
    f"${ENV_NO_SHARED} set (set STRUCTMC_DATA to a folder holding "
    "SHA256SUMS and the files it lists)",
)


@pytest.fixture
def kw(tmp_path):
    # the reference folder only: an empty cache, never the network
    return dict(data_dir=SHARED, cache_dir=tmp_path / "cache", download=False)


@pytest.fixture(scope="module")
def mnist():
    return D.load_mnist(data_dir=SHARED, cache_dir="/nonexistent", download=False)


def test_every_reference_file_is_in_the_registry_and_verifies():
    by_label = {s.label: s for s in checksums.all_specs()}
    lines = (SHARED / "SHA256SUMS").read_text().split("\n")
    listed = [ln.split() for ln in lines if ln.strip()]
    assert len(listed) >= 17
    for sha, rel in listed:
        rel = rel.removeprefix("./")
        spec = by_label.get(rel)
        assert spec is not None, f"{rel} has no registry entry"
        assert sha in {d.value for d in spec.digests if d.algorithm == "sha256" and d.of == "file"}
        files.verify_file(SHARED / rel, spec, use_memo=False)


def test_mnist_shapes_labels_and_range(mnist):
    assert mnist.x_train.shape == (60000, 1, 28, 28) and mnist.x_test.shape == (10000, 1, 28, 28)
    assert mnist.x_train.dtype == torch.float32 and mnist.y_train.dtype == torch.int64
    assert mnist.x_val is None and mnist.num_classes == 10
    assert float(mnist.x_train.min()) == 0.0 and float(mnist.x_train.max()) == 1.0
    counts = torch.bincount(mnist.y_train, minlength=10).tolist()
    assert counts == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert torch.bincount(mnist.y_test, minlength=10).tolist() == [
        980,
        1135,
        1032,
        1010,
        982,
        892,
        958,
        1028,
        974,
        1009,
    ]
    assert abs(float(mnist.x_train.mean()) - 0.1307) < 1e-3  # the well-known MNIST pixel mean


def test_mnist_normalisation_and_validation_split():
    ds = D.load_mnist(
        data_dir=SHARED,
        cache_dir="/nonexistent",
        download=False,
        normalize="global",
        val_size=0.1,
        seed=3,
        flatten=True,
    )
    assert ds.x_train.shape == (54000, 784) and ds.x_val.shape == (6000, 784) and ds.x_test.shape == (10000, 784)
    assert abs(float(ds.x_train.mean())) < 1e-4 and abs(float(ds.x_train.std()) - 1) < 1e-3
    # fitted on the training part only: the test set is only approximately standardised
    assert abs(float(ds.x_test.mean())) < 0.02
    # the validation part is a seeded random subset of the training file
    idx = torch.arange(60000)
    _, _, val3, _ = D.base.carve_validation(idx, idx, 0.1, 3)
    _, _, val4, _ = D.base.carve_validation(idx, idx, 0.1, 4)
    full = D.load_mnist(data_dir=SHARED, cache_dir="/nonexistent", download=False)
    assert torch.equal(full.y_train[val3], ds.y_val) and not torch.equal(val3, val4)


def test_fashion_mnist_balanced_classes(kw):
    ds = D.load_fashion_mnist(**kw, normalize="symmetric")
    assert ds.x_train.shape == (60000, 1, 28, 28)
    assert torch.bincount(ds.y_train).tolist() == [6000] * 10
    assert torch.bincount(ds.y_test).tolist() == [1000] * 10
    assert float(ds.x_train.min()) == -1.0 and float(ds.x_train.max()) == 1.0


def test_idx_accepted_by_decompressed_md5_and_rejected_when_truncated(tmp_path):
    spec = checksums.MNIST["t10k-labels-idx1-ubyte"]
    original = SHARED / "mnist" / spec.name
    # a differently compressed copy and an uncompressed copy: new bytes, same content MD5
    folder = tmp_path / "mnist"
    folder.mkdir()
    raw = gzip.decompress(original.read_bytes())
    (folder / spec.name).write_bytes(gzip.compress(raw, compresslevel=1, mtime=0))
    assert files.fetch(spec, data_dir=tmp_path, cache_dir=tmp_path / "c", download_missing=False) == folder / spec.name
    (folder / spec.name).unlink()
    (folder / "t10k-labels-idx1-ubyte").write_bytes(raw)
    path = files.fetch(spec, data_dir=tmp_path, cache_dir=tmp_path / "c", download_missing=False)
    assert path.name == "t10k-labels-idx1-ubyte"
    assert D.images.read_idx(path, 1).shape == (10000,)
    # truncated: detected by the checksum, and by the parser when verification is off
    (folder / "t10k-labels-idx1-ubyte").write_bytes(raw[:-7])
    with pytest.raises(D.ChecksumError, match="does not match"):
        files.fetch(spec, data_dir=tmp_path, cache_dir=tmp_path / "c", download_missing=False)
    with pytest.raises(D.DataError, match="truncated"):
        D.images.read_idx(folder / "t10k-labels-idx1-ubyte", 1)


def test_corrupted_file_is_reported_by_the_loader(tmp_path):
    folder = tmp_path / "mnist"
    folder.mkdir()
    for spec in checksums.MNIST.values():
        (folder / spec.name).symlink_to(SHARED / "mnist" / spec.name)
    bad = folder / "t10k-labels-idx1-ubyte.gz"
    bad.unlink()
    bad.write_bytes((SHARED / "mnist" / bad.name).read_bytes()[:-100])
    with pytest.raises(D.ChecksumError):
        D.load_mnist(data_dir=tmp_path, cache_dir=tmp_path / "c", download=False)
    with pytest.raises(D.DataError, match="truncated or corrupted gzip"):
        D.load_mnist(data_dir=tmp_path, cache_dir=tmp_path / "c", download=False, verify=False)


def test_missing_file_without_download_names_the_places_searched(tmp_path):
    with pytest.raises(D.DataNotFoundError, match="download=False"):
        D.load_mnist(data_dir=tmp_path, cache_dir=tmp_path / "c", download=False)


def test_environment_variable_points_at_the_data(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTMC_DATA", str(SHARED))
    ds = D.load_uci("boston", cache_dir=tmp_path, download=False)
    assert ds.meta["source"].startswith(str(SHARED))


@pytest.mark.parametrize(
    "name, rows, features, target", [("boston", 506, 13, "medv"), ("concrete", 1030, 8, "compressive_strength")]
)
def test_uci_reference_sets_split_and_standardisation(kw, name, rows, features, target):
    ds = D.load(name, **kw)
    n_tr, n_va, n_te = len(ds.y_train), len(ds.y_val), len(ds.y_test)
    assert n_tr + n_va + n_te == rows and ds.meta["target"] == target
    assert abs(n_tr / rows - 0.75) < 0.01 and abs(n_va / rows - 0.10) < 0.01 and abs(n_te / rows - 0.15) < 0.01
    assert ds.x_train.shape[1] == features and ds.task == "regression"
    assert torch.allclose(ds.x_train.mean(0), torch.zeros(features), atol=1e-5)
    assert torch.allclose(ds.x_train.std(0, unbiased=False), torch.ones(features), atol=1e-4)
    assert abs(float(ds.y_train.mean())) < 1e-5
    # the parts are disjoint and together are the file's rows
    raw = torch.cat([ds.y_train, ds.y_val, ds.y_test]) * ds.meta["y_std"] + ds.meta["y_mean"]
    head, body = D.uci.read_table(name, name + ".csv", SHARED / "uci" / f"{name}.csv")
    col = torch.tensor([float(r[head.index(target)]) for r in body])
    assert torch.allclose(raw.sort().values, col.sort().values, atol=1e-3)
    same = D.load(name, **kw)
    assert torch.equal(same.y_test, ds.y_test)
    assert not torch.equal(D.load(name, **kw, seed=1).y_test, ds.y_test)


def test_adult(kw):
    ds = D.load_adult(**kw, val_size=1000)
    assert ds.x_train.shape == (31561, 105) and ds.x_val.shape == (1000, 105) and ds.x_test.shape == (16281, 105)
    assert len(ds.feature_names) == 105 and ds.task == "binary"
    y = torch.cat([ds.y_train, ds.y_val])
    assert int(y.sum()) == 7841 and int(ds.y_test.sum()) == 3846  # '>50K' and '>50K.' rows
    assert torch.allclose(ds.x_train[:, :6].mean(0), torch.zeros(6), atol=1e-5)
    onehot = ds.x_test[:, 6:]
    assert set(onehot.unique().tolist()) == {0.0, 1.0}
    # each categorical attribute contributes at most one 1 ('?' is all zeros)
    assert int(onehot.sum(1).max()) == 8 and int(onehot.sum(1).min()) >= 5


def test_movielens(kw):
    ds = D.load_movielens_100k(**kw)
    assert ds.x_train.shape == (80000, 2) and ds.x_test.shape == (20000, 2) and ds.x_train.dtype == torch.int64
    assert ds.meta["num_users"] == 943 and ds.meta["num_items"] == 1682
    x = torch.cat([ds.x_train, ds.x_test])
    assert int(x[:, 0].min()) == 0 and int(x[:, 0].max()) == 942 and int(x[:, 1].max()) == 1681
    y = torch.cat([ds.y_train, ds.y_test])
    assert set(y.unique().tolist()) == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert abs(float(y.mean()) - 3.52986) < 1e-4
    assert abs(ds.meta["mean_rating"] - float(ds.y_train.mean())) < 1e-6
    u, i, r = D.rating_triples(ds.x_test, ds.y_test)
    assert u.shape == i.shape == r.shape == (20000,)
    with pytest.raises(D.DataNotFoundError):  # the GroupLens folds are only in the archive
        D.load_movielens_100k(**kw, fold=1)


def test_noisy_xor(kw):
    ds = D.load_noisy_xor(**kw)
    assert ds.x_train.shape == (5000, 2) and ds.x_test.shape == (1200, 2)
    assert int(ds.y_train.sum()) == 2500 and int(ds.y_test.sum()) == 600
    # the published points follow the simulator's geometry, corner by corner
    for x, y, n in ((ds.x_train, ds.y_train, 1250), (ds.x_test, ds.y_test, 300)):
        for k, (corner, label) in enumerate(zip(D.xor.CORNERS, D.xor.LABELS)):
            block = x[k * n : (k + 1) * n]
            lo = torch.tensor(corner, dtype=torch.float32) + torch.tensor([-0.55 if c == 0 else -0.45 for c in corner])
            assert bool((block >= lo - 1e-6).all() and (block <= lo + 1 + 1e-6).all())
            assert bool((y[k * n : (k + 1) * n] == label).all())


def test_a_changed_reference_copy_is_rejected(tmp_path):
    folder = tmp_path / "noisy-xor" / "test"
    folder.mkdir(parents=True)
    for v in ("x", "y"):
        shutil.copy(SHARED / "noisy-xor" / "test" / f"{v}.csv", folder / f"{v}.csv")
    shutil.copytree(SHARED / "noisy-xor" / "training", tmp_path / "noisy-xor" / "training")
    text = (folder / "y.csv").read_text().replace("\n1\n", "\n0\n", 1)
    (folder / "y.csv").write_text(text)
    with pytest.raises(D.ChecksumError):
        D.load_noisy_xor(data_dir=tmp_path, cache_dir=tmp_path / "c")
    ds = D.load_noisy_xor(data_dir=tmp_path, cache_dir=tmp_path / "c", verify=False)
    assert int(ds.y_test.sum()) == 599
