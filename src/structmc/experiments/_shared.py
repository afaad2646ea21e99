"""Pieces every experiment's ``run`` uses: the data folder, the thread count, the versions
and the JSON form of a report, a progress logger and matplotlib (headless)."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable, Mapping

import torch
from torch import Tensor


def default_data_dir() -> Path | None:
    """``$STRUCTMC_DATA`` if set, else ``../shared/data`` next to the repository if it exists."""
    env = os.environ.get("STRUCTMC_DATA")
    if env:
        return Path(env).expanduser()
    shared = Path(__file__).resolve().parents[3].parent / "shared" / "data"
    return shared if shared.is_dir() else None


@contextlib.contextmanager
def threads(n: int | None):
    """``torch.set_num_threads(n)`` inside (``None``: unchanged), the previous count restored after."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        if n is not None:
            torch.set_num_threads(before)


def versions() -> dict:
    """Versions and machine facts for a report."""
    from .. import __version__

    out = {"python": sys.version.split()[0], "torch": torch.__version__, "structmc": __version__,
           "platform": platform.platform(), "torch_threads": torch.get_num_threads()}
    for mod in ("numpy", "matplotlib"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:  # pragma: no cover
            out[mod] = None
    return out


def jsonable(x, convert: Callable | None = None):
    """A JSON-ready copy: tensors to lists, inf/NaN to strings (JSON has neither), mappings
    and sequences recursively, objects with ``to_dict()`` by it; ``convert(x)`` first handles
    what the caller knows (return ``NotImplemented`` to pass)."""
    if convert is not None:
        out = convert(x)
        if out is not NotImplemented:
            return jsonable(out, convert)
    if isinstance(x, Tensor):
        return jsonable(x.tolist(), convert)
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    if isinstance(x, Mapping):
        return {str(k): jsonable(v, convert) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v, convert) for v in x]
    if hasattr(x, "to_dict") and callable(x.to_dict):
        return jsonable(x.to_dict(), convert)
    return x


def progress_log(name: str, progress: bool | None) -> Callable[[str], None] | None:
    """``log(msg)`` printing ``[name  elapsed s] msg`` to stderr, or ``None`` when progress is
    off (``None``: on when stderr is a terminal)."""
    show = sys.stderr.isatty() if progress is None else bool(progress)
    if not show:
        return None
    t0 = time.perf_counter()
    return lambda msg: print(f"[{name} {time.perf_counter() - t0:7.1f} s] {msg}", file=sys.stderr, flush=True)


def save_cache(obj, path: Path) -> bool:
    """``torch.save`` to ``path`` through a temporary file (a crash never leaves half a file);
    ``False`` when the folder is read-only (a cache that cannot be written is not an error)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(obj, tmp)
        tmp.replace(path)
    except OSError:
        return False
    return True


def pyplot():
    """``matplotlib.pyplot`` on the headless Agg backend, or ``None`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return None
    return plt
