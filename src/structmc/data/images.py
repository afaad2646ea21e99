"""Image classification sets: MNIST, Fashion-MNIST, CIFAR-10, SVHN.

Sources and formats (canonical files; checksums in :mod:`structmc.data.checksums`):

* MNIST (LeCun & Cortes) and Fashion-MNIST (Xiao et al. 2017): IDX files, gzip-compressed,
  ``{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz``; the original 60,000 / 10,000
  train/test split, 28×28 grey images.
* CIFAR-10 (Krizhevsky 2009): ``cifar-10-python.tar.gz`` holding the python pickle batches
  ``data_batch_1..5`` (train, 50,000) and ``test_batch`` (10,000), 32×32 RGB. Already
  extracted batches in ``cifar-10-batches-py/`` are read too. Unpickling is restricted to the
  few numpy globals the format needs, so a tampered batch cannot run code.
* SVHN (Netzer et al. 2011), cropped digits: ``train_32x32.mat`` (73,257), ``test_32x32.mat``
  (26,032), optional ``extra_32x32.mat``; label 10 stands for digit 0 and becomes 0.
  Reading ``.mat`` needs scipy (an optional dependency).

Output: ``x`` float tensors ``[N, C, H, W]`` (``flatten=True``: ``[N, C·H·W]``), ``y`` int64
class indices. Preprocessing (``normalize``), statistics fitted on the training part only:
``"unit"`` x/255 ∈ [0, 1] (default); ``"symmetric"`` (x/255 − 0.5)/0.5 ∈ [−1, 1] (the
structured-SGMCMC ResNet code); ``"global"`` one pixel mean/std over all training pixels
(the blocked-Gibbs code); ``"channel"`` per-channel mean/std; ``"pixel"`` per-pixel
mean/std; ``"none"`` raw 0–255. ``val_size`` (count or fraction) carves a random
validation part out of the training set with ``seed``; the test set is never touched.
"""

from __future__ import annotations

import functools
import io
import pickle
import struct
import tarfile
import zlib
from pathlib import Path

import numpy as np
import torch

from . import checksums
from .base import Dataset, carve_validation
from .files import DataError, Source, read_bytes

NORMALIZATIONS = ("unit", "symmetric", "global", "channel", "pixel", "none")


