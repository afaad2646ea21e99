"""SGMCMC against the usual baselines, scored by one function on the same data: a point
estimate, SGHMC on the whole network, SGLD on the last layer, laplace-torch's last-layer
Laplace and a deep ensemble.

Data: an MNIST subset (training and test images); out-of-distribution inputs: Fashion-MNIST's
test images (clothes, never seen in training). Model: MLP 784-200-200-10 (ReLU), categorical
likelihood, prior N(0, 1). Methods:

(a) MAP: ``find_map`` (Adam);
(b) SGHMC on all parameters, 2 chains started at (a), constant step, half burn-in, thinned;
(c) SGLD on the 2,010 last-layer parameters, prior centred at (a) (``examples/last_layer.py``);
(d) laplace-torch (``pip install structmc[compare]``): last-layer Laplace at (a), Kronecker-
    factored GGN, prior precision by marginal likelihood, 100 samples of its linearised (GLM)
    predictive; skipped, with the reason, when ``import laplace`` fails;
(e) a deep ensemble: (a) and M − 1 more MAP networks from other initialisations and batch orders.

(a), (b), (e) (draws of all the network's parameters) and (c) (of its last layer) are scored by
``sm.evaluate``; (d)'s predictive probabilities by ``sm.evaluate_probs``, the code ``evaluate``
scores with. Each
row: accuracy, NLL, ECE, the AUROC of the predictive entropy (and of the mutual information,
where there are several members) telling Fashion-MNIST from MNIST's test images, and the wall
and CPU seconds of fitting the method (with the MAP it starts from; scoring not counted). The
entropy histograms, in- and out-of-distribution, are ``compare_baselines.png``.

    python examples/compare_baselines.py [--num-train N] [--members M] [--seed S] [--data-dir DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

import structmc as sm
from structmc.priors import Normal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import fashion_mnist_test, mnist  # noqa: E402

LAPLACE = "(d) last-layer Laplace"


def _mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)  # the initialisation of member `seed`
    return nn.Sequential(nn.Linear(784, 200), nn.ReLU(), nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 10))


def fit_laplace(net: nn.Module, x, y, batch: int):
    """laplace-torch's last-layer Laplace around ``net``'s weights (Kronecker-factored GGN,
    prior precision by marginal likelihood): ``(the fitted Laplace, None)``, or ``(None, the
    reason)`` when laplace-torch is not installed."""
    try:
        from laplace import Laplace
    except ImportError as err:
        return None, f"laplace-torch is not importable ({err}); pip install 'structmc[compare]'"
    from torch.utils.data import DataLoader, TensorDataset

    net.requires_grad_(True)  # draw_module's copy is frozen; Laplace takes the trainable parameters
    la = Laplace(net, "classification", subset_of_weights="last_layer", hessian_structure="kron")
    la.fit(DataLoader(TensorDataset(x, y), batch_size=batch))
    la.optimize_prior_precision(pred_type="glm", method="marglik")
    return la, None


def laplace_samples(la, inputs, num_samples: int, generator: torch.Generator):
    """``[num_samples, n, K]``: class probabilities drawn from the Laplace's linearised (GLM)
    predictive (so the members' disagreement, the mutual information, is defined too)."""
    with torch.no_grad():
        return la.predictive_samples(inputs, pred_type="glm", n_samples=num_samples, generator=generator)


def _warm_up() -> None:
    """One-time imports out of the first method's clock: torch's compiler stack (Adam's first
    construction imports it) and laplace-torch (torchmetrics, and through it transformers)."""
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])
    try:
        import laplace  # noqa: F401
    except ImportError:
        pass


