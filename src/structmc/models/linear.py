"""Generalised linear models as modules: linear, logistic and softmax regression.

Outputs follow :mod:`structmc.energy`'s likelihoods: a ``[n, 1]`` mean (``"gaussian"``),
a ``[n, 1]`` logit (``"bernoulli"``), ``[n, K]`` logits (``"categorical"``). Inputs with more
than two dimensions (images) are flattened.
"""

from __future__ import annotations

from torch import Tensor, nn


def _flat(x: Tensor) -> Tensor:
    return x.flatten(1) if x.dim() > 2 else x


class LinearRegression(nn.Module):
    """``y = wᵀx + b`` (``bias=False`` drops b)."""

    def __init__(self, in_features: int, out_features: int = 1, *, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(_flat(x))


class LogisticRegression(nn.Module):
    """Logit ``θᵀx (+ b)``; the MAMBA paper's model has no intercept (``bias=False``)."""

    def __init__(self, in_features: int, *, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(in_features, 1, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(_flat(x))


class SoftmaxRegression(nn.Module):
    """Class logits ``Wx + b``."""

    def __init__(self, in_features: int, num_classes: int, *, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(_flat(x))
