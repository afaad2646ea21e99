"""Root conftest: puts ``tests/`` on ``sys.path`` so that every test folder (each a package,
like ``tests/diagnostics``) can import the shared helpers as ``support.<module>``, whatever
pytest's import mode; one intra-op thread; and the data files or stand-ins for them
(``uci_data``, ``mnist_data``, ``fashion_mnist_data``) for the tests that need the papers' data."""

import contextlib
import gzip
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tests use small tensors: one intra-op thread avoids thread start-up and contention
    costs (measured ~10x on small ops on a loaded 2-core machine) and makes timings stable."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---------------------------------------------------------------------------------------------
# The data files, or stand-ins in their canonical format
# ---------------------------------------------------------------------------------------------
# An end-to-end test needs the paper's files; on a fresh clone (no ../shared/data, nothing in
# $STRUCTMC_DATA or the cache) it runs on small synthetic arrays written in the files' own
# format into a temporary folder that $STRUCTMC_DATA then names, so the loaders, the parsers
# and the experiment's "files" path are all exercised. The stand-ins match none of the
# registered checksums: only files inside that folder skip verification.


def _needs(name: str) -> list:
    """A data set's files: a list of alternatives per needed file (any one of them will do)."""
    from structmc.data import checksums

    return {
        "mnist": [[spec] for spec in checksums.MNIST.values()],
        "fashion-mnist": [[spec] for spec in checksums.FASHION_MNIST.values()],
        "boston": [[checksums.UCI["boston.csv"], checksums.UCI["housing.data"]]],
        "concrete": [[checksums.UCI["concrete.csv"], checksums.UCI["Concrete_Data.xls"]]],
    }[name]


def _write_idx(path: Path, array: np.ndarray) -> None:
    """A gzipped IDX file (LeCun's format: 0, 0, type 0x08 = ubyte, ndim; big-endian sizes)."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as f:
        f.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def _idx_standin(folder: str, seed: int, num_train: int = 2000, num_test: int = 1000):
    def write(root: Path):
        from structmc.data import synthetic_images

        x_tr, y_tr, x_te, y_te = synthetic_images(num_train, num_test, seed)
        u8 = lambda x: (x[:, 0] * 255).round().to(torch.uint8).numpy()  # noqa: E731
        for stem, arr in (
            ("train-images-idx3-ubyte", u8(x_tr)),
            ("train-labels-idx1-ubyte", y_tr.numpy()),
            ("t10k-images-idx3-ubyte", u8(x_te)),
            ("t10k-labels-idx1-ubyte", y_te.numpy()),
        ):
            _write_idx(root / folder / f"{stem}.gz", arr.astype(np.uint8))

    return write


def _write_csv(path: Path, header: list[str], rows: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(",".join(header) + "\n" + "\n".join(",".join(f"{v:.6g}" for v in r) for r in rows) + "\n")


def _boston_standin(root: Path) -> None:
    """506 rows like MASS::Boston's export: 13 features, ``medv`` in [5, 50] (censored at 50 as
    the original), mean ≈ 22.5, sd ≈ 9, linear in a few features (R² ≈ 0.8) so a network can fit."""
    g = np.random.default_rng(506)
    n = 506
    x = g.normal(size=(n, 13)) * np.array([8, 23, 7, 0.25, 0.1, 0.7, 28, 2, 8.7, 168, 2.2, 91, 7]) + np.array(
        [3.6, 11, 11, 0.07, 0.55, 6.3, 68, 3.8, 9.5, 408, 18.5, 356, 12.7]
    )
    x[:, 3] = (x[:, 3] > 0.3).astype(float)  # chas is 0/1
    z = (x[:, 5] - 6.3) / 0.7 - (x[:, 12] - 12.7) / 7 - 0.4 * (x[:, 10] - 18.5) / 2.2
    medv = 22.5 + 9.0 * (z / z.std() * 0.9 + 0.45 * g.normal(size=n))
    medv = np.clip(medv, 5.0, 50.0)
    medv[np.argsort(z)[-16:]] = 50.0  # the original's 16 censored values
    medv[np.argsort(z)[:2]] = 5.0
    _write_csv(
        root / "uci" / "boston.csv",
        ["crim", "zn", "indus", "chas", "nox", "rm", "age", "dis", "rad", "tax", "ptratio", "black", "lstat", "medv"],
        np.column_stack([x, medv]),
    )


def _concrete_standin(root: Path) -> None:
    """1030 rows with modeldata::concrete's columns (8 mixture features, strength in MPa)."""
    g = np.random.default_rng(1030)
    n = 1030
    x = np.abs(
        g.normal(size=(n, 8)) * np.array([104, 86, 64, 21, 6, 78, 80, 63])
        + np.array([281, 74, 54, 182, 6, 973, 774, 46])
    )
    y = 0.1 * x[:, 0] + 0.07 * x[:, 1] - 0.2 * x[:, 3] + 0.1 * x[:, 7] + 30 + 5 * g.normal(size=n)
    _write_csv(
        root / "uci" / "concrete.csv",
        [
            "cement",
            "blast_furnace_slag",
            "fly_ash",
            "water",
            "superplasticizer",
            "coarse_aggregate",
            "fine_aggregate",
            "age",
            "compressive_strength",
        ],
        np.column_stack([x, np.clip(y, 2.3, 82.6)]),
    )


