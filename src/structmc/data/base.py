"""The :class:`Dataset` container and the split / standardisation helpers every loader uses.

Standardisation statistics are always fitted on the training part only and then applied to
validation and test, so nothing about held-out data leaks into the inputs. Random splits
use a ``torch.Generator`` seeded by the loader's ``seed``: same seed, same split.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor


@dataclass
class Dataset:
    """Train / validation / test tensors and what is known about them.

    ``x_val``/``y_val`` are ``None`` when no validation split was asked for. ``task`` is
    ``"regression"``, ``"binary"``, ``"multiclass"`` or ``"ratings"``. ``meta`` records the
    source files, the split, the preprocessing and its fitted statistics (e.g. ``y_mean`` and
    ``y_std`` to report regression errors in the original units).
    """

    name: str
    task: str
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor | None = None
    y_test: Tensor | None = None
    x_val: Tensor | None = None
    y_val: Tensor | None = None
    num_classes: int | None = None
    feature_names: list[str] | None = None
    meta: dict = field(default_factory=dict)

    @property
    def train(self) -> tuple[Tensor, Tensor]:
        return self.x_train, self.y_train

    @property
    def val(self) -> tuple[Tensor, Tensor] | None:
        if self.x_val is None:
            return None
        assert self.y_val is not None, "x_val and y_val are set together"
        return self.x_val, self.y_val

    @property
    def test(self) -> tuple[Tensor, Tensor] | None:
        if self.x_test is None:
            return None
        assert self.y_test is not None, "x_test and y_test are set together"
        return self.x_test, self.y_test

    @property
    def num_train(self) -> int:
        return len(self.y_train)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def num_features(self) -> int:
        n = 1
        for s in self.input_shape:
            n *= s
        return n

    def __repr__(self) -> str:
        def shape(t):
            return None if t is None else tuple(t.shape)

        return (
            f"Dataset({self.name!r}, task={self.task!r}, train={shape(self.x_train)}, "
            f"val={shape(self.x_val)}, test={shape(self.x_test)}, num_classes={self.num_classes})"
        )


def permutation(n: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(int(seed))
    return torch.randperm(n, generator=g)


def split_sizes(n: int, fractions) -> list[int]:
    """Sizes for fractions summing to 1; rounding leftovers go to the first part."""
    fractions = [float(f) for f in fractions]
    if any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    sizes = [int(round(f * n)) for f in fractions]
    sizes[0] += n - sum(sizes)
    return sizes


def count(size: int | float, n: int) -> int:
    """``size`` as a count: a float in [0, 1) is a fraction of ``n``."""
    if isinstance(size, float) and 0 <= size < 1:
        return int(round(size * n))
    size = int(size)
    if not 0 <= size < n:
        raise ValueError(f"validation size must be in [0, {n}), got {size}")
    return size


def carve_validation(x: Tensor, y: Tensor, val_size: int | float, seed: int):
    """Split a random validation part of ``val_size`` (count or fraction) off a training set."""
    n_val = count(val_size, len(y))
    if n_val == 0:
        return x, y, None, None
    perm = permutation(len(y), seed).numpy()
    # keep the file order within each part
    tr, va = torch.from_numpy(np.sort(perm[n_val:])), torch.from_numpy(np.sort(perm[:n_val]))
    return x[tr], y[tr], x[va], y[va]


def fit_standardizer(x: Tensor, dims=0, eps: float = 1e-12) -> tuple[Tensor, Tensor]:
    """Mean and standard deviation over ``dims`` (constant features get std 1, not 0)."""
    x64 = x.double()
    mean = x64.mean(dim=dims, keepdim=True)
    std = x64.std(dim=dims, keepdim=True, unbiased=False)
    std = torch.where(std > eps, std, torch.ones_like(std))
    return mean.to(x.dtype), std.to(x.dtype)


def apply_standardizer(mean: Tensor, std: Tensor, *xs: Tensor | None):
    return tuple(None if x is None else (x - mean) / std for x in xs)
