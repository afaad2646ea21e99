"""What one ``sample()`` call costs besides its steps (issue 37 §2: set-up <= 2 ms).

The set-up of a call is the median time of a one-step ``sample()`` minus the median time of
one step of a warmed-up ``Run`` on the same target, both measured in interleaved rounds on the
thread clock (one thread). Also the parts, each alone: ``Run()`` (checks, the energy's copy,
the stream, the sampler's state), the copy of the energy (``with_num_data``), the data checks
(``check_data``: the module on four rows, twice) and the energy's fingerprint (taken only when
a run folder asks for the settings).

    python bench/bench_setup.py                 # MLP 784-50-50-10, 10,000 x 784 floats
    python bench/bench_setup.py --model small   # 10-parameter softmax regression
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from _timing import write_json
from bench_samplers import make_problem

import structmc as sm
from structmc import fingerprint


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("mlp", "small"), default="mlp")
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", sm.diagnostics.health.ConvergenceWarning)
    num_data, batch = (10_000, 500) if args.model == "mlp" else (1_000, 100)
    X, y, model = make_problem(num_data, model=args.model)
    energy = sm.ModuleEnergy(model, "categorical", prior_std=1.0)
    copy = energy.with_num_data(num_data)
    run = sm.Run(energy, None, sm.SGLD(1e-7), data=(X, y), batch_size=batch)

    def one_step():
        for _ in run.iterate(1):
            pass

    parts = {
        "sample(), one step": lambda: sm.sample(
            energy, None, sm.SGLD(1e-7), 1, data=(X, y), batch_size=batch, progress=False, on_blowup="ignore"
        ),
        "a warmed-up Run's step": one_step,
        "Run()": lambda: sm.Run(energy, None, sm.SGLD(1e-7), data=(X, y), batch_size=batch),
        "the energy's copy": lambda: energy.with_num_data(num_data),
        "the data checks": lambda: copy.check_data((X, y)),
        "the energy's fingerprint (run folders only)": lambda: fingerprint.energy_fingerprint(copy),
    }
    times: dict[str, list[float]] = {k: [] for k in parts}
    for f in parts.values():
        f()
    for _ in range(args.rounds):
        for name, f in parts.items():
            t0 = time.thread_time()
            f()
            times[name].append(time.thread_time() - t0)
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    ms["set-up of a sample() call"] = ms["sample(), one step"] - ms["a warmed-up Run's step"]
    print(f"{args.model}: {num_data} points, batch {batch}, one thread, median of {args.rounds} (thread clock)")
    for name, value in ms.items():
        print(f"{name:45s} {value:7.2f} ms")
    write_json(args.json, ms)
    return ms


if __name__ == "__main__":
    main()
