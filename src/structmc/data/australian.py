"""Statlog (Australian credit approval), the small Bayesian logistic regression set of
Girolami & Calderhead (2011) that the pSGLD paper uses for its Fig. 2 (N = 690, D = 14).

Source: UCI's ``statlog/australian/australian.dat`` — 690 whitespace-separated rows of 14
attributes (already anonymised and numerically coded by Statlog: A1, A4–A6, A8, A9, A11, A12
categorical codes, the rest continuous) and a 0/1 class label (307 of class 1, 383 of class
0). UCI publishes no checksum; :data:`structmc.data.checksums.AUSTRALIAN` pins the rows with
a digest over the whitespace-normalised text (see its comment).

Preprocessing (Girolami & Calderhead 2011, §7): every attribute standardised to zero mean
and unit standard deviation over the 690 rows (``standardize=False`` keeps the raw codes,
whose scales span 1 to 10⁵). No test split: the data set is used whole, as a posterior to
sample (``val_size``/``test_size`` carve random parts out when asked for).
"""

from __future__ import annotations

import numpy as np
import torch

from . import checksums
from .base import Dataset, carve_validation, fit_standardizer
from .files import DataError, Source
from .tabular import decode

NUM_ROWS = 690
NUM_ATTRIBUTES = 14
CLASS_COUNTS = {0: 383, 1: 307}  # UCI's australian.doc


def read_australian(path) -> tuple[np.ndarray, np.ndarray]:
    """``(x [690, 14], y [690])`` float64 from ``australian.dat``; the shape and the labels
    are checked (a truncated or different file raises :class:`DataError`)."""
    rows = []
    for lineno, line in enumerate(decode(path.read_bytes(), str(path)).splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != NUM_ATTRIBUTES + 1:
            raise DataError(f"{path}: line {lineno} has {len(fields)} fields, expected {NUM_ATTRIBUTES + 1}")
        try:
            rows.append([float(f) for f in fields])
        except ValueError as err:
            raise DataError(f"{path}: line {lineno}: {err}") from err
    if not rows:
        raise DataError(f"{path}: no data rows")
    table = np.array(rows)
    y = table[:, -1]
    if not np.isin(y, (0.0, 1.0)).all():
        raise DataError(f"{path}: labels must be 0 or 1, found {sorted(set(y.tolist()))[:5]}")
    return table[:, :-1], y


def load_australian(
    *,
    data_dir=None,
    cache_dir=None,
    download: bool = True,
    verify: bool = True,
    standardize: bool = True,
    val_size: int | float = 0,
    seed: int = 0,
    dtype=torch.float32,
) -> Dataset:
    """Statlog Australian (see the module docstring): ``x [690, 14]``, ``y [690]`` 0/1."""
    src = Source(data_dir, cache_dir, download, verify)
    path = src.fetch(checksums.AUSTRALIAN)
    x_np, y_np = read_australian(path)
    x, y = torch.from_numpy(x_np).to(dtype), torch.from_numpy(y_np).to(dtype)
    meta: dict = {"source": str(path), "standardized": bool(standardize)}
    if standardize:
        mean, std = fit_standardizer(x)
        x = (x - mean) / std
        meta.update(mean=mean.squeeze(0), std=std.squeeze(0))
    x, y, x_va, y_va = carve_validation(x, y, val_size, seed)
    return Dataset(
        "australian",
        "binary",
        x,
        y,
        x_val=x_va,
        y_val=y_va,
        num_classes=2,
        feature_names=[f"A{k}" for k in range(1, NUM_ATTRIBUTES + 1)],
        meta=meta,
    )


__all__ = ["load_australian", "read_australian", "NUM_ROWS", "NUM_ATTRIBUTES", "CLASS_COUNTS"]
