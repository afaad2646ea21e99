"""UCI Adult census income, for Bayesian logistic regression (the pSGLD paper's a9a task).

Source: the original UCI files ``adult.data`` (32,561 rows, train) and ``adult.test``
(16,281 rows, test) — comma-separated, no header, 14 attributes and the income label. The
test file starts with an extra line (``|1x3 Cross validator``) and its labels end in ``.``
(``>50K.``); both quirks are handled. Split: the canonical train/test files; ``val_size``
(count or fraction) carves a random validation part out of train.

Preprocessing: the 6 numeric attributes (age, fnlwgt, education-num, capital-gain,
capital-loss, hours-per-week) standardised with training statistics; the 8 categorical ones
one-hot over the categories seen in ``adult.data`` (sorted). A missing value (``?``) is an
all-zero block, as in LIBSVM's a9a; a category absent from training is likewise all zero.
Label: 1 for ``>50K``. (a9a itself has 123 binary features from quantised numerics; this
encoding keeps the numerics continuous, giving 6 + 99 = 105 features.)
"""

from __future__ import annotations

import numpy as np
import torch

from . import checksums
from .base import Dataset, carve_validation, fit_standardizer
from .files import DataError, Source
from .tabular import decode

COLUMNS = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
)
NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")
CATEGORICAL = tuple(c for c in COLUMNS if c not in NUMERIC)


def read_adult(path) -> tuple[list[list[str]], np.ndarray]:
    """Attribute rows (strings) and 0/1 labels of ``adult.data`` or ``adult.test``."""
    rows, labels = [], []
    for lineno, line in enumerate(decode(path.read_bytes(), str(path)).splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("|"):  # blank lines and adult.test's "|1x3 Cross validator"
            continue
        fields = [f.strip() for f in s.split(",")]
        if len(fields) != 15:
            raise DataError(f"{path}: line {lineno} has {len(fields)} fields, expected 15 (truncated or corrupted?)")
        label = fields[14].rstrip(".")
        if label not in (">50K", "<=50K"):
            raise DataError(f"{path}: line {lineno}: unknown label {fields[14]!r}")
        rows.append(fields[:14])
        labels.append(label == ">50K")
    if not rows:
        raise DataError(f"{path}: no data rows")
    return rows, np.array(labels, dtype=np.float64)


def _encode(rows, vocab) -> np.ndarray:
    cols = list(zip(*rows))
    num = np.array([[float(v) for v in cols[COLUMNS.index(c)]] for c in NUMERIC]).T
    blocks = [num]
    for c in CATEGORICAL:
        index = {v: k for k, v in enumerate(vocab[c])}
        block = np.zeros((len(rows), len(vocab[c])))
        for i, v in enumerate(cols[COLUMNS.index(c)]):
            k = index.get(v)
            if k is not None:
                block[i, k] = 1.0
        blocks.append(block)
    return np.concatenate(blocks, axis=1)


def load_adult(
    *,
    data_dir=None,
    cache_dir=None,
    download: bool = True,
    verify: bool = True,
    val_size: int | float = 0,
    seed: int = 0,
    dtype=torch.float32,
) -> Dataset:
    """UCI Adult (see module docstring): ``x [N, 105]`` float, ``y [N]`` float 0/1."""
    src = Source(data_dir, cache_dir, download, verify)
    p_tr, p_te = src.fetch(checksums.ADULT["adult.data"]), src.fetch(checksums.ADULT["adult.test"])
    rows_tr, labels_tr = read_adult(p_tr)
    rows_te, labels_te = read_adult(p_te)
    vocab = {c: sorted({r[COLUMNS.index(c)] for r in rows_tr} - {"?"}) for c in CATEGORICAL}
    x_tr = torch.from_numpy(_encode(rows_tr, vocab)).to(dtype)
    x_te = torch.from_numpy(_encode(rows_te, vocab)).to(dtype)
    y_tr, y_te = torch.from_numpy(labels_tr).to(dtype), torch.from_numpy(labels_te).to(dtype)
    x_tr, y_tr, x_va, y_va = carve_validation(x_tr, y_tr, val_size, seed)
    k = len(NUMERIC)
    mean, std = fit_standardizer(x_tr[:, :k])
    for x in (x_tr, x_va, x_te):
        if x is not None:
            x[:, :k] = (x[:, :k] - mean) / std
    names = list(NUMERIC) + [f"{c}={v}" for c in CATEGORICAL for v in vocab[c]]
    meta = {
        "source": {"train": str(p_tr), "test": str(p_te)},
        "numeric_mean": mean.squeeze(0),
        "numeric_std": std.squeeze(0),
        "vocab": vocab,
        "seed": seed,
    }
    return Dataset("adult", "binary", x_tr, y_tr, x_te, y_te, x_va, y_va, num_classes=2, feature_names=names, meta=meta)
