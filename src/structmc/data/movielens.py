"""MovieLens 100K ratings, for probabilistic matrix factorisation (the MAMBA paper).

Source: GroupLens ``ml-100k.zip`` (Harper & Konstan 2015); the ratings file ``u.data`` —
``user<TAB>item<TAB>rating<TAB>timestamp``, 100,000 ratings in 1..5 of 1,682 movies by 943
users — is read loose (a local copy) or straight from the archive.

Split: ``fold=None`` (default) shuffles all ratings with ``seed`` and keeps 80 % for
training, 20 % for test (the 80,000 / 20,000 sizes the MAMBA experiments use);
``fold=k`` (1..5) uses GroupLens' own ``u{k}.base`` / ``u{k}.test`` 80/20 cross-validation
files instead. ``val_size`` carves a validation part out of train.

Output: ``x`` int64 ``[n, 2]`` of zero-based (user, item) indices, ``y`` float ratings
(not centred: the model subtracts ``meta['mean_rating']``, the training mean, itself).
``meta`` has ``num_users`` and ``num_items``. :func:`rating_triples` gives the
``(user, item, rating)`` tensors that :class:`structmc.models.PMF` takes as a batch.
"""

from __future__ import annotations

import zipfile

import numpy as np
import torch
from torch import Tensor

from . import checksums
from .base import Dataset, carve_validation, permutation, split_sizes
from .files import DataError, FileSpec, Source

NUM_USERS, NUM_ITEMS = 943, 1682


def parse_ratings(text: str, where: str = "ratings") -> np.ndarray:
    """``[n, 4]`` int64 (user, item, rating, timestamp) from ``u.data``-style text."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    try:
        vals = np.array(" ".join(lines).split(), dtype=np.int64)
    except ValueError as err:
        raise DataError(f"{where}: non-integer field ({err})") from err
    if vals.size != 4 * len(lines):
        raise DataError(f"{where}: expected 4 fields on each of {len(lines)} lines (truncated or corrupted?)")
    arr = vals.reshape(-1, 4)
    if len(arr) == 0 or arr[:, :2].min() < 1 or arr[:, 2].min() < 1 or arr[:, 2].max() > 5:
        raise DataError(f"{where}: ids must be >= 1 and ratings in 1..5")
    return arr


def _member(src: Source, name: str) -> tuple[str, str]:
    """Text of ``ml-100k/<name>``: a loose local copy, else read from the (downloaded) archive."""
    spec = (
        checksums.MOVIELENS_RATINGS
        if name == "u.data"
        else FileSpec("movielens-100k", name, aliases=(f"ml-100k/{name}",))
    )
    path = src.find(spec)
    if path is not None:
        return path.read_text(encoding="latin-1"), str(path)
    archive = src.fetch(checksums.MOVIELENS_ARCHIVE)
    try:
        with zipfile.ZipFile(archive) as z:
            return z.read(f"ml-100k/{name}").decode("latin-1"), f"{archive}:ml-100k/{name}"
    except KeyError as err:
        raise DataError(f"{archive}: no member ml-100k/{name}") from err
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise DataError(f"{archive}: not a readable zip archive ({err})") from err


def rating_triples(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(users, items, ratings)`` from a MovieLens ``x [n, 2]``, ``y [n]``."""
    return x[:, 0].contiguous(), x[:, 1].contiguous(), y


def load_movielens_100k(
    *,
    data_dir=None,
    cache_dir=None,
    download: bool = True,
    verify: bool = True,
    test_fraction: float = 0.2,
    seed: int = 0,
    fold: int | None = None,
    val_size: int | float = 0,
    dtype=torch.float32,
) -> Dataset:
    """MovieLens 100K (see module docstring)."""
    src = Source(data_dir, cache_dir, download, verify)
    if fold is None:
        text, origin = _member(src, "u.data")
        arr = parse_ratings(text, origin)
        n_tr, n_te = split_sizes(len(arr), (1 - test_fraction, test_fraction))
        perm = permutation(len(arr), seed).numpy()
        tr, te = arr[np.sort(perm[:n_tr])], arr[np.sort(perm[n_tr:])]
        split = f"random {1 - test_fraction:.0%}/{test_fraction:.0%} (seed {seed})"
    else:
        if fold not in (1, 2, 3, 4, 5):
            raise ValueError(f"fold must be 1..5 or None, got {fold}")
        text, origin = _member(src, f"u{fold}.base")
        tr = parse_ratings(text, origin)
        text, origin_te = _member(src, f"u{fold}.test")
        te = parse_ratings(text, origin_te)
        origin = f"{origin}, {origin_te}"
        split = f"GroupLens fold u{fold}.base/u{fold}.test"
    num_users = max(NUM_USERS, int(max(tr[:, 0].max(), te[:, 0].max())))
    num_items = max(NUM_ITEMS, int(max(tr[:, 1].max(), te[:, 1].max())))

    def tensors(a):
        return torch.from_numpy(a[:, :2] - 1), torch.from_numpy(a[:, 2]).to(dtype)

    x_tr, y_tr = tensors(tr)
    x_te, y_te = tensors(te)
    x_tr, y_tr, x_va, y_va = carve_validation(x_tr, y_tr, val_size, seed)
    meta = {
        "source": origin,
        "split": split,
        "num_users": num_users,
        "num_items": num_items,
        "mean_rating": float(y_tr.double().mean()),
        "seed": seed,
    }
    return Dataset("movielens-100k", "ratings", x_tr, y_tr, x_te, y_te, x_va, y_va, meta=meta)
