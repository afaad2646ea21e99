"""Small data sets that ship with scikit-learn, for the demo and ``structmc sample``.

No download is involved. Features are standardised with statistics of the training part
only; regression targets too (so a unit-scale prior and noise make sense). Splits are
random with a fixed seed. The real benchmark loaders (MNIST, UCI, ...) are the other modules
of ``structmc.data``, whose registry ``structmc.data.DATASETS`` lists these sets too (source
``"scikit-learn"``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

DATASETS = {
    "diabetes": ("load_diabetes", "regression"),
    "breast_cancer": ("load_breast_cancer", "binary"),
    "digits": ("load_digits", "multiclass"),
    "wine": ("load_wine", "multiclass"),
    "iris": ("load_iris", "multiclass"),
}
DESCRIPTIONS = {
    "diabetes": "scikit-learn diabetes progression, 442 x 10, regression",
    "breast_cancer": "scikit-learn Wisconsin breast cancer, 569 x 30, binary",
    "digits": "scikit-learn 8 x 8 digits, 1797 x 64, 10 classes",
    "wine": "scikit-learn wine cultivars, 178 x 13, 3 classes",
    "iris": "scikit-learn iris, 150 x 4, 3 classes",
}


@dataclass
class Split:
    name: str
    task: str  # "regression" | "binary" | "multiclass"
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    num_classes: int | None = None
    y_scale: float = 1.0  # regression: standard deviation the targets were divided by

    @property
    def num_features(self) -> int:
        return self.x_train.shape[1]


def load_builtin(name: str, *, test_fraction: float = 0.2, seed: int = 0, dtype=torch.float32) -> Split:
    if name not in DATASETS:
        raise ValueError(f"unknown built-in data set {name!r}; choose from {sorted(DATASETS)}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    try:
        import sklearn.datasets as skd
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("built-in data sets need scikit-learn: pip install 'structmc[demo]'") from err
    loader, task = DATASETS[name]
    X, y = getattr(skd, loader)(return_X_y=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(X))
    n_test = max(1, int(round(test_fraction * len(X))))
    test, train = order[:n_test], order[n_test:]
    mu, sd = X[train].mean(0), X[train].std(0)
    sd[sd == 0] = 1.0
    X = (X - mu) / sd
    y_scale, num_classes = 1.0, None
    if task == "regression":
        y_mu, y_scale = y[train].mean(), float(y[train].std())
        y = (y - y_mu) / y_scale
        ty = lambda a: torch.as_tensor(a, dtype=dtype)
    else:
        num_classes = int(y.max()) + 1
        ty = (
            (lambda a: torch.as_tensor(a, dtype=dtype))
            if task == "binary"
            else (lambda a: torch.as_tensor(a, dtype=torch.long))
        )
    tx = lambda a: torch.as_tensor(a, dtype=dtype)
    return Split(name, task, tx(X[train]), ty(y[train]), tx(X[test]), ty(y[test]), num_classes, y_scale)
