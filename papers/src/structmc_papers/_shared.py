"""Pieces every experiment's ``run`` uses: the data folder, the thread count, the versions
and the JSON form of a report, a progress logger and matplotlib (headless)."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import Tensor

from structmc.run import restored_globals  # (defined here until it moved into the library)

#: set (to anything but ``""`` / ``"0"``) to ignore a source checkout's ``../shared/data``, as on a
#: fresh clone (CI runs the data-touching tests so, to prove they skip or use stand-ins)
ENV_NO_SHARED = "STRUCTMC_NO_SHARED_DATA"


def checkout_data_dir() -> Path | None:
    """The project's reference copies, ``<checkout>/../shared/data``, when this package runs
    from a source checkout (``<checkout>/papers/src/structmc_papers``, the companion's folder
    beside the library's ``pyproject.toml``; or ``<root>/src/structmc_papers`` beside a
    ``pyproject.toml``) that has them and ``$STRUCTMC_NO_SHARED_DATA`` is not set; else
    ``None`` (an installed package)."""
    if os.environ.get(ENV_NO_SHARED, "") not in ("", "0"):
        return None
    package = Path(__file__).resolve().parents[0]  # .../structmc_papers
    checkout = package.parent.parent
    if package.parent.name != "src" or not (checkout / "pyproject.toml").is_file():
        return None
    if checkout.name == "papers" and (checkout.parent / "pyproject.toml").is_file():
        checkout = checkout.parent  # the repository that holds the library and its companion
    shared = checkout.parent / "shared" / "data"
    return shared if shared.is_dir() else None


def default_data_dir() -> Path:
    """Where experiments look for data files: ``$STRUCTMC_DATA`` if set; else, in a source
    checkout, its ``../shared/data`` if present (:func:`checkout_data_dir`); else the library's
    own folder, :func:`structmc.data.default_cache_dir` (``$STRUCTMC_CACHE`` or
    ``~/.cache/structmc``), where the loaders download to. The loaders search the cache after
    this folder in any case, so files downloaded once are found from either."""
    env = os.environ.get("STRUCTMC_DATA")
    if env:
        return Path(env).expanduser()
    shared = checkout_data_dir()
    if shared is not None:
        return shared
    from structmc.data.files import default_cache_dir

    return default_cache_dir()


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


def restores_globals(run: Callable) -> Callable:
    """Decorator for an experiment's ``run``: the call is made inside :func:`restored_globals`,
    so a run that fails midway (or is interrupted) leaves no handler, thread count, RNG state or
    warnings filter of its own behind, and a finished one leaves the caller's as they were."""

    @functools.wraps(run)
    def wrapper(*args, **kwargs):
        with restored_globals():
            return run(*args, **kwargs)

    setattr(wrapper, "restores_globals", True)  # noqa: B010  (a mark tests/experiments/test_shared.py reads)
    return wrapper


def versions() -> dict:
    """Versions and machine facts for a report."""
    from structmc import __version__

    out = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "structmc": __version__,
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
    }
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


CHECKPOINT = "checkpoint.pt"
RESULT = "result.json"


def resumable_iterate(
    run,
    steps: int,
    folder: Path | None,
    *,
    resume: bool = False,
    every: int = 1_000,
    every_seconds: float | None = None,
    carry: dict | None = None,
    progress: bool | None = False,
    desc: str = "",
):
    """``run.iterate`` up to iteration ``steps``, checkpointed into ``folder`` by the library's
    one :class:`~structmc.checkpointing.Checkpointer` (the format :func:`structmc.sample` writes:
    ``checkpoint-<iteration>.pt`` listed with its digest in ``manifest.json``; the folder locked
    while it runs).

    Every ``every`` iterations (and, with ``every_seconds``, only when that many seconds have
    passed since the last checkpoint) and after the last one, ``run.state_dict()`` (sampler state,
    generator, minibatch stream, structured history, a module's BatchNorm statistics),
    ``run.settings()`` and ``carry`` (the caller's accumulators: traces, kept draws — updated
    in place by the loop body, carried by a :class:`~structmc.recorders.Carry` recorder) are
    saved. With ``resume=True`` a checkpoint
    found there (also one written before, as ``checkpoint.pt``) is loaded first (refused when
    the run's settings differ), ``carry`` is restored in place (its lists keep their identity)
    and the loop continues at the next iteration, so the caller ends with exactly what an
    uninterrupted loop gives (tensors in ``carry`` come back on the CPU). Without ``folder`` it
    is ``run.iterate(steps)``. ``progress``: a tqdm bar (``None``: when stderr is a terminal)
    labelled ``desc``.
    """
    from structmc.checkpointing import Checkpointer
    from structmc.recorders import Carry
    from structmc.recording import Progress
    from structmc.storage import RunFolder

    carry = {} if carry is None else carry
    checkpointer = None
    if folder is not None:
        store = RunFolder(folder)
        store.path.mkdir(parents=True, exist_ok=True)
        store.lock()
        checkpointer = Checkpointer(
            store, run.settings(), every=every, every_seconds=every_seconds, recorders={"carry": Carry(carry)}
        )
        if resume:
            try:
                checkpointer.load(run, steps)
            except BaseException:
                store.unlock()
                raise
        else:
            _drop_checkpoints(store.path)
    bar = Progress(progress, steps, run.iteration, desc)
    try:
        for t, state, info in run.iterate(max(0, steps - run.iteration)):
            bar.update(t, info)
            yield t, state, info
            if checkpointer is not None:
                checkpointer.step(run, t)
                if t == steps:
                    checkpointer.save(run)
                    assert folder is not None  # a checkpointer only with a folder
                    (Path(folder) / CHECKPOINT).unlink(missing_ok=True)  # one written before, now replaced
    finally:
        bar.close()
        if checkpointer is not None:
            checkpointer.folder.unlock()
    run.check_finite()


