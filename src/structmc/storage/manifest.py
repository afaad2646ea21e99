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
    MANIFEST_FORMAT,
    RUN_JSON,
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
    what a run writes there (chunks, records, checkpoints), :class:`TuningFolder` what a tuner
    writes (its progress and trace). A subclass names its kind (``KIND``, in messages), what
    it may hold (:meth:`_is_entry`) and the file that marks it as one (``MARKERS``)."""

    KIND = "run folder"
    #: a folder holding none of these is not one of this kind (``clear`` refuses it)
    MARKERS: tuple[str, ...] = (RUN_JSON,)

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.samples_dir = self.path / "samples"
        self.info_dir = self.path / "info"
        self.manifest_path = self.path / MANIFEST
        self._manifest: dict | None = None
        self._lock_fd: int | None = None
        self._warned = False
        self._warned_settings = False

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

    def _is_entry(self, name: str) -> bool:
        """Whether a folder of this kind may hold ``name`` (``clear`` removes only these)."""
        return _is_run_folder_entry(name)

    def clear(self) -> None:
        """Remove a previous run's files (``overwrite=True``); refuse a folder holding anything
        that is not part of a structmc folder of this kind."""
        if self.is_empty():
            return
        if not self.path.is_dir():
            raise ValueError(f"out_dir {self.path} is not a folder")
        entries = {p.name for p in self.path.iterdir()} - {LOCK}
        foreign = sorted(n for n in entries if not self._is_entry(n))
        if foreign or not entries & set(self.MARKERS):
            raise ValueError(
                f"overwrite=True refuses to clear {self.path}: it is not a structmc {self.KIND}"
                + (f" (it holds {foreign[:5]})" if foreign else f" (no {' or '.join(self.MARKERS)})")
            )
        # the data first, the markers last: a clear cut short still reads as a folder to clear
        last = [n for n in (MANIFEST, *self.MARKERS) if n in entries]
        for name in [*sorted(entries - set(last)), *last]:
            p = self.path / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                os.unlink(p)
        self._manifest = None

    def settings(self) -> dict:
        """``run.json``'s settings, checked against the manifest (folders whose manifest predates
        listing it: unverified, with a warning); a missing, altered, truncated or unreadable
        ``run.json`` is a :class:`RunFolderError` naming it."""
        p = self.path / RUN_JSON
        m = self.manifest()
        if m is not None and (self._listed(RUN_JSON) or int(m.get("format", 2)) >= MANIFEST_FORMAT):
            data = self._verify(p)
        else:
            if not p.exists():
                raise RunFolderError(f"{p}: missing from the run folder (it records the run's settings)")
            data = p.read_bytes()
            if m is not None and not self._warned_settings:
                self._warned_settings = True
                warnings.warn(
                    f"{p}: a run folder from an earlier structmc, whose manifest does not list run.json: the "
                    "run's settings (its parameter layout) are unverified; resuming the run lists it",
                    UserWarning,
                    stacklevel=2,
                )
        try:
            settings = json.loads(data)
            if not isinstance(settings, dict):
                raise ValueError(f"a JSON {type(settings).__name__}, not an object")
        except ValueError as err:  # JSONDecodeError, UnicodeDecodeError included
            raise RunFolderError(
                f"{p}: unreadable ({type(err).__name__}: {err}); it records the run's settings: restore it"
            ) from err
        return settings

    def folder_format(self) -> int | None:
        """``run.json``'s ``folder_format`` (1 for folders from before it was recorded), or ``None``
        when there is no ``run.json`` (no run yet)."""
        p = self.path / RUN_JSON
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
                    if not isinstance(m.get("pending", {}), dict):
                        raise ValueError("its 'pending' table is not a table")
                except (OSError, ValueError) as err:
                    raise RunFolderError(f"{self.manifest_path}: unreadable manifest ({err})") from err
                self._manifest = m
            else:
                fmt = self.folder_format()
                if fmt is not None and fmt >= 2:
                    raise RunFolderError(
                        f"{self.manifest_path}: the manifest is missing, so the {self.KIND}'s files "
                        "cannot be verified (a folder written by this structmc always has one); "
                        "restore it, or start the run again with overwrite=True"
                    )
                if fmt is not None and not self._warned:
                    self._warned = True
                    warnings.warn(
                        f"{self.path}: a {self.KIND} from an earlier structmc, without {MANIFEST}: its files "
                        "are unverified (a damaged or altered file may go unnoticed)",
                        UserWarning,
                        stacklevel=3,
                    )
        return self._manifest

    def _writable_manifest(self) -> dict:
        m = self.manifest()
        if m is None:
            m = self._manifest = {"format": MANIFEST_FORMAT, "files": {}}
        return m

    def _listed(self, rel: str) -> bool:
        """Whether the manifest lists ``rel`` (as current, or as being replaced)."""
        m = self.manifest()
        return m is not None and (rel in m["files"] or rel in m.get("pending", {}))

    def write_file(self, name: str, data: bytes | str) -> None:
        """Write the file ``name`` (relative to the folder) and list it in the manifest, crash-
        consistently under a fixed name: the manifest first records the new digest as pending
        beside the current one, then the file is replaced atomically, then the manifest records
        it as current. Killed at any point, the file is complete and matches one of the two
        digests the manifest holds for it (:meth:`_verify` accepts either)."""
        data = data.encode() if isinstance(data, str) else data
        m = self._writable_manifest()
        entry = {"blake2b": _digest(data), "size": len(data)}
        m.setdefault("pending", {})[name] = entry
        self._write_manifest()
        _atomic_write_bytes(data, self.path / name)
        m["files"][name] = entry
        m["pending"].pop(name, None)
        if not m["pending"]:
            del m["pending"]
        self._write_manifest()

    def read_file(self, name: str) -> bytes:
        """The bytes of the file ``name``, checked against the manifest (errors name the file)."""
        return self._verify(self.path / name)

    def _settle(self) -> None:
        """For the writer holding the lock: a replacement a kill interrupted (:meth:`write_file`)
        is finished: a file matching its pending digest becomes current, a stale pending entry
        is dropped."""
        m = self.manifest()
        if m is None or not m.get("pending"):
            return
        for rel, entry in list(m["pending"].items()):
            path = self.path / rel
            if path.is_file():
                data = path.read_bytes()
                if len(data) == entry["size"] and _digest(data) == entry["blake2b"]:
                    m["files"][rel] = entry
        del m["pending"]
        self._write_manifest()

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
                if rel in m["files"] or rel in m.get("pending", {}) or not f.is_file():
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
        pending = None if m is None else m.get("pending", {}).get(rel)
        if not path.is_file():
            raise RunFolderError(
                f"{path}: missing from the {self.KIND}" + (" (listed in the manifest)" if entry or pending else "")
            )
        data = path.read_bytes()
        if pending is not None:  # a replacement a kill interrupted: the old file or the new one
            if len(data) == pending["size"] and _digest(data) == pending["blake2b"]:
                return data
            entry = entry or pending
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
        pending = m.get("pending", {})
        for rel in sorted({*m["files"], *pending}):
            path = self.path / rel
            if not path.exists():
                if rel not in m["files"]:  # a new file a kill interrupted before it was written
                    continue
                raise RunFolderError(f"{path}: missing from the {self.KIND} (listed in the manifest)")
            data = path.read_bytes()
            if not any(
                e is not None and len(data) == e["size"] and _digest(data) == e["blake2b"]
                for e in (m["files"].get(rel), pending.get(rel))
            ):
                raise RunFolderError(f"{path}: corrupted or truncated (does not match the manifest)")
