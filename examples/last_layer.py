"""A Bayesian last layer on a trained network: a point estimate first, then SGLD on the last
layer only, with the prior centred at the trained weights.

Model: MLP 784-200-200-10 (ReLU) on MNIST. ``find_map`` trains it (Adam); then
``ModuleEnergy(net, ..., sample="4.*", prior=Normal(loc=net.state_dict(), scale=0.1))``
samples the 2,010 last-layer parameters while the body stays fixed (no gradients, no memory
for it). Accuracy, NLL and ECE of the point estimate and of the last-layer posterior
predictive; their reliability diagram is ``last_layer.png``.

    python examples/last_layer.py [--full] [--data-dir DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

import structmc as sm
from structmc.diagnostics import plot_calibration, save_figure
from structmc.priors import Normal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import mnist  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="all 60,000 images, longer training and sampling")
    p.add_argument("--num-train", type=int, default=None)
    p.add_argument("--epochs", type=float, default=None)
    p.add_argument("--prior-scale", type=float, default=0.1)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default="runs/examples")
    a = p.parse_args(argv)
    n_train = a.num_train or (None if a.full else 10_000)
    epochs = a.epochs or (10 if a.full else 3)
    x, y, xt, yt, source = mnist(n_train, None if a.full else 5_000, a.data_dir)
    N, batch = len(y), 100
    steps = max(20, int(epochs * N / batch))
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 10))
    whole = sm.ModuleEnergy(net, "categorical", prior_std=1.0)
    trained = sm.find_map(whole, whole.initial_position(), data=(x, y), batch_size=batch, num_steps=steps)
    with torch.no_grad():  # the point estimate into the network
        params = dict(net.named_parameters())
        for name, value in whole.space.unflatten(trained).items():
            params[name].copy_(value)
    point = sm.evaluate(whole, trained.unsqueeze(0), (xt, yt))

    # the last layer only, its prior centred on the trained weights
    last = sm.ModuleEnergy(net, "categorical", sample="4.*", prior=Normal(loc=net.state_dict(), scale=a.prior_scale))
    chain = sm.sample(
        last,
        None,
        sm.SGLD(2e-6),
        steps,
        data=(x, y),
        batch_size=batch,
        num_chains=4,
        burn_in=steps // 2,
        thin=max(1, steps // 50),
        seed=1,
        progress=False,
    )
    bayes = sm.evaluate(last, chain, (xt, yt))
    fig = plot_calibration(
        [point, bayes], yt, label=["point estimate", f"Bayesian last layer ({last.space.dim} parameters)"]
    )
    fig.suptitle(f"{source}, MLP 784-200-200-10, {N} training images", fontsize=10)
    path = save_figure(fig, Path(a.out) / "last_layer.png")
    result = {
        "png": str(path),
        "data": source,
        "point": point["pooled"],
        "last_layer": bayes["pooled"],
        "sampled_parameters": last.space.dim,
        "total_parameters": whole.space.dim,
    }
    for name in ("point", "last_layer"):
        r = result[name]
        print(f"{name:10s} accuracy {100 * r['accuracy']:.2f}%, NLL {r['nll']:.4f}, ECE {100 * r['ece']:.2f}%")
    print(f"sampled {last.space.dim} of {whole.space.dim} parameters; wrote {path}")
    return result


if __name__ == "__main__":
    main()
