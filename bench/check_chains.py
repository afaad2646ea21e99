"""Same seed, same draws: record the chains of every sampler family on the CPU and compare them,
bit for bit, with a recording made by another commit (the check a refactor must pass).

    python bench/check_chains.py --save /tmp/chains-before.pt      # on the commit before
    python bench/check_chains.py --compare /tmp/chains-before.pt   # on the refactored code

Each configuration is small (a few hundred parameters, 40-120 iterations) and covers one path:
SGLD, pSGLD, SGHMC, SGNHT, scale-adapted SGHMC, SGLD-CV, S- and Sd-SGLD, Metropolis-within-Gibbs,
a Laplace prior, a hierarchical prior, the Dataset path, epoch / stratified / with-replacement
batches, and 1 or 3 chains. ``--compare`` prints one line per configuration and exits 1 on any
difference.
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn
from torch.utils.data import TensorDataset

import structmc as sm
from structmc.gibbs.mwg import MetropolisWithinGibbs
from structmc.gradients import ControlVariate
from structmc.partitions import by_layer, by_neuron
from structmc.priors import HierarchicalEnergy, Laplace
from structmc.structured.energies import BernoulliMask, StructuredEnergy


def _problem(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(120, 5, generator=g)
    y = (X[:, 0] - X[:, 1] > 0).long() + (X[:, 2] > 1).long()
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    return net, (X, y)


def _energy(**kw):
    net, data = _problem()
    return sm.ModuleEnergy(net, "categorical", **kw), data


def configurations():
    samplers = {
        "sgld": lambda: sm.SGLD(1e-3),
        "psgld": lambda: sm.PSGLD(1e-4),
        "sghmc": lambda: sm.SGHMC(1e-4, friction=0.1, num_leapfrog=2, resample_momentum=True),
        "sgnht": lambda: sm.SGNHT(1e-4, a=0.1, num_leapfrog=2),
        "sa-sghmc": lambda: sm.ScaleAdaptedSGHMC(1e-5, adapt_steps=10),
    }
    for name, make in samplers.items():
        for chains in (1, 3):
            for batching in ("epoch", "stratified", "with_replacement"):

                def run(make=make, chains=chains, batching=batching):
                    e, data = _energy(prior_std={"*.bias": 3.0, "*": 1.0})
                    return sm.sample(
                        e,
                        None,
                        make(),
                        60,
                        data=data,
                        batch_size=20,
                        batching=batching,
                        num_chains=chains,
                        seed=7,
                        progress=False,
                    )

                yield f"{name}-{chains}ch-{batching}", run

    def sgld_cv(chains):
        e, data = _energy()
        centre = sm.find_map(e, e.initial_position(), data=data, batch_size=40, num_steps=50, seed=1)
        return sm.sample(
            e,
            centre,
            sm.SGLD(1e-4),
            60,
            data=data,
            batch_size=10,
            num_chains=chains,
            seed=3,
            gradient=ControlVariate(centre),
            progress=False,
        )

    for chains in (1, 3):
        yield f"sgld-cv-{chains}ch", lambda chains=chains: sgld_cv(chains)

    def structured(kind, chains):
        e, data = _energy()
        part = by_layer(e.space) if kind == "S" else by_neuron(e.space)
        if kind == "S":
            se = StructuredEnergy(e, part, 30, seed=2)
        else:
            se = StructuredEnergy(e, part, 30, mask=BernoulliMask(0.5), num_copies=2, seed=2)
        return sm.sample(
            se, None, sm.SGLD(1e-4), 50, data=data, batch_size=20, num_chains=chains, seed=5, progress=False
        )

    for kind in ("S", "Sd"):
        for chains in (1, 3):
            yield f"{kind}-sgld-{chains}ch", lambda kind=kind, chains=chains: structured(kind, chains)

    def gibbs(chains):
        e, data = _energy()
        sampler = MetropolisWithinGibbs(by_neuron(e.space), 0.05)
        return sm.sample(e, None, sampler, 20, data=data, batch_size=40, num_chains=chains, seed=9, progress=False)

    for chains in (1, 2):
        yield f"gibbs-{chains}ch", lambda chains=chains: gibbs(chains)

    def laplace(chains):
        e, data = _energy(prior=Laplace(0.0, 0.5))
        return sm.sample(
            e, None, sm.SGLD(1e-3), 60, data=data, batch_size=20, num_chains=chains, seed=11, progress=False
        )

    for chains in (1, 3):
        yield f"laplace-{chains}ch", lambda chains=chains: laplace(chains)

    def hierarchical(chains):
        e, data = _energy()
        h = HierarchicalEnergy(e)
        init = h.initial_position().expand(chains, -1).clone() if h.initial_position().dim() == 1 else None
        return sm.sample(
            h, init, sm.SGLD(1e-4), 60, data=data, batch_size=20, num_chains=chains, seed=13, progress=False
        )

    for chains in (1, 2):
        yield f"hierarchical-{chains}ch", lambda chains=chains: hierarchical(chains)

    def dataset(chains):
        e, (X, y) = _energy()
        return sm.sample(
            e,
            None,
            sm.PSGLD(1e-4),
            60,
            data=TensorDataset(X, y),
            batch_size=20,
            num_chains=chains,
            seed=17,
            progress=False,
        )

    for chains in (1, 3):
        yield f"dataset-{chains}ch", lambda chains=chains: dataset(chains)


def record() -> dict[str, dict[str, torch.Tensor]]:
    torch.set_num_threads(1)
    out = {}
    for name, run in configurations():
        chain = run()
        out[name] = {"samples": chain.samples.clone(), "energy": chain.info["energy"].clone()}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", help="record the chains to this file")
    g.add_argument("--compare", help="compare with the chains recorded in this file")
    args = p.parse_args(argv)
    now = record()
    if args.save:
        torch.save(now, args.save)
        print(f"recorded {len(now)} configurations to {args.save}")
        return 0
    before = torch.load(args.compare)
    bad = 0
    for name in sorted(set(before) | set(now)):
        if name not in before or name not in now:
            print(f"{name}: only in {'the recording' if name in before else 'this code'}")
            bad += 1
            continue
        same = all(torch.equal(before[name][k], now[name][k]) for k in ("samples", "energy"))
        diff = 0.0 if same else float((before[name]["samples"] - now[name]["samples"]).abs().max())
        print(f"{name}: {'bit-identical' if same else f'DIFFERENT (max |Δθ| = {diff:.3g})'}")
        bad += not same
    print(f"{len(now) - bad} of {len(now)} configurations bit-identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
