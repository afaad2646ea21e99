"""Round trips through the canonical file formats of the sets that are not available offline:
the tests write small files in each format and load them (checksums off: these are not the
published files; the checksum logic is tested in test_data_reference / test_data_download)."""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import structmc.data as D
from structmc.data.images import parse_cifar_batch, parse_idx
from structmc.data.tabular import read_xlsx


def opts(root: Path) -> dict:
    return dict(data_dir=root, cache_dir=root / "cache", download=False, verify=False)


# ---------------------------------------------------------------------------------------
# IDX
# ---------------------------------------------------------------------------------------
def idx_bytes(arr: np.ndarray) -> bytes:
    return b"\x00\x00\x08" + bytes([arr.ndim]) + struct.pack(">" + "I" * arr.ndim, *arr.shape) + arr.tobytes()


def test_idx_round_trip_and_damage():
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    assert np.array_equal(parse_idx(idx_bytes(arr), 3), arr)
    with pytest.raises(D.DataError, match="truncated"):
        parse_idx(idx_bytes(arr)[:-1], 3)
    with pytest.raises(D.DataError, match="truncated"):
        parse_idx(idx_bytes(arr) + b"\x00", 3)
    with pytest.raises(D.DataError, match="magic"):
        parse_idx(b"\x01" + idx_bytes(arr)[1:], 3)
    with pytest.raises(D.DataError, match="dimensions"):
        parse_idx(idx_bytes(arr), 1)


