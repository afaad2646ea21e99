"""What runs inside a task of a :mod:`structmc.executors` adapter: the handles of shared objects
and :func:`resolve` (one load per worker process), and :func:`_pinned` (torch's thread count for
the task); plus the small helpers the adapters share."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class SharedFile:
    """Handle of an object shared by :meth:`ProcessPoolExecutor.share`: a key and a file."""

    key: str
    path: str

    def load(self):
        return torch.load(self.path, weights_only=False, mmap=True)


@dataclass(frozen=True)
class SharedRayObject:
    """Handle of an object shared by :meth:`RayExecutor.share`. The reference is wrapped so
    that Ray does not resolve it before the call (it would unpickle the object for every
    task); :func:`resolve` gets it once per worker instead."""

    ref: Any

    @property
    def key(self) -> str:
        return self.ref.hex()

    def load(self):
        import ray

        return ray.get(self.ref)


# The one piece of worker state: shared objects already loaded in this process, by key.
_RESOLVED: dict[str, Any] = {}


def resolve(x):
    """Inside a task: the object behind a handle from ``share``, loaded once per worker
    process and then cached; anything else is returned unchanged (serially the handle is the
    object itself, and Dask hands the object to the task in place of its future)."""
    if isinstance(x, (SharedFile, SharedRayObject)):
        if x.key not in _RESOLVED:
            _RESOLVED[x.key] = x.load()
        return _RESOLVED[x.key]
    return x


def _pinned(threads: int | None, fn: Callable, *args):
    """Run ``fn(*args)`` with ``threads`` torch intra-op threads (``None``: as they are),
    restoring the previous count afterwards."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return fn(*args)
    finally:
        if threads is not None:
            torch.set_num_threads(before)


def _default_workers(threads_per_task: int | None) -> int:
    """One task per ``threads_per_task`` CPUs."""
    return max(1, (os.cpu_count() or 1) // max(1, threads_per_task or 1))


def _import_optional(module: str, extra: str, user: str):
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f'{user} needs the optional dependency {module!r}: pip install "structmc[{extra}]"') from err
