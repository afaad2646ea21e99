"""Run folders: kept samples streamed to disk in chunks, checkpoints, and reloading.

Layout of ``out_dir``::

    run.json              run settings and parameter layout; ``folder_format`` (2 since manifests
                          are mandatory and name the current checkpoint)
    samples/chunk_00000.pt  {"samples": [C, k, P], "draw_steps": [k]}, in order
    info/chunk_00000.pt   {key: [..., s]}: the per-iteration records, streamed in order
    checkpoint-<iteration>.pt  everything needed to resume exactly (older folders: checkpoint.pt)
    manifest.json         blake2b digest and size of every chunk and of the checkpoint, and the
                          name of the current checkpoint
    diverged.json         present when the run stopped on NaN/Inf (or blew up)
    .structmc.lock        the writer's lock (``fcntl.flock``): one run writes a folder at a time

Chunks are written when ``chunk_draws`` draws are pending and at every checkpoint, so a
checkpoint always refers to chunks already on disk; on resume, chunks written after the last
checkpoint are removed and regenerated. The manifest is the folder's table of contents: every
file is written atomically (a unique temporary name, then ``os.replace``) and only then listed
in the manifest (itself replaced atomically); a new checkpoint goes to a new file, the manifest
then names it as current, and only then is the previous one removed. A kill at any moment thus
leaves a manifest that names complete files matching their digests; files it does not list are
leftovers of the interrupted write, ignored by readers and removed by the next writer. Reading
a chunk or the checkpoint checks the digest and names the file that is missing, truncated or
altered. A folder written by this version without its manifest is an error (nothing could be
verified); folders from before manifests load with a warning that they are unverified.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import secrets
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .chain import Chain
from .space import ParamSpace

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
    import msvcrt

MANIFEST = "manifest.json"
LOCK = ".structmc.lock"
# run.json's folder_format: 2 = the manifest is mandatory and names the current checkpoint
# (absent: a folder from an earlier structmc, whose files may be unverified)
FOLDER_FORMAT = 2
LEGACY_CHECKPOINT = "checkpoint.pt"
# what a run folder may hold; ``overwrite=True`` removes exactly these (the lock file stays: its
# holder is the run doing the overwrite)
RUN_FOLDER_ENTRIES = ("run.json", "samples", "info", LEGACY_CHECKPOINT, "checkpoint.pt.tmp", MANIFEST,
                      MANIFEST + ".tmp", "diverged.json", "diagnostics")
_CHECKPOINT_NAME = re.compile(r"checkpoint-\d+(\.\d+)?\.pt")
_TMP_NAME = re.compile(r"\..+\.tmp")  # _atomic_write_bytes's temporary files


def _is_run_folder_entry(name: str) -> bool:
    return name in RUN_FOLDER_ENTRIES or bool(_CHECKPOINT_NAME.fullmatch(name) or _TMP_NAME.fullmatch(name))


class RunFolderError(ValueError):
    """A run folder's file is missing, truncated or does not match its manifest digest."""


class RunFolderBusy(ValueError):
    """Another run holds the run folder's write lock."""


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=20).hexdigest()


def _atomic_write_bytes(data: bytes, path: Path) -> None:
    """Write ``path`` atomically: the bytes go to a temporary file of a unique name in the same
    folder (two writers never share one), then ``os.replace`` puts it in place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _atomic_save(obj: Any, path: Path) -> tuple[str, int]:
    """``torch.save`` to ``path`` atomically; returns the blake2b digest and size of the bytes written."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    _atomic_write_bytes(data, path)
    return _digest(data), len(data)