def test_mnist_layout_from_written_idx_files(tmp_path):
    g = np.random.default_rng(0)
    folder = tmp_path / "mnist"
    folder.mkdir()
    parts = {"train": 12, "t10k": 5}
    for part, n in parts.items():
        imgs = g.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        (folder / f"{part}-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(imgs)))
        (folder / f"{part}-labels-idx1-ubyte").write_bytes(idx_bytes(labels))  # uncompressed alias
    ds = D.load_mnist(**opts(tmp_path), normalize="pixel", val_size=2)
    assert (
        ds.x_train.shape == (10, 1, 28, 28) and ds.x_val.shape == (2, 1, 28, 28) and ds.x_test.shape == (5, 1, 28, 28)
    )
    assert torch.allclose(ds.x_train.mean(0), torch.zeros(1, 28, 28), atol=1e-5)


# ---------------------------------------------------------------------------------------
# CIFAR-10
# ---------------------------------------------------------------------------------------
def cifar_batch(n: int, seed: int, bytes_keys: bool) -> tuple[bytes, np.ndarray, list[int]]:
    g = np.random.default_rng(seed)
    data = g.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = [int(v) for v in g.integers(0, 10, n)]
    d = {"batch_label": "batch", "labels": labels, "data": data, "filenames": [f"img{i}.png" for i in range(n)]}
    if bytes_keys:  # what the original Python 2 cPickle files decode to with encoding='bytes'
        d = {k.encode(): v for k, v in d.items()}
    return pickle.dumps(d, protocol=2), data, labels


def write_cifar(root: Path, *, archive: bool, n: int = 4) -> tuple[np.ndarray, np.ndarray]:
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    blobs, xs, ys = {}, [], []
    for k, name in enumerate(names):
        blob, data, labels = cifar_batch(n, k, bytes_keys=k % 2 == 0)
        blobs[name], _ = blob, xs.append(data)
        ys.append(labels)
    blobs["batches.meta"] = pickle.dumps({"label_names": ["airplane"] * 10}, protocol=2)
    folder = root / "cifar10"
    folder.mkdir(parents=True)
    if archive:
        with tarfile.open(folder / "cifar-10-python.tar.gz", "w:gz") as tar:
            for name, blob in blobs.items():
                info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    else:
        (folder / "cifar-10-batches-py").mkdir()
        for name, blob in blobs.items():
            (folder / "cifar-10-batches-py" / name).write_bytes(blob)
    return np.concatenate(xs), np.concatenate(ys)


@pytest.mark.parametrize("archive", [True, False])
def test_cifar10_round_trip(tmp_path, archive):
    x, y = write_cifar(tmp_path, archive=archive)
    ds = D.load_cifar10(**opts(tmp_path), normalize="none")
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (4, 3, 32, 32)
    expect = torch.from_numpy(x.reshape(-1, 3, 32, 32)).float()
    assert torch.equal(ds.x_train, expect[:20]) and torch.equal(ds.x_test, expect[20:])
    assert ds.y_train.tolist() == y[:20].tolist() and ds.y_test.tolist() == y[20:].tolist()
    chan = D.load_cifar10(**opts(tmp_path), normalize="channel")
    assert torch.allclose(chan.x_train.mean((0, 2, 3)), torch.zeros(3), atol=1e-5)


def test_cifar10_rejects_code_and_damage(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with pytest.raises(D.DataError, match="refusing"):
        parse_cifar_batch(pickle.dumps({"data": Evil(), "labels": []}), "evil")
    blob, _, _ = cifar_batch(3, 0, False)
    with pytest.raises(D.DataError):
        parse_cifar_batch(blob[: len(blob) // 2], "half")
    write_cifar(tmp_path, archive=True)
    archive = tmp_path / "cifar10" / "cifar-10-python.tar.gz"
    archive.write_bytes(archive.read_bytes()[:-200])
    with pytest.raises(D.DataError, match="corrupted archive|truncated"):
        D.load_cifar10(**opts(tmp_path))
    with pytest.raises(D.ChecksumError):  # and with verification on, the checksum catches it first
        D.load_cifar10(data_dir=tmp_path, cache_dir=tmp_path / "cache", download=False)


# ---------------------------------------------------------------------------------------
# SVHN
# ---------------------------------------------------------------------------------------
def test_svhn_round_trip(tmp_path):
    sio = pytest.importorskip("scipy.io")
    g = np.random.default_rng(1)
    folder = tmp_path / "svhn"
    folder.mkdir()
    truth = {}
    for split, n in (("train", 6), ("test", 3)):
        X = g.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = np.array([[10], [1], [9], [10], [2], [3]][:n], dtype=np.uint8)
        sio.savemat(folder / f"{split}_32x32.mat", {"X": X, "y": y})
        truth[split] = (X, y)
    ds = D.load_svhn(**opts(tmp_path), normalize="none")
    assert ds.x_train.shape == (6, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    assert ds.y_train.tolist() == [0, 1, 9, 0, 2, 3]  # label 10 is digit 0
    X = truth["train"][0]
    assert torch.equal(ds.x_train[4, 2], torch.from_numpy(X[:, :, 2, 4]).float())  # [H, W, C, N] -> [N, C, H, W]
    (folder / "test_32x32.mat").write_bytes(b"not a mat file")
    with pytest.raises(D.DataError):
        D.load_svhn(**opts(tmp_path))


# ---------------------------------------------------------------------------------------
# UCI regression formats
# ---------------------------------------------------------------------------------------
def _rows(n: int, p: int, seed: int) -> np.ndarray:
    return np.round(np.random.default_rng(seed).normal(size=(n, p)) * 10 + 50, 3)


def write_uci(root: Path, n: int = 40) -> dict[str, np.ndarray]:
    uci = root / "uci"
    uci.mkdir(parents=True)
    out = {}
    wine = _rows(n, 12, 0)
    header = ";".join(
        f'"{c}"'
        for c in [
            "fixed acidity",
            "volatile acidity",
            "citric acid",
            "residual sugar",
            "chlorides",
            "free sulfur dioxide",
            "total sulfur dioxide",
            "density",
            "pH",
            "sulphates",
            "alcohol",
            "quality",
        ]
    )
    for color in ("red", "white"):
        body = "\n".join(";".join(f"{v:g}" for v in r) for r in wine)
        (uci / f"winequality-{color}.csv").write_text(header + "\n" + body + "\n")
    out["wine"] = wine
    air = _rows(n, 6, 1)
    (uci / "airfoil_self_noise.dat").write_text("\n".join("\t".join(f"{v:g}" for v in r) for r in air) + "\n")
    out["airfoil"] = air
    yacht = _rows(n, 7, 2)
    (uci / "yacht_hydrodynamics.data").write_text("\n".join(" ".join(f"{v:g}" for v in r) for r in yacht) + "\n\n\n")
    out["yacht"] = yacht
    housing = _rows(n, 14, 3)
    (uci / "housing.data").write_text("\n".join(" " + "  ".join(f"{v:8.3f}" for v in r) for r in housing) + "\n")
    out["housing"] = housing
    return out


def write_xlsx(path: Path, rows: list[list]) -> None:
    """A minimal spreadsheet as Excel writes it: shared strings for text, numbers inline."""
    strings: list[str] = []
    cells_xml = []
    for i, row in enumerate(rows, 1):
        cells = []
        for j, v in enumerate(row):
            ref = f"{chr(65 + j)}{i}"
            if isinstance(v, str):
                strings.append(v)
                cells.append(f'<c r="{ref}" t="s"><v>{len(strings) - 1}</v></c>')
            else:
                cells.append(f'<c r="{ref}"><v>{v!r}</v></c>')
        cells_xml.append(f'<row r="{i}">{"".join(cells)}</row>')
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    sheet = (
        f'<?xml version="1.0" encoding="UTF-8"?><worksheet {ns}><sheetData>{"".join(cells_xml)}</sheetData></worksheet>'
    )
    sst = (
        f'<?xml version="1.0" encoding="UTF-8"?><sst {ns} count="{len(strings)}">'
        + "".join(f"<si><t>{s}</t></si>" for s in strings)
        + "</sst>"
    )
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("xl/workbook.xml", f"<workbook {ns}/>")
        z.writestr("xl/worksheets/sheet1.xml", sheet)
        z.writestr("xl/sharedStrings.xml", sst)


@pytest.mark.parametrize(
    "name, key, p",
    [
        ("wine-red", "wine", 11),
        ("wine-white", "wine", 11),
        ("airfoil", "airfoil", 5),
        ("yacht", "yacht", 6),
        ("boston", "housing", 13),
    ],
)
def test_uci_numeric_formats(tmp_path, name, key, p):
    truth = write_uci(tmp_path)[key]
    ds = D.load_uci(name, **opts(tmp_path), standardize_x=False, standardize_y=False)
    assert (len(ds.y_train), len(ds.y_val), len(ds.y_test)) == (30, 4, 6)
    assert ds.x_train.shape[1] == p
    x = torch.cat([ds.x_train, ds.x_val, ds.x_test]).double()
    y = torch.cat([ds.y_train, ds.y_val, ds.y_test]).double()
    got = torch.cat([x, y[:, None]], 1)
    dist = torch.cdist(got, torch.from_numpy(truth))  # the same rows, in some order
    nearest = dist.argmin(1)
    assert float(dist.min(1).values.max()) < 1e-3 and len(set(nearest.tolist())) == len(truth)


def test_energy_xlsx_and_csv(tmp_path):
    (tmp_path / "uci").mkdir()
    vals = _rows(20, 10, 4)
    header = [f"X{i}" for i in range(1, 9)] + ["Y1", "Y2"]
    write_xlsx(tmp_path / "uci" / "ENB2012_data.xlsx", [header] + [list(map(float, r)) for r in vals])
    ds = D.load_energy(**opts(tmp_path), split=(0.8, 0.0, 0.2), standardize_y=False)
    assert ds.x_val is None and ds.x_train.shape == (16, 8) and ds.meta["target"] == "heating_load"
    assert sorted(torch.cat([ds.y_train, ds.y_test]).tolist()) == pytest.approx(sorted(vals[:, 8]), abs=1e-3)
    cool = D.load_energy(**opts(tmp_path), target="cooling_load", standardize_y=False)
    assert sorted(torch.cat([cool.y_train, cool.y_val, cool.y_test]).tolist()) == pytest.approx(
        sorted(vals[:, 9]), abs=1e-3
    )
    assert "heating_load" not in cool.feature_names
    # a damaged spreadsheet is reported
    (tmp_path / "uci" / "ENB2012_data.xlsx").write_bytes(b"PK\x03\x04 broken")
    with pytest.raises(D.DataError, match="xlsx"):
        D.load_energy(**opts(tmp_path))


def test_seoul_bike_latin1_and_categoricals(tmp_path):
    (tmp_path / "uci").mkdir()
    head = (
        "Date,Rented Bike Count,Hour,Temperature(\xb0C),Humidity(%),Wind speed (m/s),Visibility (10m),"
        "Dew point temperature(\xb0C),Solar Radiation (MJ/m2),Rainfall(mm),Snowfall (cm),Seasons,Holiday,"
        "Functioning Day"
    )
    seasons = ["Winter", "Spring", "Summer", "Autumn"]
    lines = [head]
    for i in range(24):
        lines.append(
            f"01/12/2017,{100 + i},{i},{-5.2 + i},{37},{2.2},{2000},{-17.6},{0.0},{0},{0},"
            f"{seasons[i % 4]},{'Holiday' if i % 5 == 0 else 'No Holiday'},{'Yes' if i % 7 else 'No'}"
        )
    (tmp_path / "uci" / "SeoulBikeData.csv").write_bytes(("\r\n".join(lines) + "\r\n").encode("latin-1"))
    ds = D.load_seoul_bike(**opts(tmp_path), standardize_x=False, standardize_y=False)
    names = ds.feature_names
    assert "Date" not in names and "Temperature(\xb0C)" in names
    assert [n for n in names if n.startswith("Seasons=")] == [
        "Seasons=Autumn",
        "Seasons=Spring",
        "Seasons=Summer",
        "Seasons=Winter",
    ]
    assert "Holiday=No Holiday" in names and "Functioning Day=Yes" in names
    x = torch.cat([ds.x_train, ds.x_val, ds.x_test])
    assert x.shape == (24, 9 + 4 + 1 + 1)
    season_cols = [names.index(n) for n in names if n.startswith("Seasons=")]
    assert torch.equal(x[:, season_cols].sum(1), torch.ones(24))


def test_obesity_zip_and_ordinal_target(tmp_path):
    (tmp_path / "uci").mkdir()
    levels = D.uci.OBESITY_LEVELS
    head = (
        "Gender,Age,Height,Weight,family_history_with_overweight,FAVC,FCVC,NCP,CAEC,SMOKE,CH2O,SCC,FAF,TUE,"
        "CALC,MTRANS,NObeyesdad"
    )
    rows = [head]
    for i in range(21):
        rows.append(
            f"{'Female' if i % 2 else 'Male'},{20 + i},{1.6 + i / 100:.2f},{60 + i},yes,no,2,3,"
            f"{['Sometimes', 'Frequently', 'no'][i % 3]},no,2,no,0,1,no,"
            f"{['Public_Transportation', 'Walking'][i % 2]},{levels[i % 7]}"
        )
    with zipfile.ZipFile(tmp_path / "uci" / "ObesityDataSet_raw_and_data_sinthetic.zip", "w") as z:
        z.writestr("ObesityDataSet_raw_and_data_sinthetic.csv", "\r\n".join(rows) + "\r\n")
    ds = D.load_obesity(**opts(tmp_path), standardize_y=False)
    y = torch.cat([ds.y_train, ds.y_val, ds.y_test])
    assert sorted(y.tolist()) == sorted(float(i % 7) for i in range(21))
    assert "CAEC=Frequently" in ds.feature_names and "Gender=Male" in ds.feature_names
    w = D.load_obesity(**opts(tmp_path), target="Weight", standardize_y=False)
    assert "NObeyesdad=Normal_Weight" in w.feature_names


def test_truncated_table_row_is_reported(tmp_path):
    write_uci(tmp_path)
    path = tmp_path / "uci" / "airfoil_self_noise.dat"
    text = path.read_text()
    path.write_text(text[: text.rindex("\t")] + "\n")
    with pytest.raises(D.DataError, match="fields"):
        D.load_airfoil(**opts(tmp_path))


def test_unknown_uci_name():
    with pytest.raises(ValueError, match="unknown"):
        D.load_uci("kin9nm")
    with pytest.raises(ValueError, match="unknown data set"):
        D.load("imagenet")


def test_uci_split_without_training_rows(tmp_path):
    # a split with no training rows used to fail inside the standardiser (or, unstandardised,
    # return a Dataset whose x_train is None)
    write_uci(tmp_path)
    for kw in ({}, {"standardize_x": False, "standardize_y": False}):
        with pytest.raises(ValueError, match=r"split=\(0\.0, 0\.5, 0\.5\) leaves no training rows"):
            D.load_airfoil(**opts(tmp_path), split=(0.0, 0.5, 0.5), **kw)


def test_xlsx_shared_string_cell_without_value(tmp_path):
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    sheet = (
        f'<worksheet {ns}><sheetData><row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1" t="s"/></row>'
        f"</sheetData></worksheet>"
    )
    path = tmp_path / "t.xlsx"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("xl/worksheets/sheet1.xml", sheet)
        z.writestr("xl/sharedStrings.xml", f"<sst {ns}><si><t>a</t></si></sst>")
    with pytest.raises(D.DataError, match="shared-string cell B1 has no value"):
        read_xlsx(path)


# ---------------------------------------------------------------------------------------
# Adult and MovieLens
# ---------------------------------------------------------------------------------------
ADULT_ROWS = [
    "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, {}",
    "50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, ?, {}",
    "38, Private, 215646, HS-grad, 9, Divorced, Handlers-cleaners, Not-in-family, Black, Female, 0, 0, 40, Cuba, {}",
]


def test_adult_quirks(tmp_path):
    folder = tmp_path / "adult"
    folder.mkdir()
    labels = [">50K", "<=50K", ">50K"]
    (folder / "adult.data").write_text("\n".join(r.format(l) for r, l in zip(ADULT_ROWS, labels)) + "\n\n")
    test_rows = [r.format(l + ".") for r, l in zip(ADULT_ROWS, ["<=50K", ">50K", "<=50K"])]
    test_rows[0] = test_rows[0].replace("State-gov", "Never-worked")  # a category unseen in training
    (folder / "adult.test").write_text("|1x3 Cross validator\n" + "\n".join(test_rows) + "\n")
    ds = D.load_adult(**opts(tmp_path))
    assert ds.y_train.tolist() == [1.0, 0.0, 1.0] and ds.y_test.tolist() == [0.0, 1.0, 0.0]
    names = ds.feature_names
    assert "native-country=?" not in names and "native-country=Cuba" in names
    cols = [names.index(n) for n in names if n.startswith("native-country=")]
    assert ds.x_train[1, cols].sum() == 0  # '?' is an all-zero block
    wc = [names.index(n) for n in names if n.startswith("workclass=")]
    assert ds.x_test[0, wc].sum() == 0 and ds.x_test[1, wc].sum() == 1
    (folder / "adult.test").write_text("|1x3 Cross validator\n39, State-gov, 77516\n")
    with pytest.raises(D.DataError, match="fields"):
        D.load_adult(**opts(tmp_path))


def test_movielens_archive_and_folds(tmp_path):
    g = np.random.default_rng(5)
    n = 200
    data = np.stack([g.integers(1, 11, n), g.integers(1, 21, n), g.integers(1, 6, n), g.integers(8e8, 9e8, n)], 1)

    def text(a):
        return "".join("\t".join(str(v) for v in r) + "\n" for r in a)

    (tmp_path / "movielens-100k").mkdir()
    with zipfile.ZipFile(tmp_path / "movielens-100k" / "ml-100k.zip", "w") as z:
        z.writestr("ml-100k/u.data", text(data))
        z.writestr("ml-100k/u1.base", text(data[:150]))
        z.writestr("ml-100k/u1.test", text(data[150:]))
    ds = D.load_movielens_100k(**opts(tmp_path), seed=1)
    assert len(ds.y_train) == 160 and len(ds.y_test) == 40
    got = torch.cat([torch.cat([ds.x_train, ds.x_test]) + 1, torch.cat([ds.y_train, ds.y_test])[:, None].long()], 1)
    want = torch.from_numpy(data[:, :3])
    assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, want.tolist()))
    fold = D.load_movielens_100k(**opts(tmp_path), fold=1)
    assert len(fold.y_train) == 150 and torch.equal(fold.x_test + 1, torch.from_numpy(data[150:, :2]))
    with pytest.raises(ValueError):
        D.load_movielens_100k(**opts(tmp_path), fold=6)
    with pytest.raises(D.DataError, match="4 fields"):
        D.movielens.parse_ratings("1\t2\t3\t4\n5\t6\t3\n")


def test_noisy_xor_simulator():
    x, y = D.simulate_noisy_xor(500, seed=3)
    assert x.shape == (2000, 2) and y.tolist() == [0.0] * 500 + [1.0] * 1000 + [0.0] * 500
    hi = x > 0.5
    assert torch.equal((hi[:, 0] ^ hi[:, 1]).float(), y)  # XOR of the corner indicators
    assert float(x.min()) >= -0.55 and float(x.max()) <= 1.55
    x2, _ = D.simulate_noisy_xor(500, seed=3)
    assert torch.equal(x, x2) and not torch.equal(x, D.simulate_noisy_xor(500, seed=4)[0])
    ds = D.noisy_xor_dataset(10, 5, seed=0)
    assert ds.x_train.shape == (40, 2) and ds.x_test.shape == (20, 2)