WRITERS = {
    "mnist": _idx_standin("mnist", 0),
    "fashion-mnist": _idx_standin("fashion-mnist", 1),
    "boston": _boston_standin,
    "concrete": _concrete_standin,
}


def found_files(name: str, root: Path | None = None) -> list[Path] | None:
    """The files of data set ``name`` where the experiments look (``default_data_dir()``, then
    the cache), one per needed file, or ``None`` when one is missing."""
    from structmc.data import files
    from structmc_papers._shared import default_data_dir

    root = default_data_dir() if root is None else root
    out = []
    for alternatives in _needs(name):
        path = next((p for p in (files.find(s, data_dir=root) for s in alternatives) if p is not None), None)
        if path is None:
            return None
        out.append(path)
    return out


@contextlib.contextmanager
def files_or_standins(tmp: Path, *names: str):
    """Yield ``{name: "files" | "stand-in"}``: the real files where the experiments find them,
    else stand-ins written under ``tmp`` with ``$STRUCTMC_DATA`` pointing there for the duration
    (the real files of the other sets are linked in beside them)."""
    found = {n: found_files(n) for n in names}
    if all(found.values()):
        yield dict.fromkeys(names, "files")
        return
    root = (tmp / "standin-data").resolve()
    for name, paths in found.items():
        if paths is None:
            WRITERS[name](root)
        else:
            for path, alternatives in zip(paths, _needs(name)):
                link = root / alternatives[0].folder / path.name
                link.parent.mkdir(parents=True, exist_ok=True)
                if not link.exists():
                    link.symlink_to(path)
    from structmc.data import files

    real_verify = files.verify_file

    def verify(path, spec, **kwargs):  # the stand-ins have no registered checksum; real files still do
        if Path(path).resolve().is_relative_to(root):
            return None
        return real_verify(path, spec, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STRUCTMC_DATA", str(root))
        mp.setattr(files, "verify_file", verify)
        yield {n: "files" if found[n] else "stand-in" for n in names}


@pytest.fixture(scope="module")
def uci_data(tmp_path_factory):
    """Boston and concrete: the files, or stand-ins (see :func:`files_or_standins`)."""
    with files_or_standins(tmp_path_factory.mktemp("uci"), "boston", "concrete") as which:
        yield which


@pytest.fixture
def mnist_data(tmp_path):
    with files_or_standins(tmp_path, "mnist") as which:
        yield which


@pytest.fixture
def fashion_mnist_data(tmp_path):
    with files_or_standins(tmp_path, "fashion-mnist") as which:
        yield which


@pytest.fixture
def mnist_and_fashion_data(tmp_path):
    """Both sets at once (one folder of files or stand-ins: the MNIST example with Fashion-MNIST
    as its out-of-distribution inputs)."""
    with files_or_standins(tmp_path, "mnist", "fashion-mnist") as which:
        yield which
