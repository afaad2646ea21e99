"""Side-by-side timing shared by the benchmark scripts."""

from __future__ import annotations

import json
import statistics
import time
from typing import Callable


def interleaved_seconds_per_step(contenders: dict[str, Callable[[int], None]], steps: int, rounds: int,
                                 warmup: int = 3) -> dict[str, float]:
    """Median seconds per step of each ``run(n_steps)``, measured in interleaved rounds so
    that machine noise hits every contender alike; one warm-up call each first."""
    for run in contenders.values():
        run(warmup)
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            t0 = time.perf_counter()
            run(steps)
            times[name].append((time.perf_counter() - t0) / steps)
    return {k: statistics.median(v) for k, v in times.items()}


def write_json(path: str | None, rows: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=2)
