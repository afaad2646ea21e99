"""Per-step cost of each structmc sampler vs the loops a careful PyTorch user writes.

References, measured in the same run and interleaved in rounds so that machine noise hits
every contender alike (median seconds per step):

* **tuned hand loop** (the reference of every ratio): contiguous slices of a per-epoch
  permutation gathered with ``index_select``, forward, ``autograd.grad``, and the SGLD
  update ``θ ← θ − (ε/2)(∇Û + θ) + √ε ξ`` as ``torch._foreach_*`` ops with one flat
  ``randn`` for the noise;
* **plain hand loop**: random indices, ``backward``, a Python loop of in-place updates per
  parameter tensor (second row, as in earlier versions of this benchmark);
* **posteriors SGLD** when ``posteriors`` is installed.

Models: ``--model mlp`` (784-50-50-10 ReLU, batch 500 of N = 10,000 MNIST-shaped points) or
``--model resnet20`` (ResNet-20 with BatchNorm, batch 128 of CIFAR-shaped points). The
multi-chain rows run 8 and 32 chains batched (``vmap``) and report the cost per chain-step.
On ``--device cuda`` every timed block ends with ``torch.cuda.synchronize()``.

    python bench/bench_samplers.py                       # MLP on CPU, ~1-2 minutes
    python bench/bench_samplers.py --model resnet20      # slow on CPU; use --device cuda
    python bench/bench_samplers.py --quick               # a few seconds, for smoke runs

``--posteriors off`` leaves posteriors out as if it were not installed, ``--posteriors
imported`` imports it but runs no row of it. ``--posteriors-effect R`` answers "does having
posteriors around slow structmc?": it runs this benchmark in fresh processes, R times each
way, alternating -- posteriors off; imported before torch and structmc, no row; imported
first with its row (what a plain run does when it is installed) -- and prints the median
ratios side by side (``--clock thread`` counts CPU time only, steadier on a shared machine):

    python bench/bench_samplers.py --posteriors-effect 3 --samplers SGLD,CV --chains "" --clock thread

Issue 22 §3 (SGLD 1.48x and CV 2.7x with posteriors installed, 0.98x and 1.97x without) did
not reproduce as an effect of the import: with ``--posteriors-effect 3 --samplers SGLD,CV
--chains 8 --clock thread --rounds 5 --steps 100`` on the 2-core CPU box, off / imported /
imported + row gave SGLD 1.01 / 1.00 / 1.04, SGLD-CV 1.99 / 1.97 / 2.01, 8 chains 1.15 / 1.17 /
1.20 (the row's cache traffic nudges every other row, the plain hand loop's too: 1.09 / 1.10 /
1.15). The one-chain step runs the same code either way: the same Python calls (cProfile) and
ATen dispatch tables, and the same instructions per step within 0.07% (callgrind, 20 steps).
The import's one effect on structmc was tensordict's patch of ``torch.func.vmap`` (the chains
of the multi-chain paths); ``structmc._vmap`` now bypasses it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import warnings

import torch
import torch.nn.functional as F
from _timing import interleaved_seconds_per_step, write_json
from torch import nn

import structmc as sm
from structmc.compiled import Compiled


def make_problem(num_data: int, seed: int = 0, model: str = "mlp", device: str = "cpu"):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    if model == "mlp":
        X = torch.randn(num_data, 784, generator=g)
        net = nn.Sequential(nn.Linear(784, 50), nn.ReLU(), nn.Linear(50, 50), nn.ReLU(), nn.Linear(50, 10))
    elif model == "small":  # 10 parameters (issue 37's small target): launches and Python, no arithmetic
        X = torch.randn(num_data, 4, generator=g)
        net = nn.Linear(4, 2)
        return X.to(device), torch.randint(0, 2, (num_data,), generator=g).to(device), net.to(device)
    elif model == "resnet20":
        X = torch.randn(num_data, 3, 32, 32, generator=g)
        net = sm.models.resnet20(10)
    else:
        raise ValueError(f"unknown model {model!r}")
    y = torch.randint(0, 10, (num_data,), generator=g)
    return X.to(device), y.to(device), net.to(device)


def hand_loop(model: nn.Module, X, y, batch_size: int, lr: float, steps: int, seed: int) -> None:
    """The plain loop: random indices, forward, backward, per-tensor in-place update + noise."""
    g = torch.Generator(X.device).manual_seed(seed)
    N = X.shape[0]
    params = list(model.parameters())
    scale, noise_sd = N / batch_size, math.sqrt(lr)
    for _ in range(steps):
        idx = torch.randint(N, (batch_size,), generator=g, device=X.device)
        loss = scale * F.cross_entropy(model(X[idx]), y[idx], reduction="sum")
        for p in params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.grad.add_(p)  # N(0, 1) prior
                p.add_(p.grad, alpha=-0.5 * lr)
                p.add_(torch.randn(p.shape, generator=g, device=p.device), alpha=noise_sd)


class TunedHandLoop:
    """The loop a careful PyTorch user writes (see the module docstring); it keeps its epoch
    position between calls, as a training loop would."""

    def __init__(self, model: nn.Module, X, y, batch_size: int, lr: float, seed: int):
        self.model, self.X, self.y, self.n, self.lr = model, X, y, batch_size, lr
        self.g = torch.Generator(X.device).manual_seed(seed)
        self.params = [p for p in model.parameters()]
        self.numels = [p.numel() for p in self.params]
        self.total = sum(self.numels)
        self.perm, self.pos = None, X.shape[0]

    def __call__(self, steps: int) -> None:
        X, y, n, lr, params = self.X, self.y, self.n, self.lr, self.params
        N = X.shape[0]
        scale, noise_sd = N / n, math.sqrt(lr)
        for _ in range(steps):
            if self.pos + n > N:
                self.perm, self.pos = torch.randperm(N, generator=self.g, device=X.device), 0
            idx = self.perm[self.pos : self.pos + n]
            self.pos += n
            xb, yb = X.index_select(0, idx), y.index_select(0, idx)
            loss = scale * F.cross_entropy(self.model(xb), yb, reduction="sum")
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                noise = torch.randn(self.total, generator=self.g, device=X.device).split(self.numels)
                torch._foreach_add_(grads, params)  # N(0, 1) prior: ∇Û + θ
                torch._foreach_add_(params, grads, alpha=-0.5 * lr)
                torch._foreach_add_(params, [z.view_as(p) for z, p in zip(noise, params)], alpha=noise_sd)


def posteriors_loop(model: nn.Module, X, y, batch_size: int, lr: float, seed: int):
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
    g = torch.Generator(X.device).manual_seed(seed)

    def run(n_steps):
        nonlocal state
        for _ in range(n_steps):
            idx = torch.randint(N, (batch_size,), generator=g, device=X.device)
            state, _ = transform.update(state, (X[idx], y[idx]), inplace=True)

    return run


def kernel_floor(run, steps: int) -> float:
    """Seconds of GPU kernel time per step (torch.profiler: the sum of the device time of every
    kernel in ``steps`` steps): the physical limit of a step whose launches cost nothing."""
    from torch.profiler import ProfilerActivity, profile

    run(2)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(steps)
    total_us = sum(e.device_time_total for e in prof.key_averages() if e.device_type.name == "CUDA")
    return total_us * 1e-6 / steps


def synced(run, device: str):
    if device != "cuda":
        return run

    def timed(n):
        run(n)
        torch.cuda.synchronize()

    return timed


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("mlp", "resnet20", "small"), default="mlp")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--steps", type=int, default=None, help="steps per timed block (default: 200 MLP, 20 ResNet)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median is reported)")
    ap.add_argument("--batch-size", type=int, default=None, help="default: 500 MLP, 128 ResNet-20")
    ap.add_argument("--num-data", type=int, default=None, help="default: 10,000 MLP, 2,048 ResNet-20")
    ap.add_argument("--chains", default="8,32", help="multi-chain rows (comma list; empty for none)")
    ap.add_argument("--samplers", default="all", help="'all' or a comma list of SGLD,pSGLD,SGHMC,SGNHT,CV")
    ap.add_argument("--quick", action="store_true", help="tiny run for smoke tests")
    ap.add_argument(
        "--execution",
        default="eager",
        help="comma list of eager,compiled: the rows of sample() (eager) and of a warmed-up compiled Run "
        "(execution='compiled', beside the same Run stepped eagerly), e.g. eager,compiled",
    )
    ap.add_argument(
        "--block",
        type=int,
        default=0,
        metavar="K",
        help="with --execution compiled: also rows of Compiled(block=K), K iterations a compiled call",
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="on CUDA: also profile each compiled row's kernels (torch.profiler) and report the kernel-time "
        "floor per step and the ratio to it",
    )
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument(
        "--clock",
        choices=("wall", "thread"),
        default="wall",
        help="wall: perf_counter; thread: CPU time of this thread (CPU, 1 thread)",
    )
    ap.add_argument(
        "--posteriors",
        choices=("auto", "off", "imported"),
        default="auto",
        help="auto: a posteriors row when installed; off: none, not imported; imported: imported, no row",
    )
    ap.add_argument(
        "--posteriors-effect",
        type=int,
        default=0,
        metavar="R",
        help="run R fresh processes per posteriors mode (off / imported first / imported first with "
        "its row), alternating, and print the median ratios side by side",
    )
    args = ap.parse_args(argv)
    # timed blocks of a few hundred steps: the end-of-run "not settled" warning is expected
    warnings.simplefilter("ignore", sm.diagnostics.health.ConvergenceWarning)
    if args.posteriors_effect:
        return posteriors_effect(args.posteriors_effect, [a for a in (sys.argv[1:] if argv is None else argv)])
    mlp = args.model != "resnet20"
    small = args.model == "small"
    steps = args.steps or (200 if mlp else 20)
    batch = args.batch_size or (100 if small else 500 if mlp else 128)
    num_data = args.num_data or (1_000 if small else 10_000 if mlp else 2_048)
    executions = {e.strip() for e in args.execution.split(",") if e.strip()}
    if not executions <= {"eager", "compiled"}:
        ap.error(f"--execution: a comma list of eager,compiled, got {args.execution!r}")
    chains = [int(c) for c in args.chains.split(",") if c]
    if args.quick:
        steps, args.rounds, num_data = 4, 2, min(num_data, 2 * batch if mlp else 256)
        batch = min(batch, 64)
        chains = [c for c in chains if c <= 8][:1]
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device")
    X, y, model = make_problem(num_data, model=args.model, device=args.device)
    lr = 1e-5 if mlp else 1e-7
    energy = sm.ModuleEnergy(model, "categorical", prior_std=1.0)
    centre = energy.initial_position()
    wanted = None if args.samplers == "all" else {s.strip().lower() for s in args.samplers.split(",")}

    def ours(sampler, gradient="minibatch", num_chains=1):
        def run(n_steps):
            sm.sample(
                energy,
                None,
                sampler,
                n_steps,
                data=(X, y),
                batch_size=batch,
                thin=n_steps,
                gradient=gradient,
                num_chains=num_chains,
                progress=False,
                on_blowup="ignore",
            )

        return synced(run, args.device)

    def stepped(sampler, execution, gradient="minibatch", num_chains=1):
        """A Run made once (compiled: traced at the warm-up call), stepped n iterations a call."""
        run = sm.Run(
            energy, None, sampler, data=(X, y), batch_size=batch, gradient=gradient, num_chains=num_chains,
            execution=execution,
        )  # fmt: skip

        def go(n_steps):
            for _ in run.iterate(n_steps):
                pass

        go.run = run  # type: ignore[attr-defined]
        return synced(go, args.device)

    samplers = {
        "SGLD": lambda: sm.SGLD(lr),
        "pSGLD": lambda: sm.PSGLD(lr),
        "SGHMC": lambda: sm.SGHMC(lr, friction=0.1),
        "SGNHT": lambda: sm.SGNHT(lr, a=0.1),
    }
    contenders = {
        "tuned hand loop (SGLD)": synced(TunedHandLoop(model, X, y, batch, lr, 0), args.device),
        "plain hand loop (SGLD)": synced(lambda n: hand_loop(model, X, y, batch, lr, n, 0), args.device),
    }
    per_chain = {}
    for name, make in samplers.items():
        if wanted is None or name.lower() in wanted:
            if "eager" in executions:
                contenders[f"structmc {name}"] = ours(make())
            if "compiled" in executions:
                contenders[f"structmc {name} Run eager"] = stepped(make(), "eager")
                contenders[f"structmc {name} compiled"] = stepped(make(), "compiled")
                if args.block > 1:
                    contenders[f"structmc {name} compiled, block {args.block}"] = stepped(
                        make(), Compiled(block=args.block)
                    )
    for name in ("SGLD", "SGHMC", "SGNHT"):
        if wanted is None or "cv" in wanted:
            if "eager" in executions:
                contenders[f"structmc {name}-CV"] = ours(samplers[name](), sm.ControlVariate(centre))
            if "compiled" in executions and name == "SGLD":
                contenders["structmc SGLD-CV compiled"] = stepped(
                    samplers[name](), "compiled", sm.ControlVariate(centre)
                )
    if (wanted is None or "cv" in wanted) and "eager" in executions:  # θ and θ̂ in one call
        contenders["structmc SGLD-CV stacked"] = ours(samplers["SGLD"](), sm.ControlVariate(centre, stacked=True))
    for C in chains:
        for name in ("SGLD", "SGHMC"):
            if wanted is None or name.lower() in wanted:
                if "eager" in executions:
                    key = f"structmc {name}, {C} chains"
                    contenders[key] = ours(samplers[name](), num_chains=C)
                    per_chain[key] = C
                if "compiled" in executions:
                    key = f"structmc {name} compiled, {C} chains"
                    contenders[key] = stepped(samplers[name](), "compiled", num_chains=C)
                    per_chain[key] = C
                    if args.block > 1:
                        key = f"structmc {name} compiled, block {args.block}, {C} chains"
                        contenders[key] = stepped(samplers[name](), Compiled(block=args.block), num_chains=C)
                        per_chain[key] = C
    if args.posteriors == "imported":
        import posteriors  # noqa: F401  (imported, no row: the import alone)
    elif args.posteriors == "auto":
        try:
            contenders["posteriors SGLD"] = synced(posteriors_loop(model, X, y, batch, lr, 0), args.device)
        except ImportError:
            print("posteriors is not installed (pip install posteriors): skipping that reference", file=sys.stderr)

    per_step = interleaved_seconds_per_step(contenders, steps, args.rounds, clock=args.clock)
    base = per_step["tuned hand loop (SGLD)"]
    rows = {}
    for k, t in per_step.items():
        C = per_chain.get(k, 1)
        rows[k] = {
            "ms_per_step": 1e3 * t,
            "chains": C,
            "ms_per_chain_step": 1e3 * t / C,
            "ratio_to_tuned_hand_loop": t / C / base,
        }
    if args.floor and args.device == "cuda":
        for k in list(rows):
            if "compiled" in k:
                floor = kernel_floor(contenders[k], steps)
                rows[k]["kernel_floor_ms_per_step"] = 1e3 * floor
                rows[k]["ratio_to_kernel_floor"] = per_step[k] / floor
        rows["tuned hand loop (SGLD)"]["kernel_floor_ms_per_step"] = 1e3 * kernel_floor(
            contenders["tuned hand loop (SGLD)"], steps
        )
    model_name = {"mlp": "MLP 784-50-50-10", "small": "10-parameter softmax regression"}.get(
        args.model, "ResNet-20 (BatchNorm)"
    )
    print(
        f"{model_name}, batch {batch}, N={num_data}, device {args.device}, {torch.get_num_threads()} threads, "
        f"{args.rounds} rounds x {steps} steps (median, {args.clock} clock), posteriors "
        f"{'imported' if sys.modules.get('posteriors') is not None else 'not imported'}"
    )
    print(f"{'contender':32s} {'ms/step':>9s} {'ms/chain-step':>14s} {'ratio':>7s}")
    for k, r in rows.items():
        floor = (
            f"  kernels {r['kernel_floor_ms_per_step']:.3f} ms"
            + (f" ({r['ratio_to_kernel_floor']:.2f}x)" if "ratio_to_kernel_floor" in r else "")
            if "kernel_floor_ms_per_step" in r
            else ""
        )
        print(
            f"{k:32s} {r['ms_per_step']:9.3f} {r['ms_per_chain_step']:14.3f} {r['ratio_to_tuned_hand_loop']:7.3f}{floor}"
        )
    print("ratio: per chain-step, to the tuned hand loop. CV variants evaluate two gradients per step.")
    write_json(
        args.json, {"model": args.model, "device": args.device, "batch_size": batch, "num_data": num_data, "rows": rows}
    )
    return rows


# a fresh process per measurement: an import cannot be undone in-process. "first" imports
# posteriors before torch and structmc (sys.argv[1] is the mode, the rest this script's options)
_CHILD = """
import runpy, sys
mode, script = sys.argv[1], sys.argv[2]
if mode == "off":
    sys.modules["posteriors"] = None  # as if not installed