def _drop_checkpoints(folder: Path) -> None:
    """A run starting afresh in ``folder``: remove the checkpoints and manifest of an earlier one
    (its result file, if any, is read only on resume)."""
    from structmc.storage import MANIFEST

    for f in folder.glob("checkpoint*.pt"):
        f.unlink()
    (folder / MANIFEST).unlink(missing_ok=True)


def load_result(folder: Path | None, resume: bool) -> dict | None:
    """The finished run's ``result.json`` in ``folder`` when resuming, else ``None``."""
    import json

    if folder is None or not resume or not (Path(folder) / RESULT).exists():
        return None
    return json_floats(json.loads((Path(folder) / RESULT).read_text()))


def json_floats(x):
    """Undo :func:`jsonable`'s strings for the non-finite floats (``"inf"``, ``"-inf"``, ``"nan"``)."""
    if isinstance(x, dict):
        return {k: json_floats(v) for k, v in x.items()}
    if isinstance(x, list):
        return [json_floats(v) for v in x]
    return float(x) if x in ("inf", "-inf", "nan") else x


def save_result(folder: Path | None, result: dict) -> None:
    """Write a finished run's result (``load_result`` reads it back on ``--resume``) and drop
    its checkpoint, which is no longer needed."""
    import json

    if folder is None:
        return
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (RESULT + ".tmp")
    tmp.write_text(json.dumps(jsonable(result), indent=1))
    tmp.replace(folder / RESULT)
    _drop_checkpoints(folder)


# -- run temperatures (issue 26 §2) ------------------------------------------------------------
#: the pSGLD authors' Matlab code (``SGLD_RMSprop.m``) divides the posterior's noise standard
#: deviation by √N: an effective temperature 1/N in the library's convention
AUTHORS_TEMPERATURE_1_OVER_N = "1/N"


def resolve_temperature(temperature: float | str, num_data: int) -> float:
    """``"1/N"`` -> 1 / ``num_data``; a positive number stays as it is; anything else is
    refused by name."""
    if temperature == AUTHORS_TEMPERATURE_1_OVER_N:
        return 1.0 / num_data
    if isinstance(temperature, str) or not float(temperature) > 0:
        raise ValueError(
            f"a temperature must be a positive number or {AUTHORS_TEMPERATURE_1_OVER_N!r}, got {temperature!r}"
        )
    return float(temperature)


def temperature_label(temperature: float | str) -> str:
    """The report's name of a run setting: ``"T = 1"``, ``"T = 1/N"``, ``"T = 0.5"``."""
    return f"T = {temperature}" if isinstance(temperature, str) else f"T = {temperature:g}"


def paper_setting_of(settings, authors: float | str) -> str | None:
    """The setting whose numbers are tallied against the paper's: ``None`` with one setting (it
    is the only one), else the authors' temperature's label when it ran, else the first run
    (``settings``: the labels, in run order)."""
    labels = list(settings)
    if len(labels) < 2:
        return None
    label = temperature_label(authors)
    return label if label in labels else labels[0]


def temperature_suffix(temperature: float, num_data: int) -> str:
    """A run folder's suffix for a temperature: none for T = 1 (the folders written before
    the temperature option), ``-T1overN`` for 1/N, ``-T<value>`` otherwise."""
    if temperature == 1.0:
        return ""
    return "-T1overN" if temperature == 1.0 / num_data else f"-T{temperature:g}"


def check_temperatures(temperatures) -> None:
    """Refuse an empty or bad ``Config.temperatures`` before any data is read."""
    if not temperatures:
        raise ValueError("Config.temperatures is empty: give at least one, e.g. (1.0, '1/N')")
    for t in temperatures:
        resolve_temperature(t, 1)
