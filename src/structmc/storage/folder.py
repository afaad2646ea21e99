"""The run folder: sample and record chunks, checkpoints, and the chain they make (see
:mod:`structmc.storage` for the layout and the crash-consistency protocol)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from torch import Tensor

from ..chain import Chain
from ..space import ParamSpace
from .atomic import _atomic_save, _atomic_write_bytes, _digest
from .layout import FOLDER_FORMAT, LEGACY_CHECKPOINT, MANIFEST_FORMAT, RUN_JSON, RunFolderError, _chunk_index
from .manifest import VerifiedFolder


class RunFolder(VerifiedFolder):
    """A run's folder (its lock and manifest: :class:`VerifiedFolder`): the kept samples and the
    per-iteration records streamed in chunks, the checkpoints, and the divergence marker."""

    def create(self, settings: dict) -> None:
        """Open the folder for writing (its lock held): a new folder gets an empty manifest; one
        from before manifests being resumed, a manifest recording what it holds (unverified);
        leftovers of an interrupted write are removed; then ``run.json`` gets the settings and
        the folder format, and the manifest its digest (:meth:`write_file`). A folder of this
        format without its manifest is refused."""
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        self.info_dir.mkdir(parents=True, exist_ok=True)
        if self.manifest() is None:  # the manifest before run.json: run.json's format promises one
            old = self.folder_format() is not None
            self._manifest = {"format": MANIFEST_FORMAT, "files": {}}
            for f in [*self.chunk_files(), *self.info_files(), self.path / LEGACY_CHECKPOINT] if old else []:
                if f.exists():
                    data = f.read_bytes()
                    self._manifest["files"][f.relative_to(self.path).as_posix()] = {
                        "blake2b": _digest(data),
                        "size": len(data),
                    }
            if LEGACY_CHECKPOINT in self._manifest["files"]:
                self._manifest["checkpoint"] = LEGACY_CHECKPOINT
            self._write_manifest()
        self._settle()
        self._remove_leftovers()
        self.write_file(RUN_JSON, json.dumps({**settings, "folder_format": FOLDER_FORMAT}, indent=2, default=str))
        m = self._writable_manifest()
        if int(m.get("format", 2)) < MANIFEST_FORMAT:  # only now that it lists run.json
            m["format"] = MANIFEST_FORMAT
            self._write_manifest()

    # -- sample chunks ------------------------------------------------------------------------
    def chunk_files(self) -> list[Path]:
        """The sample chunk files on disk (listed in the manifest or not)."""
        return sorted(self.samples_dir.glob("chunk_*.pt"))

    def _chunks(self, kind: str, count: int | None = None) -> list[Path]:
        """The first ``count`` (all) chunk files of ``kind`` in order: those the manifest lists
        (others on disk are leftovers of an interrupted write), or for folders from before
        manifests those on disk; a gap in the numbering is an error naming the missing file."""
        d = self.samples_dir if kind == "sample" else self.info_dir
        m = self.manifest()
        if m is None:
            files = sorted(f for f in d.glob("chunk_*.pt") if _chunk_index(f) is not None)
        else:
            files = sorted(
                self.path / rel
                for rel in m["files"]
                if rel.startswith(d.name + "/") and _chunk_index(self.path / rel) is not None
            )
        for i, f in enumerate(files):
            if f.name != f"chunk_{i:05d}.pt":
                raise RunFolderError(f"{d / f'chunk_{i:05d}.pt'}: missing {kind} chunk (found {f.name} after it)")
        if count is not None:
            if len(files) < count:
                raise RunFolderError(
                    f"{d / f'chunk_{len(files):05d}.pt'}: missing {kind} chunk (the checkpoint refers to {count})"
                )
            files = files[:count]
        return files

    def write_chunk(self, index: int, samples: Tensor, draw_steps: Tensor) -> None:
        # a compact copy: torch.save writes a view's whole storage (the full sample buffer)
        self._save(
            {
                "samples": samples.detach().to("cpu", copy=True).contiguous(),
                "draw_steps": draw_steps.detach().to("cpu", copy=True),
            },
            self.samples_dir / f"chunk_{index:05d}.pt",
        )

    def read_chunks(self, count: int | None = None, *, samples: bool = True) -> tuple[Tensor | None, Tensor] | None:
        files = self._chunks("sample", count)
        if not files:
            return None
        parts = [self._load(f) for f in files]
        steps = torch.cat([p["draw_steps"] for p in parts])
        return (torch.cat([p["samples"] for p in parts], 1) if samples else None), steps

    def iter_chunks(self, count: int | None = None):
        """``(samples [C, n, P], draw_steps [n])`` one chunk at a time, each checked against the
        manifest: memory bounded by one chunk, for runs whose draws do not fit in memory."""
        for f in self._chunks("sample", count):
            part = self._load(f)
            yield part["samples"], part["draw_steps"]

    def verify_chunks(self, count: int) -> None:
        """Check the first ``count`` sample chunks against the manifest without keeping them."""
        for f in self._chunks("sample", count):
            self._verify(f)

    def verify_info(self, count: int) -> None:
        for f in self._chunks("info", count):
            self._verify(f)

    def drop_chunks_from(self, count: int, info_count: int | None = None) -> None:
        """Remove the sample chunks from index ``count`` on (and the info chunks from
        ``info_count``): unlisted from the manifest first, then deleted."""
        m = self.manifest()
        gone: list[Path] = []
        for d, n in ((self.samples_dir, count), (self.info_dir, info_count)):
            if n is None:
                continue
            listed = [self.path / rel for rel in m["files"] if rel.startswith(d.name + "/")] if m is not None else []
            gone += [f for f in [*d.glob("chunk_*.pt"), *listed] if ((i := _chunk_index(f)) is not None and i >= n)]
        gone = sorted(set(gone))
        self._forget(gone)
        for f in gone:
            if f.exists():
                os.unlink(f)

    # -- info chunks --------------------------------------------------------------------------
    def info_files(self) -> list[Path]:
        """The info chunk files on disk (listed in the manifest or not)."""
        return sorted(self.info_dir.glob("chunk_*.pt"))

    def write_info_chunk(self, index: int, info: dict[str, Tensor]) -> None:
        # compact copies: torch.save writes a view's whole storage
        self._save(
            {k: v.detach().to("cpu", copy=True).contiguous() for k, v in info.items()},
            self.info_dir / f"chunk_{index:05d}.pt",
        )

    def read_info(self, count: int | None = None) -> dict[str, Tensor]:
        """The streamed per-iteration records ``{key: [..., S]}``; a key that appears only in
        later chunks is back-filled with NaN."""
        return concat_info([self._load(f) for f in self._chunks("info", count)])

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint_file(self) -> Path | None:
        """The current checkpoint: the file the manifest names (manifests from before named
        checkpoints: ``checkpoint.pt`` if listed; folders from before manifests: ``checkpoint.pt``
        if present), or ``None``."""
        m = self.manifest()
        if m is None:
            legacy = self.path / LEGACY_CHECKPOINT
            return legacy if legacy.exists() else None
        name = m.get("checkpoint")
        if name is None and LEGACY_CHECKPOINT in m["files"]:
            name = LEGACY_CHECKPOINT
        return None if name is None else self.path / name

    def save_checkpoint(self, ckpt: dict) -> None:
        """Crash-consistent: the checkpoint goes to a new file (``checkpoint-<iteration>.pt``),
        the manifest (replaced atomically) then names it as current, and only then is the
        previous one removed. Killed at any point, the folder's manifest names a complete
        checkpoint matching its digest: the previous one or the new one."""
        m = self._writable_manifest()
        old = self.checkpoint_file()
        iteration = ckpt.get("run", {}).get("iteration", ckpt.get("step", 0)) if isinstance(ckpt, dict) else 0
        name, k = f"checkpoint-{int(iteration):08d}.pt", 0
        while old is not None and name == old.name:  # never replace the current one in place
            k += 1
            name = f"checkpoint-{int(iteration):08d}.{k}.pt"
        digest, size = _atomic_save(ckpt, self.path / name)
        if old is not None:
            m["files"].pop(old.relative_to(self.path).as_posix(), None)
        m["files"][name] = {"blake2b": digest, "size": size}
        m["checkpoint"] = name
        self._write_manifest()
        if old is not None and old.exists():
            os.unlink(old)

    def load_checkpoint(self) -> dict | None:
        path = self.checkpoint_file()
        return None if path is None else self._load(path, weights_only=False)

    def mark_diverged(self, message: str, step: int) -> None:
        _atomic_write_bytes(
            json.dumps({"step": step, "message": message}, indent=2).encode(), self.path / "diverged.json"
        )

    def clear_diverged(self) -> None:
        p = self.path / "diverged.json"
        if p.exists():
            os.unlink(p)

    def diverged(self) -> dict | None:
        """``{"step", "message"}`` when the run stopped on NaN/Inf or a blow-up, else ``None``."""
        p = self.path / "diverged.json"
        if not p.exists():
            return None
        try:
            d = json.loads(p.read_text())
            if not isinstance(d, dict):
                raise ValueError(f"a JSON {type(d).__name__}, not an object")
        except ValueError as err:
            raise RunFolderError(f"{p}: unreadable ({type(err).__name__}: {err})") from err
        return d

    def _layout(self, settings: dict) -> tuple[ParamSpace, int]:
        return _check_layout(self.path / RUN_JSON, settings)

    def load_chain(self) -> Chain:
        """A :class:`~structmc.chain.Chain` from the chunks the manifest lists (and the streamed
        info, or the last checkpoint's for folders written before info was streamed)."""
        settings = self.settings()  # checked against the manifest: errors name run.json
        space, C = self._layout(settings)
        got = self.read_chunks()
        if got is None:
            samples, steps = torch.empty(C, 0, space.dim), torch.empty(0, dtype=torch.long)
        else:
            read, steps = got
            assert read is not None  # read_chunks(samples=True) returns the samples
            samples = read
            if tuple(samples.shape[::2]) != (C, space.dim):
                raise RunFolderError(
                    f"{self.path / RUN_JSON}: records {C} chain(s) of {space.dim} parameters, but the sample "
                    f"chunks in {self.samples_dir} hold {samples.shape[0]} of {samples.shape[-1]}"
                )
        ckpt = self.load_checkpoint()
        if ckpt is not None and "info_chunks" in ckpt.get("draws", {}):
            # streamed records: the chunks, then the checkpoint's tail, unless chunks written after
            # the checkpoint (a divergence) already cover it
            n = int(ckpt["draws"]["info_chunks"])
            info = self.read_info() if len(self._chunks("info")) > n else concat_info([self.read_info(n), ckpt["info"]])
        elif ckpt is not None:  # folders written before records were streamed
            info = ckpt["info"]
        else:  # stopped before the first checkpoint (diverged): what was streamed
            info = self.read_info()
        return Chain(samples, space, steps, info, settings.get("config", {}))


def _bad_settings(path: Path, what: str) -> RunFolderError:
    return RunFolderError(f"{path}: {what}; it records the run's parameter layout: restore it")


def _check_layout(path: Path, settings: dict) -> tuple[ParamSpace, int]:
    """The parameter space and the number of chains ``run.json`` (at ``path``) records."""
    params, chains = settings.get("space"), settings.get("num_chains")
    if not isinstance(params, list) or not params:
        raise _bad_settings(
            path, "no 'space' (the parameters' names and shapes)" if params is None else "a bad 'space'"
        )
    if isinstance(chains, bool) or not isinstance(chains, int) or chains < 1:
        raise _bad_settings(path, f"no valid 'num_chains' (got {chains!r})")
    try:
        space = ParamSpace.from_config({"params": params, "layers": settings.get("layers")})
    except (ValueError, TypeError, KeyError, IndexError) as err:
        raise _bad_settings(path, f"a bad 'space' or 'layers' ({type(err).__name__}: {err})") from err
    return space, chains


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
