"""Vectorised diagnostics vs per-parameter reference loops, and KSD vs its matrix products.

1. Mixing: 4 chains x 5,000 draws x 10,000 parameters (AR(1) draws, float32 like BNN chains).
   structmc's bulk/tail ESS, rank R-hat and Sokal IAC (each alone, and the one-pass
   ``mixing``) against ArviZ ``ess``/``rhat`` and emcee ``integrated_time``, timed in the same
   run. The reference loops run over one parameter at a time, so they are timed on a subset of
   parameters and extrapolated linearly to all of them (the output says so).
2. KSD at n = 2,000, d = 10,000 (float32) against the time of the three Gram matrix products
   it is built from (``X Xᵀ``, ``S Sᵀ``, ``S Xᵀ``); target ratio <= 1.5.

    python bench/bench_diagnostics.py            # a few minutes on 2 cores
    python bench/bench_diagnostics.py --quick    # smaller sizes, ~20 s
    python bench/bench_diagnostics.py --device cuda   # structmc on GPU (references stay on CPU)
    python bench/bench_diagnostics.py --ksd-d 100000 --skip-mixing   # KSD at n = 2,000, d = 10^5
    python bench/bench_diagnostics.py --skip-ksd      # only the mixing diagnostics
"""

from __future__ import annotations

import argparse
import math
import platform
import resource
import time
import warnings

import torch

from structmc.diagnostics import ess_bulk, ess_tail, integrated_time, ksd, mixing, rhat


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def best_time(fn, repeats: int, device: str = "cpu") -> float:
    """Best wall time of ``repeats`` calls (the least disturbed by other processes)."""
    best = math.inf
    for _ in range(repeats):
        _sync(device)
        t = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return best


def ar1_draws(C: int, D: int, P: int, seed: int = 0) -> torch.Tensor:
    """AR(1) chains with φ spread over [0, 0.9] across parameters, float32."""
    g = torch.Generator().manual_seed(seed)
    phi = torch.linspace(0.0, 0.9, P)
    x = torch.empty(C, D, P)
    x[:, 0] = torch.randn(C, P, generator=g) / torch.sqrt(1 - phi**2)
    for t in range(1, D):
        x[:, t] = phi * x[:, t - 1] + torch.randn(C, P, generator=g)
    return x


def bench_mixing(C: int, D: int, P: int, subset: int, device: str, repeats: int) -> list[tuple]:
    x = ar1_draws(C, D, P)
    xd = x.to(device)
    rows = []
    ours = {
        "ESS bulk": lambda: ess_bulk(xd),
        "ESS tail": lambda: ess_tail(xd),
        "R-hat (rank)": lambda: rhat(xd),
        "IAC (Sokal)": lambda: integrated_time(xd),
        "all four, one pass": lambda: mixing(xd),
    }
    ref = {}
    sub = x[:, :, :subset].double().numpy()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import arviz as az
        ds = az.convert_to_dataset(sub)
        ref["ESS bulk"] = ("arviz.ess(bulk)", lambda: az.ess(ds, method="bulk"))
        ref["ESS tail"] = ("arviz.ess(tail)", lambda: az.ess(ds, method="tail"))
        ref["R-hat (rank)"] = ("arviz.rhat(rank)", lambda: az.rhat(ds))
    except ImportError:
        print("arviz not installed: no ArviZ reference")
    try:
        import emcee

        subt = sub.transpose(1, 0, 2).copy()
        ref["IAC (Sokal)"] = (
            "emcee.integrated_time",
            lambda: emcee.autocorr.integrated_time(subt, c=5, tol=0, quiet=True),
        )
    except ImportError:
        print("emcee not installed: no emcee reference")
    scale = P / subset
    total_ref = 0.0
    for name, fn in ours.items():
        fn()  # warm-up (allocations, FFT plans)
        t = best_time(fn, repeats, device)
        if name in ref:
            label, rfn = ref[name]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rt = best_time(rfn, repeats) * scale
            total_ref += rt
            rows.append((name, t, label, rt, rt / t))
        elif name == "all four, one pass" and len(ref) == 4:
            rows.append((name, t, "sum of the four", total_ref, total_ref / t))
        else:
            rows.append((name, t, "-", float("nan"), float("nan")))
    return rows


def bench_ksd(n: int, d: int, device: str, repeats: int) -> tuple[float, float]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g).to(device)
    s = (-x + 0.1 * torch.randn(n, d, generator=g).to(device)).contiguous()

    def grams():
        x @ x.T
        s @ s.T
        s @ x.T

    grams()
    t_gram = best_time(grams, repeats, device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if device.startswith("cuda") else 0
    ksd(x, s)
    t_ksd = best_time(lambda: ksd(x, s), repeats, device)
    if device.startswith("cuda"):
        extra = (torch.cuda.max_memory_allocated() - base) / 2**30
        mem = (
            f"peak GPU memory of ksd() beyond its inputs: {extra:.2f} GiB (inputs {2 * x.numel() * 4 / 2**30:.2f} GiB)"
        )
    else:
        mem = (
            f"peak RSS of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB "
            f"(inputs {2 * x.numel() * 4 / 2**30:.2f} GiB)"
        )
    return t_ksd, t_gram, mem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--subset", type=int, default=None, help="parameters timed for the reference loops")
    ap.add_argument("--ksd-d", type=int, default=None, help="KSD dimension (default 10,000)")
    ap.add_argument("--skip-mixing", action="store_true", help="only the KSD part")
    ap.add_argument("--skip-ksd", action="store_true", help="only the mixing part")
    args = ap.parse_args()
    if args.quick:
        C, D, P, subset, n, d, repeats = 4, 1000, 1000, 50, 500, 2000, 2
    else:
        C, D, P, subset, n, d, repeats = 4, 5000, 10_000, 100, 2000, 10_000, 1
    subset = min(args.subset or subset, P)
    d = args.ksd_d or d
    print(
        f"structmc diagnostics benchmark | torch {torch.__version__} | {platform.processor() or platform.machine()} "
        f"| {torch.get_num_threads()} threads | device {args.device}"
    )
    if not args.skip_mixing:
        print(
            f"\nMixing diagnostics on {C} chains x {D} draws x {P} parameters (float32). Reference loops run "
            f"one parameter at a time in float64: timed on {subset} parameters and extrapolated x{P / subset:g}."
        )
        rows = bench_mixing(C, D, P, subset, args.device, repeats)
        print(f"{'quantity':<20} {'structmc s':>11} {'reference':<22} {'ref s (extrap.)':>16} {'speed-up':>9}")
        for name, t, label, rt, ratio in rows:
            print(f"{name:<20} {t:>11.2f} {label:<22} {rt:>16.2f} {ratio:>8.1f}x")
    if args.skip_ksd:
        return
    t_ksd, t_gram, mem = bench_ksd(n, d, args.device, max(repeats, 2))
    print(f"\nKSD (IMQ, V-statistic) at n = {n}, d = {d} (float32):")
    print(f"{'ksd()':<34} {t_ksd:>8.3f} s")
    print(f"{'X Xᵀ + S Sᵀ + S Xᵀ (torch matmul)':<34} {t_gram:>8.3f} s")
    print(f"{'ratio (target <= 1.5)':<34} {t_ksd / t_gram:>8.2f}")
    print(mem)


if __name__ == "__main__":
    main()
