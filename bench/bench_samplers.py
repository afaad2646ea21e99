"""Per-step cost of each structmc sampler vs a hand-written autograd SGLD loop.

Problem: MLP 784-50-50-10 (ReLU), categorical likelihood, N(0, 1) prior, minibatch 500 of
N = 10,000 MNIST-shaped points, one chain, CPU. Every contender runs the same number of
steps, interleaved in rounds so that machine noise hits all of them alike; we report the
median seconds per step and the ratio to the hand loop measured in the same run.

    python bench/bench_samplers.py            # ~1 minute
    python bench/bench_samplers.py --quick    # a few seconds, for smoke runs
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn

import structmc as sm
from _timing import interleaved_seconds_per_step, write_json


def make_problem(num_data: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(num_data, 784, generator=g)
    y = torch.randint(0, 10, (num_data,), generator=g)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(784, 50), nn.ReLU(), nn.Linear(50, 50), nn.ReLU(), nn.Linear(50, 10))
    return X, y, model


def hand_loop(model: nn.Module, X, y, batch_size: int, lr: float, steps: int, seed: int) -> None:
    """The plain loop a user would write: gather a batch, forward, backward, in-place update + noise."""
    g = torch.Generator().manual_seed(seed)
    N = X.shape[0]
    params = list(model.parameters())
    scale, noise_sd = N / batch_size, math.sqrt(lr)
    for _ in range(steps):
        idx = torch.randint(N, (batch_size,), generator=g)
        loss = scale * F.cross_entropy(model(X[idx]), y[idx], reduction="sum")
        for p in params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.grad.add_(p)  # N(0, 1) prior
                p.add_(p.grad, alpha=-0.5 * lr)
                p.add_(torch.randn(p.shape, generator=g), alpha=noise_sd)


def posteriors_loop(model: nn.Module, X, y, batch_size: int, lr: float, steps: int, seed: int):
    import posteriors
    from torch.func import functional_call

    N = X.shape[0]
    scale = N / batch_size

    def log_post(params, batch):
        xb, yb = batch
        out = functional_call(model, params, (xb,))
        log_prior = -0.5 * sum((p * p).sum() for p in params.values())
        return -scale * F.cross_entropy(out, yb, reduction="sum") + log_prior, out

    # posteriors' SGLD is θ + lr·∇log p + N(0, 2·lr·T): lr_posteriors = ε/2 in our convention.
    transform = posteriors.sgmcmc.sgld.build(log_post, lr=0.5 * lr, temperature=1.0)
    state = transform.init({k: v.detach().clone() for k, v in model.named_parameters()})
    g = torch.Generator().manual_seed(seed)

    def run(n_steps):
        nonlocal state
        for _ in range(n_steps):
            idx = torch.randint(N, (batch_size,), generator=g)
            state, _ = transform.update(state, (X[idx], y[idx]), inplace=True)

    return run


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200, help="steps per timed block")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median is reported)")
    ap.add_argument("--batch-size", type=int, default=500)
    ap.add_argument("--num-data", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.rounds = 10, 2
    X, y, model = make_problem(args.num_data)
    lr = 1e-5
    energy = sm.ModuleEnergy(model, "categorical", prior_std=1.0)
    centre = energy.initial_position()

    def ours(sampler, gradient="minibatch"):
        def run(n_steps):
            sm.sample(energy, None, sampler, n_steps, data=(X, y), batch_size=args.batch_size, thin=n_steps,
                      gradient=gradient, progress=False)
        return run

    contenders = {
        "hand-written SGLD loop": lambda n: hand_loop(model, X, y, args.batch_size, lr, n, 0),
        "structmc SGLD": ours(sm.SGLD(lr)),
        "structmc pSGLD": ours(sm.PSGLD(lr)),
        "structmc SGHMC": ours(sm.SGHMC(lr, friction=0.1)),
        "structmc SGNHT": ours(sm.SGNHT(lr, a=0.1)),
        "structmc SGLD-CV": ours(sm.SGLD(lr), sm.ControlVariate(centre)),
        "structmc SGHMC-CV": ours(sm.SGHMC(lr, friction=0.1), sm.ControlVariate(centre)),
        "structmc SGNHT-CV": ours(sm.SGNHT(lr, a=0.1), sm.ControlVariate(centre)),
    }
    try:
        contenders["posteriors SGLD"] = posteriors_loop(model, X, y, args.batch_size, lr, args.steps, 0)
    except ImportError:
        print("posteriors is not installed (pip install posteriors): skipping that reference", file=sys.stderr)

    per_step = interleaved_seconds_per_step(contenders, args.steps, args.rounds)
    base = per_step["hand-written SGLD loop"]
    rows = {k: {"ms_per_step": 1e3 * t, "ratio_to_hand_loop": t / base} for k, t in per_step.items()}
    print(f"MLP 784-50-50-10, batch {args.batch_size}, N={args.num_data}, {torch.get_num_threads()} threads, "
          f"{args.rounds} rounds x {args.steps} steps (median)")
    print(f"{'contender':28s} {'ms/step':>9s} {'ratio':>7s}")
    for k, r in rows.items():
        print(f"{k:28s} {r['ms_per_step']:9.3f} {r['ratio_to_hand_loop']:7.3f}")
    print("CV variants evaluate two gradients per step (at θ and at the centre).")
    write_json(args.json, rows)
    return rows


if __name__ == "__main__":
    main()
