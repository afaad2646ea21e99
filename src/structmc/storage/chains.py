"""A chain saved on its own (``chain.pt``, ``chain.json``, ``space.json``), or read from a run folder."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..chain import Chain
from ..space import ParamSpace
from .folder import RunFolder


def save_chain(chain: Chain, path: str | Path) -> None:
    """Write ``chain.pt`` (tensors) and ``chain.json`` (config) into the folder ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "samples": chain.samples,
            "draw_steps": chain.draw_steps,
            "info": chain.info,
            "space": [(i.name, i.shape) for i in chain.space.params],
        },
        path / "chain.pt",
    )
    (path / "chain.json").write_text(json.dumps(chain.config, indent=2, default=str))
    (path / "space.json").write_text(json.dumps(chain.space.to_config()))


def load_chain(path: str | Path) -> Chain:
    """A chain saved by :func:`save_chain`, or one assembled from a run folder's chunks (each
    checked against the folder's manifest: a missing, truncated or altered file is an error
    naming it)."""
    path = Path(path)
    if (path / "chain.pt").exists():
        d = torch.load(path / "chain.pt", weights_only=True)
        config = json.loads((path / "chain.json").read_text()) if (path / "chain.json").exists() else {}
        layout = path / "space.json"  # layer records (older folders: layers from the names)
        space = ParamSpace.from_config(json.loads(layout.read_text()) if layout.exists() else d["space"])
        return Chain(d["samples"], space, d["draw_steps"], d["info"], config)
    return RunFolder(path).load_chain()
