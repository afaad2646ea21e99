"""Network builders shared by the partition and structured-energy tests."""

from __future__ import annotations

from torch import nn


def mlp(widths, act=nn.Sigmoid):
    layers = []
    for k, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(a, b))
        if k < len(widths) - 2:
            layers.append(act())
    return nn.Sequential(*layers)
