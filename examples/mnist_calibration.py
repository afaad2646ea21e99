"""MNIST classification with a reliability diagram: a point estimate against the posterior
predictive of pSGLD.

Model: MLP 784-100-10 (ReLU), categorical likelihood, prior N(0, 1). The point estimate is
``find_map`` (Adam); the Bayesian model averages 4 pSGLD chains started there. Both are scored
by ``structmc.evaluate`` (accuracy, NLL, Brier, ECE, MCE) and drawn in one reliability
diagram, ``mnist_calibration.png``.

    python examples/mnist_calibration.py [--full] [--data-dir DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

import structmc as sm
from structmc.diagnostics import plot_calibration, save_figure

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import mnist  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="all 60,000 images and 10 epochs (minutes)")
    p.add_argument("--num-train", type=int, default=None)
    p.add_argument("--epochs", type=float, default=None)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default="runs/examples")
    a = p.parse_args(argv)
    n_train = a.num_train or (None if a.full else 10_000)
    epochs = a.epochs or (10 if a.full else 2)
    x, y, xt, yt, source = mnist(n_train, None if a.full else 5_000, a.data_dir)
    N, batch = len(y), 100
    steps = max(20, int(epochs * N / batch))
    torch.manual_seed(0)
    energy = sm.ModuleEnergy(
        nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 10)), "categorical", prior_std=1.0
    )
    map_theta = sm.find_map(energy, energy.initial_position(), data=(x, y), batch_size=batch, num_steps=steps)
    point = sm.evaluate(energy, map_theta.unsqueeze(0), (xt, yt))
    # pSGLD: ε = 2·(per-datum step 1e-3)/N (the pSGLD paper's convention, docs/conventions.md)
    chain = sm.sample(
        energy,
        map_theta,
        sm.PSGLD(2 * 1e-3 / N),
        steps,
        data=(x, y),
        batch_size=batch,
        num_chains=4,
        burn_in=steps // 2,
        thin=max(1, steps // 40),
        seed=1,
        progress=False,
    )
    bayes = sm.evaluate(energy, chain, (xt, yt))
    fig = plot_calibration([point, bayes], yt, label=["MAP (find_map)", f"pSGLD, {chain.num_draws * 4} draws"])
    fig.suptitle(f"{source}, MLP 784-100-10, {N} training images", fontsize=10)
    path = save_figure(fig, Path(a.out) / "mnist_calibration.png")
    result = {
        "png": str(path),
        "data": source,
        "map": point["pooled"],
        "psgld": bayes["pooled"],
        "psgld_per_chain_accuracy": [c["accuracy"] for c in bayes["per_chain"]],
    }
    for name in ("map", "psgld"):
        r = result[name]
        print(
            f"{name:6s} accuracy {100 * r['accuracy']:.2f}%, NLL {r['nll']:.4f}, Brier {r['brier']:.4f}, "
            f"ECE {100 * r['ece']:.2f}%, MCE {100 * r['mce']:.1f}%"
        )
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