def _clock() -> tuple[float, float]:
    """(wall, CPU) seconds now: the CPU time counts this process's work alone, the wall time
    also another process's on a shared machine."""
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float], before: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """Seconds since ``start`` plus ``before`` (the MAP a method starts from), wall and CPU."""
    now = _clock()
    return now[0] - start[0] + before[0], now[1] - start[1] + before[1]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-train", type=int, default=10_000)
    p.add_argument("--num-test", type=int, default=5_000)
    p.add_argument("--epochs", type=float, default=3, help="MAP training and each sampler's length, in epochs")
    p.add_argument("--members", type=int, default=5, help="deep-ensemble size M")
    p.add_argument("--seed", type=int, default=0, help="the methods' randomness (the data subset stays)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default="runs/examples")
    a = p.parse_args(argv)
    if a.members < 2:
        p.error("--members must be at least 2 (an ensemble)")
    x, y, xt, yt, source = mnist(a.num_train, a.num_test, a.data_dir)
    x_ood, ood_source = fashion_mnist_test(a.num_test, a.data_dir)
    N, batch = len(y), 100
    steps = max(20, int(a.epochs * N / batch))
    test, rows, skipped = (xt, yt), {}, {}
    s = 100 * a.seed  # initialisations s + m, batch orders and chains s + 1, s + 2, ...
    whole = sm.ModuleEnergy(_mlp(s), "categorical", prior_std=1.0)
    score = lambda energy, draws: sm.evaluate(energy, draws, test, ood=x_ood, per_chain=False)  # noqa: E731

    _warm_up()
    t0 = _clock()  # (a) MAP
    theta_map = sm.find_map(whole, whole.initial_position(), data=(x, y), batch_size=batch, num_steps=steps, seed=s)
    map_seconds = _since(t0)
    rows["(a) MAP"] = (score(whole, theta_map.unsqueeze(0)), map_seconds)

    t0 = _clock()  # (b) SGHMC, all parameters: η·N ≈ an SGD step of 5e-3 with momentum 0.9
    full = sm.sample(
        whole,
        theta_map,
        sm.SGHMC(5e-3 / N, friction=0.1),
        steps,
        data=(x, y),
        batch_size=batch,
        num_chains=2,
        burn_in=steps // 2,
        thin=max(1, steps // 40),
        seed=s + 1,
        progress=False,
    )
    rows["(b) SGHMC, all weights"] = (score(whole, full), _since(t0, map_seconds))

    t0 = _clock()  # (c) SGLD on the last layer, its prior centred at the MAP
    net = sm.draw_module(whole, theta_map.unsqueeze(0))
    last = sm.ModuleEnergy(net, "categorical", sample="4.*", prior=Normal(loc=net.state_dict(), scale=0.1))
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
        seed=s + 2,
        progress=False,
    )
    rows["(c) SGLD, last layer"] = (score(last, chain), _since(t0, map_seconds))

    t0 = _clock()  # (d) laplace-torch's last-layer Laplace at the MAP
    la, reason = fit_laplace(sm.draw_module(whole, theta_map.unsqueeze(0)), x, y, batch)
    if la is None:
        skipped[LAPLACE] = reason
        print(f"{LAPLACE}: skipped, {reason}")
    else:
        seconds = _since(t0, map_seconds)
        g = torch.Generator().manual_seed(s + 3)
        probs, ood_probs = laplace_samples(la, xt, 100, g), laplace_samples(la, x_ood, 100, g)
        rows[LAPLACE] = (sm.evaluate_probs(probs, yt, ood_probs=ood_probs), seconds)

    t0 = _clock()  # (e) deep ensemble: (a) and M − 1 more
    members = [theta_map] + [
        sm.find_map(
            whole,
            sm.ModuleEnergy(_mlp(s + m), "categorical").initial_position(),
            data=(x, y),
            batch_size=batch,
            num_steps=steps,
            seed=s + m,
        )
        for m in range(1, a.members)
    ]
    rows[f"(e) deep ensemble, M = {a.members}"] = (
        score(whole, torch.stack(members)),
        _since(t0, map_seconds),
    )

    header = f"{'method':28s} {'accuracy':>8s} {'NLL':>7s} {'ECE':>6s} {'AUROC H':>7s} {'AUROC MI':>8s} {'wall s':>7s} {'CPU s':>7s}"
    print(f"{source}: {N} training, {len(yt)} test images; OOD: {len(x_ood)} {ood_source} test images; seed {a.seed}")
    print(header)
    table = {}
    for name, (result, (wall, cpu)) in rows.items():
        r = result["pooled"]
        mi = f"{r['ood_auroc_mutual_information']:8.3f}" if result["num_draws"] > 1 else f"{'—':>8s}"
        print(
            f"{name:28s} {100 * r['accuracy']:7.2f}% {r['nll']:7.4f} {100 * r['ece']:5.2f}% "
            f"{r['ood_auroc_entropy']:7.3f} {mi} {wall:7.1f} {cpu:7.1f}"
        )
        table[name] = {**r, "wall_seconds": wall, "cpu_seconds": cpu, "num_draws": result["num_draws"]}
    png = _plot(rows, Path(a.out) / "compare_baselines.png", f"{source} (in) against {ood_source} (out)")
    print(f"wrote {png}" if png else "no plot (matplotlib is not installed: pip install matplotlib)")
    return {
        "png": png,
        "data": source,
        "ood_data": ood_source,
        "table": table,
        "skipped": skipped,
        "laplace_prior_precision": None if la is None else float(la.prior_precision.mean()),
    }


def _plot(rows: dict, path: Path, title: str) -> str | None:
    """Per method, histograms of the predictive entropy of the test and the OOD inputs."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from structmc.diagnostics import save_figure

    fig, axes = plt.subplots(1, len(rows), figsize=(3.2 * len(rows), 2.8), sharex=True, squeeze=False)
    for ax, (name, (result, _)) in zip(axes[0], rows.items()):
        bins = torch.linspace(0, float(torch.log(torch.tensor(10.0))), 31).tolist()
        ax.hist(result["entropy"].cpu().numpy(), bins=bins, alpha=0.6, density=True, label="test (in)")
        ax.hist(result["ood"]["entropy"].cpu().numpy(), bins=bins, alpha=0.6, density=True, label="OOD")
        ax.set_title(f"{name}\nAUROC {result['pooled']['ood_auroc_entropy']:.3f}", fontsize=9)
        ax.set_xlabel("predictive entropy (nats)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return str(save_figure(fig, path))


if __name__ == "__main__":
    main()
