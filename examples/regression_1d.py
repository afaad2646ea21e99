"""1-D regression with its uncertainty band: the picture every BNN tutorial starts with.

Data: y = sin(3x)·x/2 + ε (σ = 0.1) on two clusters x ∈ [−2, −0.6] ∪ [0.6, 2]; the band should
widen in the gap and outside the data. Model: MLP 1-50-50-1 (tanh), Gaussian likelihood with
known σ, prior N(0, 1). Sampler: pSGLD, 4 chains, minibatches of 32, started from a MAP
estimate. Writes
``regression_1d.png`` and prints the test RMSE, NLL and interval coverage.

    python examples/regression_1d.py [--full] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn

import structmc as sm
from structmc.diagnostics import plot_predictive, save_figure


def make_data(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.cat(
        [torch.empty(n // 2).uniform_(-2, -0.6, generator=g), torch.empty(n - n // 2).uniform_(0.6, 2, generator=g)]
    )
    y = torch.sin(3 * x) * x / 2 + 0.1 * torch.randn(n, generator=g)
    return x.unsqueeze(1), y


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="longer chains (about 5 minutes on 2 CPU cores)")
    p.add_argument("--steps", type=int, default=None, help="iterations per chain (default 3,000; --full 30,000)")
    p.add_argument("--out", default="runs/examples")
    a = p.parse_args(argv)
    steps = a.steps or (30_000 if a.full else 3_000)
    torch.manual_seed(0)
    x, y = make_data(200, seed=0)
    x_test, y_test = make_data(200, seed=1)
    net = nn.Sequential(nn.Linear(1, 50), nn.Tanh(), nn.Linear(50, 50), nn.Tanh(), nn.Linear(50, 1))
    energy = sm.ModuleEnergy(net, "gaussian", noise_std=0.1, prior_std=1.0)
    # start the chains from a MAP estimate, then sample; pSGLD's lr ε multiplies G∇Û with Û the
    # N-scaled energy, so ε = 2·(a per-datum step)/N (docs/conventions.md): here 2·1e-3/200
    start = sm.find_map(energy, energy.initial_position(), data=(x, y), batch_size=32, num_steps=steps // 2)
    chain = sm.sample(
        energy,
        start,
        sm.PSGLD(1e-5),
        steps,
        data=(x, y),
        batch_size=32,
        num_chains=4,
        burn_in=steps // 2,
        thin=max(1, steps // 200),
        seed=1,
        progress=False,
    )
    grid = torch.linspace(-3.5, 3.5, 300).unsqueeze(1)
    on_grid = sm.evaluate(energy, chain, (grid, torch.zeros(300)))
    test = sm.evaluate(energy, chain, (x_test, y_test))
    draws = energy.forward_draws(chain.samples.reshape(-1, energy.space.dim)[::40], (grid,)).squeeze(-1)
    fig = plot_predictive(
        grid[:, 0], on_grid, x_train=x[:, 0], y_train=y, x_test=x_test[:, 0], y_test=y_test, draws=draws
    )
    fig.axes[0].set_title(
        f"pSGLD, 4 chains x {chain.num_draws} draws: test RMSE {test['pooled']['rmse']:.3f}, "
        f"NLL {test['pooled']['nll']:.2f}, 90% coverage {test['pooled']['coverage']['0.9']:.2f}",
        fontsize=9,
    )
    out = Path(a.out)
    path = save_figure(fig, out / "regression_1d.png")
    gap = on_grid["std"][(grid[:, 0].abs() < 0.3)].mean() / on_grid["std"][(grid[:, 0].abs() - 1.3).abs() < 0.3].mean()
    result = {"png": str(path), **test["pooled"], "band_ratio_gap_vs_data": float(gap)}
    print(
        f"wrote {path}; test RMSE {result['rmse']:.3f}, NLL {result['nll']:.3f}, coverage "
        f"{result['coverage']}; the band is {result['band_ratio_gap_vs_data']:.1f}x wider in the gap than on the data"
    )
    return result


if __name__ == "__main__":
    main()
