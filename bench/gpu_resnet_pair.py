"""The structured paper's headline pair on one GPU, in calls of at most ten minutes (issue 37).

``ssgmcmc-resnet``'s ``converged`` FMNIST pair — pSGLD against Sd-pSGLD (ρ = 0.5, K = 2) on
ResNet-20, 300 epochs — at the authors' temperature T = 1/2, each iteration compiled
(``execution="compiled"``: a CUDA graph on the GPU). One call samples for at most ``--limit``
seconds and stops; the run folder (``--out``, under the git-ignored ``.gpuscratch/`` by default,
so that the device machine keeps it between calls while it stays warm) holds crash-consistent
checkpoints every ``--checkpoint-seconds``, and the next call continues from the last one
(``resume=True``). When both runs are done the experiment writes ``report.md`` and
``report.json`` there; copy them to ``$OUT`` with ``--copy-to``.

On the device machine (FMNIST's four idx files in ``.gpuscratch/data``, carried with the call)::

    python bench/gpu_resnet_pair.py --limit 540 --copy-to "$OUT"

On a CPU, the same path on the ``tiny`` preset's stand-in data (the check that the script runs)::

    python bench/gpu_resnet_pair.py --preset tiny --device cpu --out /tmp/pair --execution eager

Exit status: 0 when the pair is finished (report written), 3 when the time limit stopped it
(call again), anything else an error.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import signal
import sys
import time
from pathlib import Path

UNFINISHED = 3


class _OutOfTime(BaseException):
    """Raised by the alarm: not an Exception, so no handler on the way swallows it."""


def config(args):
    from structmc_papers import ssgmcmc_resnet as ex

    preset = ex.PRESETS[args.preset]
    changes = dict(temperatures=(0.5,), execution=args.execution, checkpoint_seconds=args.checkpoint_seconds)
    if args.preset != "tiny":  # the paper's files (tiny runs on its stand-in, and says so)
        changes.update(data="files", data_dir=args.data)
    return dataclasses.replace(preset, **changes)


def probe(cfg, device: str, steps: int) -> int:
    """ms a step of each run of the pair, eager and compiled (warmed up: the compile is not timed),
    on random images of FMNIST's shapes (60,000 of 1 x 28 x 28): does the pair fit a device call?"""
    import torch

    from structmc import Run
    from structmc_papers import ssgmcmc_resnet as ex

    n, batch = 60_000, cfg.batch_size or 500
    per_epoch = n // batch
    total_steps = int(round(cfg.epochs * per_epoch))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, 28, 28, generator=g).to(device)
    y = torch.randint(10, (n,), generator=g).to(device)
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    projected = {"eager": 0.0, "compiled": 0.0}
    for method, rho, lr in cfg.runs:
        for execution in ("eager", "compiled"):
            base = ex.make_energy(cfg, n, 1, device)
            energy = ex.make_energy_for(method, rho, base, cfg, total_steps)
            run = Run(
                energy,
                base.initial_position(),
                ex.make_sampler(method, lr, cfg, n, cfg.temperatures[0]),
                data=(x, y),
                batch_size=batch,
                seed=cfg.seed,
                execution=execution,
            )
            t0 = time.perf_counter()
            for _ in run.iterate(3):  # the compile (and the first CUDA-graph capture)
                pass
            sync()
            warm = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in run.iterate(steps):
                pass
            sync()
            ms = 1e3 * (time.perf_counter() - t0) / steps
            projected[execution] += ms * total_steps / 1e3
            fallback = getattr(run.execution, "fallback", "")
            print(
                f"probe {method:9s} {execution:8s} {ms:8.3f} ms a step (first 3 steps {warm:6.1f} s)"
                + (f"  FALLBACK: {fallback}" if fallback else ""),
                flush=True,
            )
    for execution, seconds in projected.items():
        print(f"probe: the pair's {total_steps} + {total_steps} steps, {execution}: {seconds:.0f} s of sampling")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="converged", help="converged (default) or tiny (a CPU check)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--execution", default="compiled", choices=("compiled", "eager"))
    ap.add_argument("--out", default=".gpuscratch/resnet-pair", help="the run folder (resumed when it exists)")
    ap.add_argument("--data", default=".gpuscratch/data", help="folder with FMNIST's idx files")
    ap.add_argument("--limit", type=float, default=540.0, help="seconds of this call before it stops (resumable)")
    ap.add_argument("--checkpoint-seconds", type=float, default=120.0)
    ap.add_argument("--copy-to", help="copy report.md / report.json / the figures here when finished")
    ap.add_argument("--dry-run", action="store_true", help="print the configuration and stop")
    ap.add_argument(
        "--probe",
        type=int,
        metavar="STEPS",
        help="time STEPS iterations of each run of the pair, eager and compiled, on stand-in data of FMNIST's "
        "shapes, print ms a step and the pair's projected sampling time, and stop (no run folder)",
    )
    args = ap.parse_args(argv)
    cfg = config(args)
    if args.dry_run:
        print(cfg)
        return 0
    if args.probe:
        return probe(cfg, args.device, args.probe)
    from structmc_papers import ssgmcmc_resnet as ex

    def out_of_time(signum, frame):
        raise _OutOfTime

    signal.signal(signal.SIGALRM, out_of_time)
    signal.setitimer(signal.ITIMER_REAL, args.limit)
    t0 = time.perf_counter()
    try:
        ex.run(cfg, args.out, device=args.device, resume=True)
    except _OutOfTime:
        print(
            f"gpu_resnet_pair: stopped after {time.perf_counter() - t0:.0f} s (--limit); the last checkpoint in "
            f"{args.out} resumes with the same command",
            file=sys.stderr,
        )
        return UNFINISHED
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print(f"gpu_resnet_pair: finished in {time.perf_counter() - t0:.0f} s; report in {args.out}", file=sys.stderr)
    if args.copy_to:
        dest = Path(args.copy_to)
        dest.mkdir(parents=True, exist_ok=True)
        for f in Path(args.out).iterdir():
            if f.is_file() and f.suffix in (".md", ".json", ".png", ".csv"):
                shutil.copy2(f, dest / f.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
