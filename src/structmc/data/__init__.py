"""Data sets of the four papers, loaded from their canonical public files.

Every loader returns a :class:`Dataset` (``x_train``, ``y_train``, ``x_val``, ``y_val``,
``x_test``, ``y_test``, ``meta``) and takes the same file options:

* ``data_dir`` — a local folder holding the files (as ``<data_dir>/<set>/<file>``, e.g. the
  project's ``shared/data``); default: ``$STRUCTMC_DATA`` when set;
* ``cache_dir`` — where downloads go; default ``$STRUCTMC_CACHE`` or ``~/.cache/structmc``;
* ``download`` — fetch missing files from their canonical addresses (checksummed);
* ``verify`` — check files against the checksum registry (:mod:`structmc.data.checksums`).

Nothing is read or downloaded at import. See :mod:`structmc.data.files` for the search
order and the checksum rules, and each module's docstring for the split and preprocessing.

==================  =========================================================
``mnist``           :func:`load_mnist`
``fashion-mnist``   :func:`load_fashion_mnist`
``cifar10``         :func:`load_cifar10`
``svhn``            :func:`load_svhn` (needs scipy)
MNIST-shaped        :func:`load_image_subset` (subsets, never downloads; ``data="auto"`` falls back
                    to :func:`synthetic_images`, a seeded stand-in), :class:`ImageData`
UCI regression      :func:`load_uci` (``boston``, ``concrete``, ``wine-red``, ``wine-white``,
                    ``airfoil``, ``energy``, ``yacht``, ``seoul-bike``, ``obesity``)
``adult``           :func:`load_adult`
``australian``      :func:`load_australian` (Statlog; pSGLD's Fig. 2)
``movielens-100k``  :func:`load_movielens_100k`
``noisy-xor``       :func:`load_noisy_xor`, :func:`simulate_noisy_xor`
synthetic           :func:`linear_regression_data`, :func:`logistic_regression_data`,
                    :class:`GaussianTarget`
==================  =========================================================

:data:`DATASETS` is the one registry of named data sets (a :class:`~structmc.registry.Registry`
of :class:`DatasetSpec`: loader, task, source, description). It knows the papers' sets above
(source ``"files"``), the small scikit-learn sets of :mod:`structmc.data.sklearn_sets` (``diabetes``,
``breast_cancer``, ``digits``, ``wine``, ``iris``; source ``"scikit-learn"``, options ``seed``
and ``test_fraction``) and the seeded simulations (``linear-regression``,
``logistic-regression``, ``noisy-xor-simulated``; source ``"synthetic"``). :func:`load` and
``structmc sample --dataset`` look names up there; ``DATASETS.register(name, DatasetSpec(...))``
adds one. ``wine`` is scikit-learn's wine classification set; the UCI wine-quality sets are
``wine-red`` and ``wine-white``.
"""

from __future__ import annotations

from .adult import load_adult
from .australian import load_australian
from .base import Dataset
from .files import (
    ChecksumError,
    DataError,
    DataNotFoundError,
    Digest,
    DownloadError,
    FileSpec,
    default_cache_dir,
    fetch,
)
from .image_sets import ImageData, load_image_subset, synthetic_images
from .images import load_cifar10, load_fashion_mnist, load_mnist, load_svhn
from .movielens import load_movielens_100k, rating_triples
from .named_sets import DATASETS, SOURCES, DatasetSpec, load
from .synthetic import (
    GaussianTarget,
    correlated_gaussian,
    gaussian_target,
    linear_regression_data,
    logistic_regression_data,
    psgld_gaussian,
    random_gaussian,
)
from .uci import (
    UCI_REGRESSION,
    load_airfoil,
    load_boston,
    load_concrete,
    load_energy,
    load_obesity,
    load_seoul_bike,
    load_uci,
    load_wine_quality,
    load_yacht,
)
from .xor import load_noisy_xor, noisy_xor_dataset, simulate_noisy_xor

LOADERS = {
    "mnist": load_mnist,
    "fashion-mnist": load_fashion_mnist,
    "cifar10": load_cifar10,
    "svhn": load_svhn,
    "adult": load_adult,
    "australian": load_australian,
    "movielens-100k": load_movielens_100k,
    "noisy-xor": load_noisy_xor,
}

__all__ = [
    "Dataset",
    "DatasetSpec",
    "DATASETS",
    "SOURCES",
    "load",
    "LOADERS",
    "DataError",
    "ChecksumError",
    "DownloadError",
    "DataNotFoundError",
    "Digest",
    "FileSpec",
    "fetch",
    "default_cache_dir",
    "load_mnist",
    "load_fashion_mnist",
    "load_cifar10",
    "load_svhn",
    "load_image_subset",
    "ImageData",
    "synthetic_images",
    "load_adult",
    "load_australian",
    "load_movielens_100k",
    "rating_triples",
    "load_noisy_xor",
    "simulate_noisy_xor",
    "noisy_xor_dataset",
    "load_uci",
    "UCI_REGRESSION",
    "load_boston",
    "load_concrete",
    "load_wine_quality",
    "load_airfoil",
    "load_energy",
    "load_yacht",
    "load_seoul_bike",
    "load_obesity",
    "linear_regression_data",
    "logistic_regression_data",
    "GaussianTarget",
    "gaussian_target",
    "psgld_gaussian",
    "correlated_gaussian",
    "random_gaussian",
]