# ---------------------------------------------------------------------------------------
# IDX
# ---------------------------------------------------------------------------------------
def parse_idx(data: bytes, ndim: int | None = None, where: str = "IDX data") -> np.ndarray:
    """Parse an uncompressed IDX blob of unsigned bytes; the size must match the header."""
    if len(data) < 4 or data[:2] != b"\x00\x00":
        raise DataError(f"{where}: not an IDX file (bad magic number)")
    if data[2] != 0x08:
        raise DataError(f"{where}: IDX element type 0x{data[2]:02x} is not unsigned byte")
    nd = data[3]
    if ndim is not None and nd != ndim:
        raise DataError(f"{where}: IDX file has {nd} dimensions, expected {ndim}")
    header = 4 + 4 * nd
    if len(data) < header:
        raise DataError(f"{where}: truncated IDX header")
    dims = struct.unpack(">" + "I" * nd, data[4:header])
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(data) != expected:
        raise DataError(
            f"{where}: {len(data)} bytes but the IDX header {dims} needs {expected} (truncated or corrupted)"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


@functools.lru_cache(maxsize=8)
def _read_idx_cached(path: str, size: int, mtime_ns: int, ndim: int | None) -> np.ndarray:
    # keyed by size and mtime so that a replaced file is re-read; parsed arrays are read-only
    arr = parse_idx(read_bytes(Path(path)), ndim, path)
    arr.setflags(write=False)
    return arr


def read_idx(path, ndim: int | None = None) -> np.ndarray:
    """Read a (gzip-compressed or plain) IDX file, cached in memory for this process."""
    path = Path(path)
    st = path.stat()
    return _read_idx_cached(str(path.resolve()), st.st_size, st.st_mtime_ns, ndim)


# ---------------------------------------------------------------------------------------
# Shared post-processing
# ---------------------------------------------------------------------------------------
def _to_float(x: np.ndarray, dtype, scale: float) -> torch.Tensor:
    # one conversion and an in-place scale: these arrays are ~200 MB for MNIST-sized sets
    try:
        np_dtype = torch.empty((), dtype=dtype).numpy().dtype
    except TypeError:  # a dtype numpy lacks (bfloat16): convert through float32
        np_dtype = np.dtype(np.float32)
    t = torch.from_numpy(x.astype(np_dtype)).to(dtype)
    return t.mul_(scale) if scale != 1.0 else t


def _normalize(x_tr, x_va, x_te, how: str, dtype):
    """uint8 images [N, C, H, W] (numpy) -> float tensors, statistics from the training part only."""
    if how not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {how!r}")
    if how in ("global", "channel"):
        # exact statistics of uint8 data from a 256-bin histogram: far cheaper than a float pass
        chans = [x_tr.reshape(-1)] if how == "global" else [x_tr[:, c].reshape(-1) for c in range(x_tr.shape[1])]
        levels = np.arange(256, dtype=np.float64) / 255.0
        m, s = [], []
        for ch in chans:
            h = np.bincount(ch, minlength=256).astype(np.float64)
            mu = (h * levels).sum() / h.sum()
            m.append(mu)
            s.append(np.sqrt((h * (levels - mu) ** 2).sum() / h.sum()))
        shape = (1, -1, 1, 1)
        mean = torch.tensor(m, dtype=dtype).reshape(shape)
        std = torch.tensor(s, dtype=dtype).reshape(shape).clamp_min(1e-12)
    scale = 1.0 if how == "none" else 1.0 / 255.0
    x_tr, x_va, x_te = (None if x is None else _to_float(x, dtype, scale) for x in (x_tr, x_va, x_te))
    if how in ("none", "unit"):
        return x_tr, x_va, x_te, {}
    if how == "symmetric":
        mean, std = torch.tensor(0.5, dtype=dtype), torch.tensor(0.5, dtype=dtype)
    elif how == "pixel":
        std, mean = torch.std_mean(x_tr, dim=0, keepdim=True, correction=0)
        std = torch.where(std > 1e-12, std, torch.ones_like(std))  # constant pixels (MNIST borders) stay 0
    for x in (x_tr, x_va, x_te):
        if x is not None:
            x.sub_(mean).div_(std)
    return x_tr, x_va, x_te, {"mean": mean.squeeze(), "std": std.squeeze()}


def _image_dataset(name, x_tr, y_tr, x_te, y_te, *, normalize, val_size, seed, flatten, dtype, meta) -> Dataset:
    """uint8 numpy images [N, C, H, W] and labels -> a normalised :class:`Dataset`."""
    y_tr = torch.from_numpy(np.asarray(y_tr).astype(np.int64))
    y_te = torch.from_numpy(np.asarray(y_te).astype(np.int64))
    idx = torch.arange(len(y_tr))
    idx_tr, _, idx_va, _ = carve_validation(idx, idx, val_size, seed)  # split the uint8 data: cheaper
    x_va = None
    if idx_va is not None:
        x_va, y_va = x_tr[idx_va.numpy()], y_tr[idx_va]
        x_tr, y_tr = x_tr[idx_tr.numpy()], y_tr[idx_tr]
    else:
        y_va = None
    x_tr, x_va, x_te, stats = _normalize(x_tr, x_va, x_te, normalize, dtype)
    if flatten:
        x_tr, x_va, x_te = (None if x is None else x.reshape(len(x), -1) for x in (x_tr, x_va, x_te))
    meta = {
        **meta,
        "normalize": normalize,
        "normalize_stats": stats,
        "val_size": 0 if y_va is None else len(y_va),
        "seed": seed,
    }
    return Dataset(name, "multiclass", x_tr, y_tr, x_te, y_te, x_va, y_va, num_classes=10, meta=meta)


# ---------------------------------------------------------------------------------------
# MNIST / Fashion-MNIST
# ---------------------------------------------------------------------------------------
def _load_idx_set(name, specs, *, data_dir, cache_dir, download, verify, normalize, val_size, seed, flatten, dtype):
    src = Source(data_dir, cache_dir, download, verify)
    paths = {stem: src.fetch(spec) for stem, spec in specs.items()}
    x_tr = read_idx(paths["train-images-idx3-ubyte"], 3)
    y_tr = read_idx(paths["train-labels-idx1-ubyte"], 1)
    x_te = read_idx(paths["t10k-images-idx3-ubyte"], 3)
    y_te = read_idx(paths["t10k-labels-idx1-ubyte"], 1)
    for xs, ys, part in ((x_tr, y_tr, "train"), (x_te, y_te, "test")):
        if len(xs) != len(ys):
            raise DataError(f"{name} {part}: {len(xs)} images but {len(ys)} labels")
        if ys.size and int(ys.max()) > 9:
            raise DataError(f"{name} {part}: label {int(ys.max())} out of range 0..9")
    meta = {"source": {k: str(p) for k, p in paths.items()}, "split": "original 60k/10k"}
    return _image_dataset(
        name,
        x_tr[:, None],
        y_tr,
        x_te[:, None],
        y_te,
        normalize=normalize,
        val_size=val_size,
        seed=seed,
        flatten=flatten,
        dtype=dtype,
        meta=meta,
    )


def load_mnist(
    *,
    data_dir=None,
    cache_dir=None,
    download: bool = True,
    verify: bool = True,
    normalize: str = "unit",
    val_size: int | float = 0,
    seed: int = 0,
    flatten: bool = False,
    dtype=torch.float32,
) -> Dataset:
    """MNIST, original 60k/10k split; images ``[N, 1, 28, 28]`` (see module docstring)."""
    return _load_idx_set(
        "mnist",
        checksums.MNIST,
        data_dir=data_dir,
        cache_dir=cache_dir,
        download=download,
        verify=verify,
        normalize=normalize,
        val_size=val_size,
        seed=seed,
        flatten=flatten,
        dtype=dtype,
    )


def load_fashion_mnist(
    *,
    data_dir=None,
    cache_dir=None,
    download: bool = True,
    verify: bool = True,
    normalize: str = "unit",
    val_size: int | float = 0,
    seed: int = 0,
    flatten: bool = False,
    dtype=torch.float32,
) -> Dataset:
    """Fashion-MNIST, original 60k/10k split; images ``[N, 1, 28, 28]``."""
    return _load_idx_set(
        "fashion-mnist",
        checksums.FASHION_MNIST,
        data_dir=data_dir,
        cache_dir=cache_dir,
        download=download,
        verify=verify,
        normalize=normalize,
        val_size=val_size,
        seed=seed,
        flatten=flatten,
        dtype=dtype,
    )


# ---------------------------------------------------------------------------------------
# CIFAR-10
# ---------------------------------------------------------------------------------------
def _np_reconstruct():
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct
    return _reconstruct


class _BatchUnpickler(pickle.Unpickler):
    """Unpickler for CIFAR batches: only the globals that pickled numpy arrays use."""

    def find_class(self, module, name):
        import codecs

        if name == "_reconstruct" and module in ("numpy.core.multiarray", "numpy._core.multiarray"):
            return _np_reconstruct()
        if module == "numpy" and name in ("ndarray", "dtype"):
            return getattr(np, name)
        if (module, name) == ("_codecs", "encode"):  # protocol-2 pickles of bytes
            return codecs.encode
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name} from a CIFAR batch")


