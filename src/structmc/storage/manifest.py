"""A run folder's writer lock and manifest: the base of :class:`~structmc.storage.RunFolder`
(see :mod:`structmc.storage` for the layout and the crash-consistency protocol)."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from .atomic import _atomic_save, _atomic_write_bytes, _digest
from .layout import (
    _CHECKPOINT_NAME,
    _TMP_NAME,
    LEGACY_CHECKPOINT,
    LOCK,
    MANIFEST,
    RunFolderBusy,
    RunFolderError,
    _chunk_index,
    _is_run_folder_entry,
)

if sys.platform == "win32":  # pragma: no cover - Windows
    import msvcrt
else:
    import fcntl


class VerifiedFolder:
    """A folder written by one run at a time (its lock) whose files are listed, with their
    digests and sizes, in a manifest; reads are checked against it. :class:`RunFolder` adds
    what a run writes there (chunks, records, checkpoints)."""

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
                if sys.platform == "win32":  # pragma: no cover - Windows
                    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                else:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:  # BlockingIOError: held by another open file (this process or another)
                os.close(fd)
                if sys.platform != "win32" and not isinstance(err, BlockingIOError):
                    raise
                raise RunFolderBusy(
                    f"out_dir {self.path} is in use by another run (it holds {lock_path}): two runs "
                    "writing one folder would mix their draws; wait for that run to end, or choose "
                    "another out_dir"
                ) from None
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
            raise ValueError(
                f"overwrite=True refuses to clear {self.path}: it is not a structmc run folder"
                + (f" (it holds {foreign[:5]})" if foreign else " (no run.json)")
            )
        # the data first, run.json last: a clear cut short still reads as a run folder to clear
        for name in [*sorted(entries - {MANIFEST, "run.json"}), MANIFEST, "run.json"]:
            p = self.path / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                os.unlink(p)
        self._manifest = None

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
                    raise RunFolderError(
                        f"{self.manifest_path}: the manifest is missing, so the run folder's files "
                        "cannot be verified (a folder written by this structmc always has one); "
                        "restore it, or start the run again with overwrite=True"
                    )
                if fmt is not None and not self._warned:
                    self._warned = True
                    warnings.warn(
                        f"{self.path}: a run folder from an earlier structmc, without {MANIFEST}: its files "
                        "are unverified (a damaged or altered file may go unnoticed)",
                        UserWarning,
                        stacklevel=3,
                    )
        return self._manifest

    def _writable_manifest(self) -> dict:
        m = self.manifest()
        if m is None:
            m = self._manifest = {"format": 2, "files": {}}
        return m

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
            for f in d.iterdir() if d.is_dir() else ():
                rel = f.relative_to(self.path).as_posix()
                if rel in m["files"] or not f.is_file():
                    continue
                if (
                    _TMP_NAME.fullmatch(f.name)
                    or (
                        d == self.path
                        and (
                            f.name in ("checkpoint.pt.tmp", MANIFEST + ".tmp", LEGACY_CHECKPOINT)
                            or _CHECKPOINT_NAME.fullmatch(f.name)
                        )
                    )
                    or (d != self.path and _chunk_index(f) is not None)
                ):
                    os.unlink(f)

    def _verify(self, path: Path) -> bytes:
        """The file's bytes, checked against the manifest; errors name the file."""
        rel = path.relative_to(self.path).as_posix()
        m = self.manifest()
        entry = None if m is None else m["files"].get(rel)
        if not path.exists():
            raise RunFolderError(
                f"{path}: missing from the run folder" + (" (listed in the manifest)" if entry else "")
            )
        data = path.read_bytes()
        if entry is not None:
            if len(data) != entry["size"]:
                raise RunFolderError(
                    f"{path}: truncated or altered ({len(data)} bytes, the manifest records {entry['size']})"
                )
            if _digest(data) != entry["blake2b"]:
                raise RunFolderError(f"{path}: corrupted (its blake2b digest does not match the manifest)")
        elif m is not None:
            raise RunFolderError(
                f"{path}: not listed in the manifest (written by another run, or the manifest was lost)"
            )
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
