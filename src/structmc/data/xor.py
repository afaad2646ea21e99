"""Noisy XOR, the blocked-Gibbs paper's toy classification set, and its simulator.

Published data (``data2`` of papamarkou/dmcl_examples): ``training/x.csv`` (5,000 points,
1,250 per corner), ``training/y.csv``, ``test/x.csv`` (1,200 points, 300 per corner),
``test/y.csv``; each CSV has a header row (``x1,x2`` / ``y``). No stable download address is
known, so the files are read from a local folder (``data_dir`` / ``STRUCTMC_DATA``, folder
``noisy-xor``) and checked against their SHA-256; :func:`simulate_noisy_xor` generates
fresh data from the same process.

Process: the four corners (0,0), (0,1), (1,0), (1,1) with labels 0, 1, 1, 0; each point is
the corner plus U[0,1] noise shifted by −0.55 for a 0 coordinate and by +0.55 − 1 for a 1
coordinate, i.e. coordinate c becomes ``u − 0.55`` (c = 0) or ``u + 0.55`` (c = 1), so the
classes occupy the four unit squares [−0.55, 0.45] and [0.55, 1.55]. Points come in corner
order, as in the published files. No preprocessing; ``y`` is float 0/1 (Bernoulli).
"""

from __future__ import annotations

import torch

from . import checksums
from .base import Dataset, carve_validation
from .files import DataError, Source
from .tabular import decode, read_delimited

CORNERS = ((0, 0), (0, 1), (1, 0), (1, 1))
LABELS = (0, 1, 1, 0)


def simulate_noisy_xor(
    n_per_corner: int = 1250, *, seed: int = 0, generator: torch.Generator | None = None, dtype=torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [4n, 2]``, ``y [4n]`` (float 0/1), corner by corner; randomness from ``generator``
    (or a new one seeded with ``seed``)."""
    g = generator if generator is not None else torch.Generator().manual_seed(int(seed))
    xs, ys = [], []
    for corner, label in zip(CORNERS, LABELS):
        c = torch.tensor(corner, dtype=torch.float64)
        u = torch.rand(n_per_corner, 2, generator=g, dtype=torch.float64)
        xs.append(u + 0.55 * (2 * c - 1))
        ys.append(torch.full((n_per_corner,), float(label), dtype=torch.float64))
    return torch.cat(xs).to(dtype), torch.cat(ys).to(dtype)


def noisy_xor_dataset(
    n_train_per_corner: int = 1250, n_test_per_corner: int = 300, *, seed: int = 0, dtype=torch.float32
) -> Dataset:
    """A simulated noisy XOR set with the published sizes (one generator for both parts)."""
    g = torch.Generator().manual_seed(int(seed))
    x_tr, y_tr = simulate_noisy_xor(n_train_per_corner, generator=g, dtype=dtype)
    x_te, y_te = simulate_noisy_xor(n_test_per_corner, generator=g, dtype=dtype)
    return Dataset(
        "noisy-xor-simulated",
        "binary",
        x_tr,
        y_tr,
        x_te,
        y_te,
        num_classes=2,
        feature_names=["x1", "x2"],
        meta={"seed": seed, "simulated": True},
    )


def _read_part(src: Source, part: str, dtype):
    tables = {}
    for v in ("x", "y"):
        spec = checksums.NOISY_XOR[f"{part}/{v}.csv"]
        path = src.find(spec)
        if path is None:
            raise DataError(
                f"noisy XOR file {spec.label} not found (data_dir=..., $STRUCTMC_DATA or the cache); "
                f"it has no download address — copy the published files there or use simulate_noisy_xor()"
            )
        head, rows = read_delimited(decode(path.read_bytes(), str(path)), sep=",", header=True, where=str(path))
        try:
            tables[v] = torch.tensor([[float(f) for f in r] for r in rows], dtype=torch.float64)
        except ValueError as err:
            raise DataError(f"{path}: non-numeric value ({err})") from err
    x, y = tables["x"], tables["y"].reshape(-1)
    if x.shape[1] != 2 or len(x) != len(y):
        raise DataError(f"noisy XOR {part}: x is {tuple(x.shape)} but y has {len(y)} rows")
    if not bool(((y == 0) | (y == 1)).all()):
        raise DataError(f"noisy XOR {part}: labels must be 0 or 1")
    return x.to(dtype), y.to(dtype)


def load_noisy_xor(
    *,
    data_dir=None,
    cache_dir=None,
    download: bool = False,
    verify: bool = True,
    val_size: int | float = 0,
    seed: int = 0,
    dtype=torch.float32,
) -> Dataset:
    """The published noisy XOR files (see module docstring); ``download`` is accepted for a
    uniform signature but there is nothing to download."""
    src = Source(data_dir, cache_dir, False, verify)
    x_tr, y_tr = _read_part(src, "training", dtype)
    x_te, y_te = _read_part(src, "test", dtype)
    x_tr, y_tr, x_va, y_va = carve_validation(x_tr, y_tr, val_size, seed)
    return Dataset(
        "noisy-xor",
        "binary",
        x_tr,
        y_tr,
        x_te,
        y_te,
        x_va,
        y_va,
        num_classes=2,
        feature_names=["x1", "x2"],
        meta={"seed": seed, "simulated": False},
    )
