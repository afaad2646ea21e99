"""A map-style Dataset of ``(x_i, y_i)`` items (not a TensorDataset, which structmc reads as
in-memory tensors): the Dataset path of sample, evaluate and the energy checks."""

from __future__ import annotations

import torch


class Items(torch.utils.data.Dataset):
    """Items ``(X[i], y[i])``; ``targets`` (optional) is the attribute stratified batching reads."""

    def __init__(self, X, y, targets=None):
        self.X, self.y = X, y
        if targets is not None:
            self.targets = targets

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.X[i], self.y[i]
