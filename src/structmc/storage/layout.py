"""The names in a run folder, and its errors."""

from __future__ import annotations

import re
from pathlib import Path

MANIFEST = "manifest.json"
LOCK = ".structmc.lock"
RUN_JSON = "run.json"
# the manifest's format: 3 = it lists run.json (2: chunks and checkpoints only; 1: before it named
# the current checkpoint)
MANIFEST_FORMAT = 3
# run.json's folder_format: 2 = the manifest is mandatory and names the current checkpoint
# (absent: a folder from an earlier structmc, whose files may be unverified)
FOLDER_FORMAT = 2
LEGACY_CHECKPOINT = "checkpoint.pt"
# what a run folder may hold; ``overwrite=True`` removes exactly these (the lock file stays: its
# holder is the run doing the overwrite)
RUN_FOLDER_ENTRIES = (
    "run.json",
    "samples",
    "info",
    LEGACY_CHECKPOINT,
    "checkpoint.pt.tmp",
    MANIFEST,
    MANIFEST + ".tmp",
    "diverged.json",
    "diagnostics",
)
_CHECKPOINT_NAME = re.compile(r"checkpoint-\d+(\.\d+)?\.pt")
_TMP_NAME = re.compile(r"\..+\.tmp")  # _atomic_write_bytes's temporary files


def _is_run_folder_entry(name: str) -> bool:
    return name in RUN_FOLDER_ENTRIES or bool(_CHECKPOINT_NAME.fullmatch(name) or _TMP_NAME.fullmatch(name))


class RunFolderError(ValueError):
    """A run folder's file is missing, truncated or does not match its manifest digest."""


class RunFolderBusy(ValueError):
    """Another run holds the run folder's write lock."""


def _chunk_index(path: Path) -> int | None:
    """``chunk_00012.pt`` -> 12; ``None`` for other names."""
    m = re.fullmatch(r"chunk_(\d+)\.pt", path.name)
    return int(m.group(1)) if m else None
