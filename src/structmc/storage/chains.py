"""A chain saved on its own (``chain.pt``, ``chain.json``, ``space.json``), or read from a run folder."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import torch

from ..chain import Chain
from ..space import ParamSpace
from .atomic import _atomic_write_bytes
from .folder import RunFolder
from .layout import LOCK, MANIFEST, RUN_JSON

CHAIN_FILE = "chain.pt"
# what marks a folder that structmc writes and verifies (a run's, a tuner's): save_chain stays out
_VERIFIED_MARKERS = (RUN_JSON, MANIFEST, LOCK, "samples", "progress.pt")


def save_chain(chain: Chain, path: str | Path) -> None:
    """Write ``chain.pt`` (tensors) and ``chain.json`` (config) into the folder ``path``, each
    atomically. A run folder (``sample(..., out_dir=...)``) or a tuner's is refused: its draws
    are verified against its manifest, and a ``chain.pt`` beside them would be another chain."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"save_chain: {path} is a file; pass a folder")
    if path.is_dir():
        held = [n for n in _VERIFIED_MARKERS if (path / n).exists()]
        if held:
            raise ValueError(
                f"save_chain: {path} is a structmc run or tuning folder (it holds {', '.join(held)}): a chain "
                "saved there would stand beside that run's verified draws; pass another folder (a run folder "
                "already holds its chain: load_chain(path) reads it)"
            )
    path.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(
        {
            "samples": chain.samples,
            "draw_steps": chain.draw_steps,
            "info": chain.info,
            "space": [(i.name, i.shape) for i in chain.space.params],
        },
        buf,
    )
    _atomic_write_bytes(buf.getvalue(), path / CHAIN_FILE)
    _atomic_write_bytes(json.dumps(chain.config, indent=2, default=str).encode(), path / "chain.json")
    _atomic_write_bytes(json.dumps(chain.space.to_config()).encode(), path / "space.json")


def load_chain(path: str | Path) -> Chain:
    """A chain saved by :func:`save_chain`, or one assembled from a run folder's chunks (each
    checked against the folder's manifest, ``run.json`` included: a missing, truncated or
    altered file is an error naming it). A run folder is always read as one: a ``chain.pt``
    found in it is ignored, with a warning."""
    path = Path(path)
    run_folder = (path / RUN_JSON).exists() or (path / MANIFEST).exists()
    if (path / CHAIN_FILE).exists():
        if not run_folder:
            return _load_saved(path)
        warnings.warn(
            f"{path / CHAIN_FILE} is ignored: {path} is a run folder, whose draws (checked against its "
            f"manifest) are loaded instead; move {CHAIN_FILE} (and chain.json, space.json) elsewhere",
            UserWarning,
            stacklevel=2,
        )
    return RunFolder(path).load_chain()


def _load_saved(path: Path) -> Chain:
    file = path / CHAIN_FILE
    try:
        d = torch.load(file, weights_only=True)
        config = json.loads((path / "chain.json").read_text()) if (path / "chain.json").exists() else {}
        layout = path / "space.json"  # layer records (older folders: layers from the names)
        space = ParamSpace.from_config(json.loads(layout.read_text()) if layout.exists() else d["space"])
    except Exception as err:  # truncated, not a torch file, bad JSON
        raise ValueError(f"{path}: unreadable saved chain ({type(err).__name__}: {err})") from err
    return Chain(d["samples"], space, d["draw_steps"], d["info"], config)
