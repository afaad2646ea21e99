"""Side-by-side timing shared by the benchmark scripts."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


def interleaved_seconds_per_step(
    contenders: dict[str, Callable[[int], None]],
    steps: int,
    rounds: int,
    warmup: int = 3,
    rewarm: int = 1,
    clock: str = "wall",
) -> dict[str, float]:
    """Median seconds per step of each ``run(n_steps)``, measured in interleaved rounds so
    that machine noise hits every contender alike; one warm-up call each first, and an
    untimed ``run(rewarm)`` right before every timed block, and the order rotated every round
    (with a fixed order, the tuned hand loop timed right after the 32-chain row of
    bench_samplers.py looked 12-20% slower than in isolation). ``clock="thread"`` times with
    ``time.thread_time`` (CPU seconds of this thread: on a shared machine, time spent waiting
    for a core is not counted; meaningful with ``torch.set_num_threads(1)`` on CPU only)."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}")
    now = CLOCKS[clock]
    for run in contenders.values():
        run(warmup)
    times: dict[str, list[float]] = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds):
        # rotate the order every round: each contender follows a different one each time, so
        # no contender always inherits the allocator and cache state a heavy one leaves behind
        for name in names[r % len(names) :] + names[: r % len(names)]:
            run = contenders[name]
            if rewarm:
                run(rewarm)
            t0 = now()
            run(steps)
            times[name].append((now() - t0) / steps)
    return {k: statistics.median(v) for k, v in times.items()}


def write_json(path: str | None, rows: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=2)
