"""Run folders: kept samples streamed to disk in chunks, checkpoints, and reloading.

Layout of ``out_dir``::

    run.json              run settings and parameter layout
    samples/chunk_00000.pt  {"samples": [C, k, P], "draw_steps": [k]}, in order
    info/chunk_00000.pt   {key: [..., s]}: the per-iteration records, streamed in order
    checkpoint.pt         everything needed to resume exactly (written atomically)
    manifest.json         blake2b digest and size of every chunk and of the checkpoint
    diverged.json         present when the run stopped on NaN/Inf (or blew up)

Chunks are written when ``chunk_draws`` draws are pending and at every checkpoint, so a
checkpoint always refers to chunks already on disk; on resume, chunks written after the last
checkpoint are removed and regenerated. Every file is written atomically and its digest
recorded in the manifest (also written atomically) right after; reading a chunk or the
checkpoint checks the digest and names the file that is missing, truncated or altered.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .chain import Chain
from .space import ParamSpace

MANIFEST = "manifest.json"
# what a run folder may hold; ``overwrite=True`` removes exactly these
RUN_FOLDER_ENTRIES = ("run.json", "samples", "info", "checkpoint.pt", "checkpoint.pt.tmp", MANIFEST,
                      MANIFEST + ".tmp", "diverged.json", "diagnostics")


class RunFolderError(ValueError):
    """A run folder's file is missing, truncated or does not match its manifest digest."""


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=20).hexdigest()


