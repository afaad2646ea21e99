"""The catalogue of named data sets: :data:`DATASETS` and :func:`load` (see :mod:`structmc.data`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..registry import Registry
from .adult import load_adult
from .australian import load_australian
from .images import load_cifar10, load_fashion_mnist, load_mnist, load_svhn
from .movielens import load_movielens_100k
from .synthetic import linear_regression_data, logistic_regression_data
from .uci import UCI_REGRESSION, load_uci
from .xor import load_noisy_xor, noisy_xor_dataset

SOURCES = {
    "files": "the canonical public files (data_dir=, $STRUCTMC_DATA, the cache, or a checksummed download)",
    "scikit-learn": "ships with scikit-learn, no download (structmc.data.sklearn_sets; seed=, test_fraction=)",
    "synthetic": "simulated with a seeded generator (seed=)",
}


@dataclass(frozen=True)
class DatasetSpec:
    """A named data set: ``load(**options) -> Dataset`` (or a :class:`structmc.data.sklearn_sets.Split`
    for scikit-learn sets, with the same fields), its ``task`` (``"regression"``,
    ``"binary"``, ``"multiclass"``, ``"ratings"``), its ``source`` (a key of :data:`SOURCES`)
    and a one-line description."""

    load: Callable[..., Any]
    task: str
    source: str
    description: str = ""


def _check_spec(name: str, entry):
    if not isinstance(entry, DatasetSpec):
        raise TypeError(f"data set {name!r} must be a structmc.data.DatasetSpec, got {type(entry).__name__}")
    return entry


def _sklearn(name: str, **kwargs):
    from .sklearn_sets import load_builtin

    return load_builtin(name, **kwargs)


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-")


def _registry() -> Registry:
    from .sklearn_sets import DATASETS as SKLEARN
    from .sklearn_sets import DESCRIPTIONS
    from .uci import ALIASES as UCI_ALIASES

    uci_about = {
        "boston": "Boston housing (506 x 13, target medv)",
        "concrete": "concrete compressive strength (1030 x 8)",
        "wine-red": "red wine quality (1599 x 11)",
        "wine-white": "white wine quality (4898 x 11)",
        "airfoil": "airfoil self-noise (1503 x 5)",
        "energy": "energy efficiency, heating load (768 x 8)",
        "yacht": "yacht hydrodynamics (308 x 6)",
        "seoul-bike": "Seoul bike sharing demand (8760 rows)",
        "obesity": "obesity levels as an ordinal target (2111 rows)",
    }
    files = {
        "mnist": DatasetSpec(load_mnist, "multiclass", "files", "MNIST digits, 60k / 10k, 1 x 28 x 28"),
        "fashion-mnist": DatasetSpec(
            load_fashion_mnist, "multiclass", "files", "Fashion-MNIST, 60k / 10k, 1 x 28 x 28"
        ),
        "cifar10": DatasetSpec(load_cifar10, "multiclass", "files", "CIFAR-10, 50k / 10k, 3 x 32 x 32"),
        "svhn": DatasetSpec(load_svhn, "multiclass", "files", "SVHN cropped digits, 3 x 32 x 32 (needs scipy)"),
        "adult": DatasetSpec(load_adult, "binary", "files", "UCI Adult census income, 105 features (pSGLD's a9a task)"),
        "australian": DatasetSpec(
            load_australian, "binary", "files", "Statlog Australian credit, 690 x 14 (pSGLD's Fig. 2 BLR)"
        ),
        "movielens-100k": DatasetSpec(load_movielens_100k, "ratings", "files", "MovieLens 100K ratings (MAMBA PMF)"),
        "noisy-xor": DatasetSpec(load_noisy_xor, "binary", "files", "the blocked-Gibbs paper's published noisy XOR"),
    }
    for key in UCI_REGRESSION:
        files[key] = DatasetSpec(
            functools.partial(load_uci, key), "regression", "files", f"UCI regression: {uci_about.get(key, key)}"
        )
    sklearn = {
        name: DatasetSpec(functools.partial(_sklearn, name), task, "scikit-learn", DESCRIPTIONS.get(name, ""))
        for name, (_, task) in SKLEARN.items()
    }
    synthetic = {
        "linear-regression": DatasetSpec(
            linear_regression_data, "regression", "synthetic", "structured-SGMCMC 3-coefficient regression, 100 points"
        ),
        "logistic-regression": DatasetSpec(
            logistic_regression_data,
            "binary",
            "synthetic",
            "MAMBA simulated logistic regression, d = 10 (10^6 rows by default)",
        ),
        "noisy-xor-simulated": DatasetSpec(
            noisy_xor_dataset, "binary", "synthetic", "a simulated noisy XOR with the blocked-Gibbs paper's sizes"
        ),
    }
    aliases = {
        "fmnist": "fashion-mnist",
        "cifar-10": "cifar10",
        "movielens": "movielens-100k",
        "ml-100k": "movielens-100k",
        "xor": "noisy-xor",
        "breast-cancer": "breast_cancer",
    }
    # UCI spellings ("housing", "bike", ...), except "wine": that name is scikit-learn's wine set
    aliases.update({a: k for a, k in UCI_ALIASES.items() if a not in sklearn})
    return Registry(
        "data set", {**files, **sklearn, **synthetic}, aliases=aliases, normalize=_normalize, validate=_check_spec
    )


DATASETS: Registry[DatasetSpec] = _registry()


def load(name: str, **kwargs):
    """Load a data set of :data:`DATASETS` by name (``mnist``, ``fashion-mnist``, ``cifar10``,
    ``svhn``, ``adult``, ``movielens-100k``, ``noisy-xor``, a UCI regression name, a
    scikit-learn set or a synthetic one), passing ``kwargs`` (its loader's options) on.
    Names are case-insensitive and ``_`` / ``-`` are interchangeable."""
    return DATASETS.get(name).load(**kwargs)