else:
    import posteriors  # noqa: F401
sys.path.insert(0, script.rsplit("/", 1)[0])
sys.argv = [script] + sys.argv[3:]
runpy.run_path(script, run_name="__main__")
"""
EFFECT_MODES = {
    "posteriors off": ("off", "off"),
    "imported first": ("first", "imported"),
    "imported first + row": ("first", "auto"),
}


def posteriors_effect(repeats: int, argv: list[str]) -> dict:
    """Median ratio to the tuned hand loop of every row, posteriors off / imported first (no row) /
    imported first with its row, from ``repeats`` fresh processes each, alternating."""
    try:
        import importlib.util

        if importlib.util.find_spec("posteriors") is None:
            raise ImportError
    except ImportError:
        raise SystemExit("--posteriors-effect needs posteriors installed (pip install posteriors)") from None
    rest, skip = [], False
    for a in argv:  # this option, --posteriors and --json are the parent's
        if skip:
            skip = False
            continue
        if a in ("--posteriors-effect", "--posteriors", "--json"):
            skip = True
            continue
        if a.startswith(("--posteriors-effect=", "--posteriors=", "--json=")):
            continue
        rest.append(a)
    script = os.path.abspath(__file__)
    ratios: dict[str, dict[str, list[float]]] = {}
    hand_ms: dict[str, list[float]] = {m: [] for m in EFFECT_MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            for label, (prelude, mode) in EFFECT_MODES.items():
                out = os.path.join(tmp, f"{r}-{prelude}-{mode}.json")
                cmd = [
                    sys.executable,
                    "-W",
                    "ignore::FutureWarning",
                    "-c",
                    _CHILD,
                    prelude,
                    script,
                    *rest,
                    "--posteriors",
                    mode,
                    "--json",
                    out,
                ]
                print(f"[{r + 1}/{repeats}] {label}", file=sys.stderr, flush=True)
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                with open(out) as f:
                    rows = json.load(f)["rows"]
                hand_ms[label].append(rows["tuned hand loop (SGLD)"]["ms_per_step"])
                for k, v in rows.items():
                    ratios.setdefault(k, {m: [] for m in EFFECT_MODES})[label].append(v["ratio_to_tuned_hand_loop"])
    print(f"ratio to the tuned hand loop, median of {repeats} fresh processes per column")
    print(f"{'contender':32s}" + "".join(f" {m:>21s}" for m in EFFECT_MODES))
    print(f"{'tuned hand loop ms/step':32s}" + "".join(f" {statistics.median(hand_ms[m]):21.3f}" for m in EFFECT_MODES))
    for k, by in ratios.items():
        print(
            f"{k:32s}"
            + "".join(f" {statistics.median(by[m]):21.3f}" if by[m] else f" {'-':>21s}" for m in EFFECT_MODES)
        )
    return {k: {m: statistics.median(v) if v else None for m, v in by.items()} for k, by in ratios.items()}


if __name__ == "__main__":
    main()
