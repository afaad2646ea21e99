"""A tuner's folder (``mamba(..., out_dir=...)``, ``grid_search``): the same guarantees as a run
folder (:class:`~structmc.storage.VerifiedFolder`: one writer at a time under its lock, every
file listed with its digest in ``manifest.json`` and checked when read, a folder of another
tuning run refused unless resumed or overwritten).

Layout::

    progress.pt          the trace and the surviving arms' states: the one record resume reads
    trace.json           a readable copy of the trace (with ``folder_format``)
    metric_by_round.png  the plot, at the end
    manifest.json        blake2b digest and size of each of them
    .structmc.lock       the writer's lock

Folders written before manifests (``trace.json`` without ``folder_format``, or only
``progress.pt``) resume with a warning that their files are unverified.
"""

from __future__ import annotations

import json

from .layout import _TMP_NAME, MANIFEST, RunFolderError
from .manifest import VerifiedFolder

PROGRESS = "progress.pt"
TRACE = "trace.json"
PLOT = "metric_by_round.png"
LEGACY_STATES = "arm_states.pt"  # structmc 0.1's second file, superseded by progress.pt
# trace.json's folder_format: 2 = the folder has a manifest (absent: written before manifests)
TUNING_FOLDER_FORMAT = 2
# what a tuning folder may hold (``report.md``: structmc tune's report)
TUNING_ENTRIES = (PROGRESS, TRACE, PLOT, LEGACY_STATES, MANIFEST, "report.md")


class TuningFolder(VerifiedFolder):
    """A tuner's ``out_dir``: its lock, its manifest, and verified reads and writes of its files."""

    KIND = "tuning folder"
    MARKERS = (PROGRESS, TRACE)

    def _is_entry(self, name: str) -> bool:
        return name in TUNING_ENTRIES or bool(_TMP_NAME.fullmatch(name))

    def folder_format(self) -> int | None:
        """``trace.json``'s ``folder_format`` (1 for a folder from before manifests), or ``None``
        when the folder holds no tuning run yet."""
        trace = self.path / TRACE
        if trace.exists():
            try:
                return int(json.loads(trace.read_text()).get("folder_format", 1))
            except (OSError, ValueError, TypeError, AttributeError) as err:
                raise RunFolderError(f"{trace}: unreadable ({type(err).__name__}: {err})") from err
        return 1 if (self.path / PROGRESS).exists() or (self.path / LEGACY_STATES).exists() else None

    def open_for_resume(self) -> None:
        """For the writer holding the lock, before reading the progress: finish a replacement a
        kill interrupted and remove temporary files left by one."""
        self.manifest()  # a missing manifest of a folder of this format is an error, naming it
        self._settle()
        for f in self.path.iterdir() if self.path.is_dir() else ():
            if f.is_file() and _TMP_NAME.fullmatch(f.name):
                f.unlink()


__all__ = ["TuningFolder", "PROGRESS", "TRACE", "PLOT", "TUNING_FOLDER_FORMAT"]