def _atomic_write_bytes(data: bytes, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _atomic_save(obj: Any, path: Path) -> str:
    """``torch.save`` to ``path`` atomically; returns the blake2b digest of the bytes written."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    _atomic_write_bytes(data, path)
    return _digest(data)


class RunFolder:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.samples_dir = self.path / "samples"
        self.info_dir = self.path / "info"
        self.checkpoint_path = self.path / "checkpoint.pt"
        self.manifest_path = self.path / MANIFEST
        self._manifest: dict | None = None

    # -- the folder itself -------------------------------------------------------------------
    def is_empty(self) -> bool:
        if not self.path.exists():
            return True
        return self.path.is_dir() and not any(self.path.iterdir())

    def clear(self) -> None:
        """Remove a previous run's files (``overwrite=True``); refuse a folder holding anything
        that is not part of a structmc run folder."""
        if self.is_empty():
            return
        if not self.path.is_dir():
            raise ValueError(f"out_dir {self.path} is not a folder")
        entries = {p.name for p in self.path.iterdir()}
        foreign = sorted(entries - set(RUN_FOLDER_ENTRIES))
        if foreign or "run.json" not in entries:
            raise ValueError(f"overwrite=True refuses to clear {self.path}: it is not a structmc run folder"
                             + (f" (it holds {foreign[:5]})" if foreign else " (no run.json)"))
        for name in RUN_FOLDER_ENTRIES:
            p = self.path / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
        self._manifest = None

    def create(self, settings: dict) -> None:
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        self.info_dir.mkdir(parents=True, exist_ok=True)
        (self.path / "run.json").write_text(json.dumps(settings, indent=2, default=str))
        if not self.manifest_path.exists():
            # a new folder, or one from before manifests being resumed: record what it holds
            self._manifest = {"format": 1, "files": {}}
            for f in [*self.chunk_files(), *self.info_files(), self.checkpoint_path]:
                if f.exists():
                    data = f.read_bytes()
                    self._manifest["files"][f.relative_to(self.path).as_posix()] = {"blake2b": _digest(data),
                                                                                   "size": len(data)}
            self._write_manifest()

    def settings(self) -> dict:
        return json.loads((self.path / "run.json").read_text())

    # -- manifest ----------------------------------------------------------------------------
    def manifest(self) -> dict | None:
        """``{"files": {relative path: {"blake2b", "size"}}}``, or ``None`` for folders written
        before manifests (nothing is verified then)."""
        if self._manifest is None and self.manifest_path.exists():
            try:
                self._manifest = json.loads(self.manifest_path.read_text())
            except (OSError, ValueError) as err:
                raise RunFolderError(f"{self.manifest_path}: unreadable manifest ({err})") from err
        return self._manifest

    def _write_manifest(self) -> None:
        _atomic_write_bytes(json.dumps(self._manifest, indent=1, sort_keys=True).encode(), self.manifest_path)

    def _record(self, path: Path, digest: str, size: int) -> None:
        if self.manifest() is None:  # an old folder being resumed: start a manifest now
            self._manifest = {"format": 1, "files": {}}
        self._manifest["files"][path.relative_to(self.path).as_posix()] = {"blake2b": digest, "size": size}
        self._write_manifest()

    def _forget(self, paths: list[Path]) -> None:
        m = self.manifest()
        if m is None or not paths:
            return
        for p in paths:
            m["files"].pop(p.relative_to(self.path).as_posix(), None)
        self._write_manifest()

    def _save(self, obj: Any, path: Path) -> None:
        digest = _atomic_save(obj, path)
        self._record(path, digest, path.stat().st_size)

    def _verify(self, path: Path) -> bytes:
        """The file's bytes, checked against the manifest; errors name the file."""
        rel = path.relative_to(self.path).as_posix()
        m = self.manifest()
        entry = None if m is None else m["files"].get(rel)
        if not path.exists():
            raise RunFolderError(f"{path}: missing from the run folder" + (" (listed in the manifest)" if entry else ""))
        data = path.read_bytes()
        if entry is not None:
            if len(data) != entry["size"]:
                raise RunFolderError(f"{path}: truncated or altered ({len(data)} bytes, the manifest records "
                                     f"{entry['size']})")
            if _digest(data) != entry["blake2b"]:
                raise RunFolderError(f"{path}: corrupted (its blake2b digest does not match the manifest)")
        elif m is not None:
            raise RunFolderError(f"{path}: not listed in the manifest (written by another run, or the manifest "
                                 "was lost)")
        return data

    def _load(self, path: Path, *, weights_only: bool = True) -> Any:
        """Read a file of the folder, checked against the manifest; errors name the file."""
        data = self._verify(path)
        try:
            return torch.load(io.BytesIO(data), weights_only=weights_only)
        except Exception as err:  # truncated / not a torch file
            raise RunFolderError(f"{path}: unreadable ({type(err).__name__}: {err})") from err

    def check(self) -> None:
        """Verify every file the manifest lists (digest and size); raise naming the first bad one."""
        m = self.manifest()
        if m is None:
            return
        for rel, entry in sorted(m["files"].items()):
            path = self.path / rel
            if not path.exists():
                raise RunFolderError(f"{path}: missing from the run folder (listed in the manifest)")
            data = path.read_bytes()
            if len(data) != entry["size"] or _digest(data) != entry["blake2b"]:
                raise RunFolderError(f"{path}: corrupted or truncated (does not match the manifest)")

    # -- sample chunks ------------------------------------------------------------------------
    def chunk_files(self) -> list[Path]:
        return sorted(self.samples_dir.glob("chunk_*.pt"))

    def _checked_files(self, files: list[Path], kind: str) -> list[Path]:
        """The chunk files in order, refusing a gap in the numbering or a listed file that is gone."""
        for i, f in enumerate(files):
            if f.name != f"chunk_{i:05d}.pt":
                raise RunFolderError(f"{f.parent / f'chunk_{i:05d}.pt'}: missing {kind} chunk (found {f.name} after it)")
        m = self.manifest()
        if m is not None:
            prefix = ("samples" if kind == "sample" else "info") + "/chunk_"
            listed = sum(1 for rel in m["files"] if rel.startswith(prefix))
            on_disk = len(self.chunk_files() if kind == "sample" else self.info_files())
            if listed > on_disk and len(files) == on_disk:
                raise RunFolderError(f"{self.path / (prefix + f'{len(files):05d}.pt')}: missing {kind} chunk "
                                     f"(the manifest lists {listed}, {len(files)} on disk)")
        return files

    def write_chunk(self, index: int, samples: Tensor, draw_steps: Tensor) -> None:
        # a compact copy: torch.save writes a view's whole storage (the full sample buffer)
        self._save({"samples": samples.detach().to("cpu", copy=True).contiguous(),
                    "draw_steps": draw_steps.detach().to("cpu", copy=True)},
                   self.samples_dir / f"chunk_{index:05d}.pt")

    def read_chunks(self, count: int | None = None, *, samples: bool = True) -> tuple[Tensor | None, Tensor] | None:
        files = self.chunk_files()
        if count is None:
            files = self._checked_files(files, "sample")
        else:
            files = self._checked_files(files[:count], "sample")
            if len(files) < count:
                raise RunFolderError(f"{self.samples_dir / f'chunk_{len(files):05d}.pt'}: missing sample chunk "
                                     f"(the checkpoint refers to {count})")
        if not files:
            return None
        parts = [self._load(f) for f in files]
        steps = torch.cat([p["draw_steps"] for p in parts])
        return (torch.cat([p["samples"] for p in parts], 1) if samples else None), steps

    def iter_chunks(self, count: int | None = None):
        """``(samples [C, n, P], draw_steps [n])`` one chunk at a time, each checked against the
        manifest: memory bounded by one chunk, for runs whose draws do not fit in memory."""
        files = self._checked_files(self.chunk_files() if count is None else self.chunk_files()[:count], "sample")
        for f in files:
            part = self._load(f)
            yield part["samples"], part["draw_steps"]

    def verify_chunks(self, count: int) -> None:
        """Check the first ``count`` sample chunks against the manifest without keeping them."""
        files = self._checked_files(self.chunk_files()[:count], "sample")
        if len(files) < count:
            raise RunFolderError(f"{self.samples_dir / f'chunk_{len(files):05d}.pt'}: missing sample chunk "
                                 f"(the checkpoint refers to {count})")
        for f in files:
            self._verify(f)

    def verify_info(self, count: int) -> None:
        files = self._checked_files(self.info_files()[:count], "info")
        if len(files) < count:
            raise RunFolderError(f"{self.info_dir / f'chunk_{len(files):05d}.pt'}: missing info chunk "
                                 f"(the checkpoint refers to {count})")
        for f in files:
            self._verify(f)

    def drop_chunks_from(self, count: int, info_count: int | None = None) -> None:
        gone = self.chunk_files()[count:]
        if info_count is not None:
            gone += self.info_files()[info_count:]
        for f in gone:
            f.unlink()
        self._forget(gone)

    # -- info chunks --------------------------------------------------------------------------
    def info_files(self) -> list[Path]:
        return sorted(self.info_dir.glob("chunk_*.pt"))

    def write_info_chunk(self, index: int, info: dict[str, Tensor]) -> None:
        # compact copies: torch.save writes a view's whole storage
        self._save({k: v.detach().to("cpu", copy=True).contiguous() for k, v in info.items()},
                   self.info_dir / f"chunk_{index:05d}.pt")

    def read_info(self, count: int | None = None) -> dict[str, Tensor]:
        """The streamed per-iteration records ``{key: [..., S]}``; a key that appears only in
        later chunks is back-filled with NaN."""
        files = self._checked_files(self.info_files()[:count], "info")
        if count is not None and len(files) < count:
            raise RunFolderError(f"{self.info_dir / f'chunk_{len(files):05d}.pt'}: missing info chunk "
                                 f"(the checkpoint refers to {count})")
        return concat_info([self._load(f) for f in files])

    # -- checkpoints --------------------------------------------------------------------------
    def save_checkpoint(self, ckpt: dict) -> None:
        self._save(ckpt, self.checkpoint_path)

    def load_checkpoint(self) -> dict | None:
        if not self.checkpoint_path.exists():
            m = self.manifest()
            if m is not None and "checkpoint.pt" in m["files"]:
                raise RunFolderError(f"{self.checkpoint_path}: missing from the run folder (listed in the manifest)")
            return None
        return self._load(self.checkpoint_path, weights_only=False)

    def mark_diverged(self, message: str, step: int) -> None:
        (self.path / "diverged.json").write_text(json.dumps({"step": step, "message": message}, indent=2))

    def diverged(self) -> dict | None:
        """``{"step", "message"}`` when the run stopped on NaN/Inf or a blow-up, else ``None``."""
        p = self.path / "diverged.json"
        return json.loads(p.read_text()) if p.exists() else None

    def load_chain(self) -> Chain:
        """A :class:`~structmc.chain.Chain` from the chunks on disk (and the streamed info, or the
        last checkpoint's for folders written before info was streamed)."""
        settings = self.settings()
        space = ParamSpace.from_config({"params": settings["space"], "layers": settings.get("layers")})
        got = self.read_chunks()
        C = int(settings["num_chains"])
        samples, steps = got if got is not None else (torch.empty(C, 0, space.dim), torch.empty(0, dtype=torch.long))
        ckpt = self.load_checkpoint()
        if ckpt is not None and "info_chunks" in ckpt.get("draws", {}):
            # streamed records: the chunks, then the checkpoint's tail, unless chunks written after
            # the checkpoint (a divergence) already cover it
            n = int(ckpt["draws"]["info_chunks"])
            info = self.read_info() if len(self.info_files()) > n else concat_info([self.read_info(n), ckpt["info"]])
        elif ckpt is not None:  # folders written before records were streamed
            info = ckpt["info"]
        else:  # stopped before the first checkpoint (diverged): what was streamed
            info = self.read_info()
        return Chain(samples, space, steps, info, settings.get("config", {}))


def concat_info(parts: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Join info blocks ``{key: [..., s_k]}`` along the last axis, back-filling absent keys with NaN."""
    keys: dict[str, Tensor] = {}
    for p in parts:
        for k, v in p.items():
            keys.setdefault(k, v)
    out = {}
    for k, like in keys.items():
        blocks = []
        for p in parts:
            if k in p:
                blocks.append(p[k])
            else:
                s = next(iter(p.values())).shape[-1] if p else 0
                blocks.append(torch.full((*like.shape[:-1], s), math.nan, dtype=torch.float64))
        out[k] = torch.cat(blocks, -1) if len(blocks) > 1 else blocks[0].clone()
    return out


def save_chain(chain: Chain, path: str | Path) -> None:
    """Write ``chain.pt`` (tensors) and ``chain.json`` (config) into the folder ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.save({"samples": chain.samples, "draw_steps": chain.draw_steps, "info": chain.info,
                "space": [(i.name, i.shape) for i in chain.space.params]}, path / "chain.pt")
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
