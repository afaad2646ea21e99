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
    from structmc.experiments import ssgmcmc_resnet as ex

    preset = ex.PRESETS[args.preset]
    changes = dict(temperatures=(0.5,), execution=args.execution, checkpoint_seconds=args.checkpoint_seconds)
    if args.preset != "tiny":  # the paper's files (tiny runs on its stand-in, and says so)
        changes.update(data="files", data_dir=args.data)
    return dataclasses.replace(preset, **changes)


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
    args = ap.parse_args(argv)
    cfg = config(args)
    if args.dry_run:
        print(cfg)
        return 0
    from structmc.experiments import ssgmcmc_resnet as ex

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
