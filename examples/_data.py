"""MNIST (and Fashion-MNIST, as out-of-distribution inputs) for the examples: from
``--data-dir`` / ``$STRUCTMC_DATA`` (the IDX files under ``mnist/``, ``fashion-mnist/``), else
downloaded (checksummed) into the cache, else — offline with no files — a small synthetic
stand-in, said loudly (the numbers then mean nothing)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch


def default_data_dir() -> str | None:
    env = os.environ.get("STRUCTMC_DATA")
    if env:
        return env
    shared = Path(__file__).resolve().parents[2] / "shared" / "data"  # the development checkout's data
    return str(shared) if shared.is_dir() else None


def mnist(num_train: int | None, num_test: int | None, data_dir: str | None = None, seed: int = 0):
    """``(x_train [n, 784], y_train, x_test, y_test, source)`` in [0, 1]."""
    import structmc

    data_dir = data_dir or default_data_dir()
    try:
        ds = structmc.data.load("mnist", data_dir=data_dir, download=True, flatten=True)
        x, y, xt, yt, source = ds.x_train, ds.y_train, ds.x_test, ds.y_test, "MNIST"
    except Exception as err:  # noqa: BLE001 - offline with no files: say so and go on
        print(f"MNIST not available ({type(err).__name__}: {err}); using a synthetic stand-in", file=sys.stderr)
        g = torch.Generator().manual_seed(seed)
        protos = torch.rand(10, 784, generator=g)
        y, yt = torch.randint(0, 10, (6000,), generator=g), torch.randint(0, 10, (1000,), generator=g)
        x = (protos[y] + 0.8 * torch.rand(6000, 784, generator=g)).clamp(0, 1)
        xt = (protos[yt] + 0.8 * torch.rand(1000, 784, generator=g)).clamp(0, 1)
        source = "synthetic stand-in"
    g = torch.Generator().manual_seed(seed)
    if num_train is not None and num_train < len(y):
        keep = torch.randperm(len(y), generator=g)[:num_train]
        x, y = x[keep], y[keep]
    if num_test is not None and num_test < len(yt):
        xt, yt = xt[:num_test], yt[:num_test]
    return x.float(), y.long(), xt.float(), yt.long(), source


def fashion_mnist_test(num: int | None, data_dir: str | None = None, seed: int = 1):
    """``(x [num, 784] in [0, 1], source)``: Fashion-MNIST's test images (clothes, not digits:
    out-of-distribution inputs for a network trained on MNIST), or offline a synthetic stand-in
    made like :func:`mnist`'s from other prototypes."""
    import structmc

    data_dir = data_dir or default_data_dir()
    try:
        x, source = (
            structmc.data.load("fashion-mnist", data_dir=data_dir, download=True, flatten=True).x_test,
            "Fashion-MNIST",
        )
    except Exception as err:  # noqa: BLE001 - offline with no files: say so and go on
        print(f"Fashion-MNIST not available ({type(err).__name__}: {err}); using a synthetic stand-in", file=sys.stderr)
        g = torch.Generator().manual_seed(seed)
        protos = torch.rand(10, 784, generator=g)
        x = (protos[torch.randint(0, 10, (1000,), generator=g)] + 0.8 * torch.rand(1000, 784, generator=g)).clamp(0, 1)
        source = "synthetic stand-in"
    return (x if num is None else x[:num]).float(), source