def _get(d: dict, key: str):
    for k in (key, key.encode()):
        if k in d:
            return d[k]
    raise KeyError(key)


def parse_cifar_batch(blob: bytes, where: str = "CIFAR batch") -> tuple[np.ndarray, np.ndarray]:
    """One python-pickle batch -> uint8 images ``[n, 3, 32, 32]`` and int64 labels."""
    try:
        d = _BatchUnpickler(io.BytesIO(blob), encoding="latin1").load()
        data = np.asarray(_get(d, "data"), dtype=np.uint8)
        labels = np.asarray(_get(d, "labels"), dtype=np.int64)
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError, AttributeError) as err:
        raise DataError(f"{where}: not a readable CIFAR-10 python batch ({type(err).__name__}: {err})") from err
    if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
        raise DataError(f"{where}: expected data [n, 3072] and n labels, got {data.shape} and {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise DataError(f"{where}: labels outside 0..9")
    return data.reshape(-1, 3, 32, 32), labels


def _cifar_blobs(src: Source) -> tuple[dict[str, bytes], str]:
    """Batch name -> pickle bytes, from extracted batches or from the archive."""
    names = list(checksums.CIFAR10_BATCHES)
    found = {n: src.find(spec) for n, spec in checksums.CIFAR10_BATCHES.items()}
    paths = {n: p for n, p in found.items() if p is not None}
    if len(paths) == len(found):
        return {n: p.read_bytes() for n, p in paths.items()}, str(paths[names[0]].parent)
    archive = src.fetch(checksums.CIFAR10_ARCHIVE)
    blobs: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                base = member.name.rsplit("/", 1)[-1]
                if member.isfile() and base in names and member.name.startswith(checksums.CIFAR10_DIR):
                    f = tar.extractfile(member)
                    assert f is not None  # member.isfile(): a regular file has contents
                    blobs[base] = f.read()
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise DataError(f"{archive}: truncated or corrupted archive ({type(err).__name__}: {err})") from err
    missing = [n for n in names if n not in blobs]
    if missing:
        raise DataError(f"{archive}: batches {missing} missing from the archive")
    return blobs, str(archive)


def load_cifar10(
    *,
    data_dir=None,
    cache_dir=None,
    download: bool = True,
    verify: bool = True,
    normalize: str = "unit",
    val_size: int | float = 0,
    seed: int = 0,
    flatten: bool = False,
    dtype=torch.float32,
) -> Dataset:
    """CIFAR-10, the canonical 50k/10k split; images ``[N, 3, 32, 32]``. No augmentation
    here (the structured-SGMCMC paper's CIFAR augmentation belongs to the training loop)."""
    src = Source(data_dir, cache_dir, download, verify)
    blobs, origin = _cifar_blobs(src)
    parts = {n: parse_cifar_batch(b, f"{origin}:{n}") for n, b in blobs.items()}
    train = [parts[f"data_batch_{i}"] for i in range(1, 6)]
    x_tr = np.concatenate([p[0] for p in train])
    y_tr = np.concatenate([p[1] for p in train])
    x_te, y_te = parts["test_batch"]
    meta = {
        "source": origin,
        "split": "original 50k/10k",
        "classes": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"],
    }
    return _image_dataset(
        "cifar10",
        x_tr,
        y_tr,
        x_te,
        y_te,
        normalize=normalize,
        val_size=val_size,
        seed=seed,
        flatten=flatten,
        dtype=dtype,
        meta=meta,
    )


# ---------------------------------------------------------------------------------------
# SVHN
# ---------------------------------------------------------------------------------------
def read_svhn_mat(path) -> tuple[np.ndarray, np.ndarray]:
    """A cropped-digits ``.mat`` file -> uint8 images ``[n, 3, 32, 32]``, labels 0..9."""
    try:
        import scipy.io
    except ImportError as err:  # optional dependency
        raise ImportError("reading SVHN .mat files needs scipy: pip install scipy") from err
    try:
        mat = scipy.io.loadmat(str(path))
        X, y = mat["X"], mat["y"]
    except Exception as err:  # scipy raises several types for damaged files
        raise DataError(f"{path}: not a readable SVHN .mat file ({type(err).__name__}: {err})") from err
    if X.ndim != 4 or X.shape[:3] != (32, 32, 3) or y.size != X.shape[3]:
        raise DataError(f"{path}: expected X [32, 32, 3, n] and n labels, got {X.shape} and {y.shape}")
    labels = y.reshape(-1).astype(np.int64) % 10  # the format stores digit 0 as label 10
    return np.ascontiguousarray(X.transpose(3, 2, 0, 1), dtype=np.uint8), labels


def load_svhn(
    *,
    data_dir=None,
    cache_dir=None,
    download: bool = True,
    verify: bool = True,
    normalize: str = "unit",
    val_size: int | float = 0,
    seed: int = 0,
    flatten: bool = False,
    include_extra: bool = False,
    dtype=torch.float32,
) -> Dataset:
    """SVHN cropped digits, canonical train/test split (``include_extra`` appends the 531k
    ``extra`` images to train); images ``[N, 3, 32, 32]``, labels 0..9."""
    src = Source(data_dir, cache_dir, download, verify)
    splits = ["train", "test"] + (["extra"] if include_extra else [])
    paths = {s: src.fetch(checksums.SVHN[s]) for s in splits}
    x_tr, y_tr = read_svhn_mat(paths["train"])
    x_te, y_te = read_svhn_mat(paths["test"])
    if include_extra:
        x_ex, y_ex = read_svhn_mat(paths["extra"])
        x_tr, y_tr = np.concatenate([x_tr, x_ex]), np.concatenate([y_tr, y_ex])
    meta = {
        "source": {k: str(p) for k, p in paths.items()},
        "split": "original train/test" + (" (+extra in train)" if include_extra else ""),
    }
    return _image_dataset(
        "svhn",
        x_tr,
        y_tr,
        x_te,
        y_te,
        normalize=normalize,
        val_size=val_size,
        seed=seed,
        flatten=flatten,
        dtype=dtype,
        meta=meta,
    )


# ---------------------------------------------------------------------------------------
# MNIST-shaped subsets with a synthetic stand-in (the experiments' image loader)
# ---------------------------------------------------------------------------------------
