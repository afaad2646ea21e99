"""Run folders: kept samples streamed to disk in chunks, checkpoints, and reloading.

Layout of ``out_dir``::

    run.json              run settings and parameter layout
    samples/chunk_00000.pt  {"samples": [C, k, P], "draw_steps": [k]}, in order
    checkpoint.pt         everything needed to resume exactly (written atomically)
    diverged.json         present when the run stopped on NaN/Inf

Chunks are written when ``chunk_draws`` draws are pending and at every checkpoint, so a
checkpoint always refers to chunks already on disk; on resume, chunks written after the last
checkpoint are removed and regenerated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .chain import Chain
from .space import ParamSpace


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


class RunFolder:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.samples_dir = self.path / "samples"
        self.checkpoint_path = self.path / "checkpoint.pt"

    def create(self, settings: dict) -> None:
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        (self.path / "run.json").write_text(json.dumps(settings, indent=2, default=str))

    def settings(self) -> dict:
        return json.loads((self.path / "run.json").read_text())

    def chunk_files(self) -> list[Path]:
        return sorted(self.samples_dir.glob("chunk_*.pt"))

    def write_chunk(self, index: int, samples: Tensor, draw_steps: Tensor) -> None:
        # a compact copy: torch.save writes a view's whole storage (the full sample buffer)
        _atomic_save({"samples": samples.detach().to("cpu", copy=True).contiguous(),
                      "draw_steps": draw_steps.detach().to("cpu", copy=True)},
                     self.samples_dir / f"chunk_{index:05d}.pt")

    def read_chunks(self, count: int | None = None) -> tuple[Tensor, Tensor] | None:
        files = self.chunk_files()[: count]
        if not files:
            return None
        parts = [torch.load(f, weights_only=True) for f in files]
        return torch.cat([p["samples"] for p in parts], 1), torch.cat([p["draw_steps"] for p in parts])

    def drop_chunks_from(self, count: int) -> None:
        for f in self.chunk_files()[count:]:
            f.unlink()

    def save_checkpoint(self, ckpt: dict) -> None:
        _atomic_save(ckpt, self.checkpoint_path)

    def load_checkpoint(self) -> dict | None:
        if not self.checkpoint_path.exists():
            return None
        return torch.load(self.checkpoint_path, weights_only=False)

    def mark_diverged(self, message: str, step: int) -> None:
        (self.path / "diverged.json").write_text(json.dumps({"step": step, "message": message}, indent=2))

    def load_chain(self) -> Chain:
        """A :class:`~structmc.chain.Chain` from the chunks on disk (and the last checkpoint's info)."""
        settings = self.settings()
        space = ParamSpace.from_config({"params": settings["space"], "layers": settings.get("layers")})
        got = self.read_chunks()
        C = int(settings["num_chains"])
        samples, steps = got if got is not None else (torch.empty(C, 0, space.dim), torch.empty(0, dtype=torch.long))
        ckpt = self.load_checkpoint()
        info = ckpt["info"] if ckpt else {}
        return Chain(samples, space, steps, info, settings.get("config", {}))


def save_chain(chain: Chain, path: str | Path) -> None:
    """Write ``chain.pt`` (tensors) and ``chain.json`` (config) into the folder ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.save({"samples": chain.samples, "draw_steps": chain.draw_steps, "info": chain.info,
                "space": [(i.name, i.shape) for i in chain.space.params]}, path / "chain.pt")
    (path / "chain.json").write_text(json.dumps(chain.config, indent=2, default=str))
    (path / "space.json").write_text(json.dumps(chain.space.to_config()))


def load_chain(path: str | Path) -> Chain:
    """A chain saved by :func:`save_chain`, or one assembled from a run folder's chunks."""
    path = Path(path)
    if (path / "chain.pt").exists():
        d = torch.load(path / "chain.pt", weights_only=True)
        config = json.loads((path / "chain.json").read_text()) if (path / "chain.json").exists() else {}
        layout = path / "space.json"  # layer records (older folders: layers from the names)
        space = ParamSpace.from_config(json.loads(layout.read_text()) if layout.exists() else d["space"])
        return Chain(d["samples"], space, d["draw_steps"], d["info"], config)
    return RunFolder(path).load_chain()