class RunFolder:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.samples_dir = self.path / "samples"
        self.info_dir = self.path / "info"
        self.manifest_path = self.path / MANIFEST
        self._manifest: dict | None = None
        self._lock_fd: int | None = None
        self._warned = False

    # -- the writer's lock ------------------------------------------------------------------
    def lock(self) -> None:
        """Take the folder's write lock: an exclusive, non-blocking ``fcntl.flock`` on
        ``.structmc.lock`` (creating the folder), held until :meth:`unlock` or the end of the
        process (a kill -9 included). A second writer, in this process or another, gets
        :class:`RunFolderBusy` naming the folder; readers (``load_chain``) take no lock."""
        if self._lock_fd is not None:
            return
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"out_dir {self.path} is not a folder")
        self.path.mkdir(parents=True, exist_ok=True)
        lock_path = self.path / LOCK
        while True:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                else:  # pragma: no cover - Windows
                    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            except OSError as err:  # BlockingIOError: held by another open file (this process or another)
                os.close(fd)
                if fcntl is not None and not isinstance(err, BlockingIOError):
                    raise
                raise RunFolderBusy(f"out_dir {self.path} is in use by another run (it holds {lock_path}): two runs "
                                    "writing one folder would mix their draws; wait for that run to end, or choose "
                                    "another out_dir") from None
            try:  # the previous holder may have removed the file between our open and flock
                current = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                self._lock_fd = fd
                return
            os.close(fd)

    def unlock(self) -> None:
        """Release the write lock (removing the lock file while still holding it)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        try:
            (self.path / LOCK).unlink(missing_ok=True)
        except OSError:
            pass
        finally:
            os.close(fd)

    # -- the folder itself -------------------------------------------------------------------
    def is_empty(self) -> bool:
        if not self.path.exists():
            return True
        return self.path.is_dir() and not any(p.name != LOCK for p in self.path.iterdir())

    def clear(self) -> None:
        """Remove a previous run's files (``overwrite=True``); refuse a folder holding anything
        that is not part of a structmc run folder."""
        if self.is_empty():
            return
        if not self.path.is_dir():
            raise ValueError(f"out_dir {self.path} is not a folder")
        entries = {p.name for p in self.path.iterdir()} - {LOCK}
        foreign = sorted(n for n in entries if not _is_run_folder_entry(n))
        if foreign or "run.json" not in entries:
            raise ValueError(f"overwrite=True refuses to clear {self.path}: it is not a structmc run folder"
                             + (f" (it holds {foreign[:5]})" if foreign else " (no run.json)"))
        # the data first, run.json last: a clear cut short still reads as a run folder to clear
        for name in [*sorted(entries - {MANIFEST, "run.json"}), MANIFEST, "run.json"]:
            p = self.path / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                os.unlink(p)
        self._manifest = None

    def create(self, settings: dict) -> None:
        """Open the folder for writing (its lock held): a new folder gets an empty manifest; one
        from before manifests being resumed, a manifest recording what it holds (unverified);
        leftovers of an interrupted write are removed; then ``run.json`` gets the settings and
        the folder format. A folder of this format without its manifest is refused."""
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        self.info_dir.mkdir(parents=True, exist_ok=True)
        if self.manifest() is None:  # the manifest before run.json: run.json's format promises one
            old = self.folder_format() is not None
            self._manifest = {"format": 2, "files": {}}
            for f in [*self.chunk_files(), *self.info_files(), self.path / LEGACY_CHECKPOINT] if old else []:
                if f.exists():
                    data = f.read_bytes()
                    self._manifest["files"][f.relative_to(self.path).as_posix()] = {"blake2b": _digest(data),
                                                                                   "size": len(data)}
            if LEGACY_CHECKPOINT in self._manifest["files"]:
                self._manifest["checkpoint"] = LEGACY_CHECKPOINT
            self._write_manifest()
        self._remove_leftovers()
        _atomic_write_bytes(json.dumps({**settings, "folder_format": FOLDER_FORMAT}, indent=2, default=str).encode(),
                            self.path / "run.json")

    def settings(self) -> dict:
        return json.loads((self.path / "run.json").read_text())

    def folder_format(self) -> int | None:
        """``run.json``'s ``folder_format`` (1 for folders from before it was recorded), or ``None``
        when there is no ``run.json`` (no run yet)."""
        p = self.path / "run.json"
        if not p.exists():
            return None
        try:
            fmt = json.loads(p.read_text()).get("folder_format", 1)
            return int(fmt)
        except (OSError, ValueError, TypeError, AttributeError) as err:
            raise RunFolderError(f"{p}: unreadable ({type(err).__name__}: {err})") from err

    # -- manifest ----------------------------------------------------------------------------
    def manifest(self) -> dict | None:
        """``{"files": {relative path: {"blake2b", "size"}}, "checkpoint": name}``, or ``None``
        for a folder from before manifests (nothing is verified then; a warning says so) or one
        not created yet. A folder of this format whose manifest is missing is an error."""
        if self._manifest is None:
            if self.manifest_path.exists():
                try:
                    m = json.loads(self.manifest_path.read_text())
                    if not isinstance(m, dict) or not isinstance(m.get("files"), dict):
                        raise ValueError("no 'files' table")
                except (OSError, ValueError) as err:
                    raise RunFolderError(f"{self.manifest_path}: unreadable manifest ({err})") from err
                self._manifest = m
            else:
                fmt = self.folder_format()
                if fmt is not None and fmt >= 2:
                    raise RunFolderError(f"{self.manifest_path}: the manifest is missing, so the run folder's files "
                                         "cannot be verified (a folder written by this structmc always has one); "
                                         "restore it, or start the run again with overwrite=True")
                if fmt is not None and not self._warned:
                    self._warned = True
                    warnings.warn(f"{self.path}: a run folder from an earlier structmc, without {MANIFEST}: its files "
                                  "are unverified (a damaged or altered file may go unnoticed)", UserWarning,
                                  stacklevel=3)
        return self._manifest

    def _writable_manifest(self) -> dict:
        if self.manifest() is None:
            self._manifest = {"format": 2, "files": {}}
        return self._manifest

    def _write_manifest(self) -> None:
        _atomic_write_bytes(json.dumps(self._manifest, indent=1, sort_keys=True).encode(), self.manifest_path)

    def _forget(self, paths: list[Path]) -> None:
        m = self.manifest()
        if m is None or not paths:
            return
        for p in paths:
            m["files"].pop(p.relative_to(self.path).as_posix(), None)
        self._write_manifest()

    def _save(self, obj: Any, path: Path) -> None:
        """Write ``path`` atomically, then list it in the manifest (a listed file is unlisted
        first, never replaced in place: the manifest only ever names complete files)."""
        m = self._writable_manifest()
        rel = path.relative_to(self.path).as_posix()
        if m["files"].pop(rel, None) is not None:
            self._write_manifest()
        digest, size = _atomic_save(obj, path)
        m["files"][rel] = {"blake2b": digest, "size": size}
        self._write_manifest()

    def _remove_leftovers(self) -> None:
        """Remove what an interrupted write left (temporary files, checkpoints and chunks the
        manifest does not list); for the writer holding the lock."""
        m = self.manifest()
        if m is None:
            return
        for d in (self.path, self.samples_dir, self.info_dir):
            for f in (d.iterdir() if d.is_dir() else ()):
                rel = f.relative_to(self.path).as_posix()
                if rel in m["files"] or not f.is_file():
                    continue
                if (_TMP_NAME.fullmatch(f.name) or (d == self.path and (
                        f.name in ("checkpoint.pt.tmp", MANIFEST + ".tmp", LEGACY_CHECKPOINT)
                        or _CHECKPOINT_NAME.fullmatch(f.name))) or (d != self.path and _chunk_index(f) is not None)):
                    os.unlink(f)

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
            files = sorted(self.path / rel for rel in m["files"]
                           if rel.startswith(d.name + "/") and _chunk_index(self.path / rel) is not None)
        for i, f in enumerate(files):
            if f.name != f"chunk_{i:05d}.pt":
                raise RunFolderError(f"{d / f'chunk_{i:05d}.pt'}: missing {kind} chunk (found {f.name} after it)")
        if count is not None:
            if len(files) < count:
                raise RunFolderError(f"{d / f'chunk_{len(files):05d}.pt'}: missing {kind} chunk "
                                     f"(the checkpoint refers to {count})")
            files = files[:count]
        return files

    def write_chunk(self, index: int, samples: Tensor, draw_steps: Tensor) -> None:
        # a compact copy: torch.save writes a view's whole storage (the full sample buffer)
        self._save({"samples": samples.detach().to("cpu", copy=True).contiguous(),
                    "draw_steps": draw_steps.detach().to("cpu", copy=True)},
                   self.samples_dir / f"chunk_{index:05d}.pt")

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
            gone += [f for f in [*d.glob("chunk_*.pt"), *listed] if (_chunk_index(f) is not None
                                                                      and _chunk_index(f) >= n)]
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
        self._save({k: v.detach().to("cpu", copy=True).contiguous() for k, v in info.items()},
                   self.info_dir / f"chunk_{index:05d}.pt")

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
        _atomic_write_bytes(json.dumps({"step": step, "message": message}, indent=2).encode(),
                            self.path / "diverged.json")

    def clear_diverged(self) -> None:
        p = self.path / "diverged.json"
        if p.exists():
            os.unlink(p)

    def diverged(self) -> dict | None:
        """``{"step", "message"}`` when the run stopped on NaN/Inf or a blow-up, else ``None``."""
        p = self.path / "diverged.json"
        return json.loads(p.read_text()) if p.exists() else None

    def load_chain(self) -> Chain:
        """A :class:`~structmc.chain.Chain` from the chunks the manifest lists (and the streamed
        info, or the last checkpoint's for folders written before info was streamed)."""
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
            info = self.read_info() if len(self._chunks("info")) > n else concat_info([self.read_info(n), ckpt["info"]])
        elif ckpt is not None:  # folders written before records were streamed
            info = ckpt["info"]
        else:  # stopped before the first checkpoint (diverged): what was streamed
            info = self.read_info()
        return Chain(samples, space, steps, info, settings.get("config", {}))


def _chunk_index(path: Path) -> int | None:
    """``chunk_00012.pt`` -> 12; ``None`` for other names."""
    m = re.fullmatch(r"chunk_(\d+)\.pt", path.name)
    return int(m.group(1)) if m else None


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
