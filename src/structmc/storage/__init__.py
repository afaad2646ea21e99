"""Run folders: kept samples streamed to disk in chunks, checkpoints, and reloading.

Modules: :mod:`.layout` (the folder's names, its errors), :mod:`.atomic` (atomic writes, digests),
:mod:`.manifest` (:class:`VerifiedFolder`: the writer's lock, the manifest, verified reads),
:mod:`.folder` (:class:`RunFolder`: chunks, records, checkpoints), :mod:`.tuning_folder`
(:class:`~structmc.storage.tuning_folder.TuningFolder`: a tuner's ``out_dir``, with the same lock and
manifest) and :mod:`.chains` (:func:`save_chain`, :func:`load_chain`).

Layout of ``out_dir``::

    run.json              run settings and parameter layout; ``folder_format`` (2 since manifests
                          are mandatory and name the current checkpoint)
    samples/chunk_00000.pt  {"samples": [C, k, P], "draw_steps": [k]}, in order
    info/chunk_00000.pt   {key: [..., s]}: the per-iteration records, streamed in order
    checkpoint-<iteration>.pt  everything needed to resume exactly (older folders: checkpoint.pt)
    manifest.json         blake2b digest and size of run.json, of every chunk and of the
                          checkpoint, and the name of the current checkpoint (``format`` 3 since
                          it lists run.json; a folder whose manifest predates that reads its
                          run.json unverified, with a warning)
    diverged.json         present when the run stopped on NaN/Inf (or blew up)
    .structmc.lock        the writer's lock (``fcntl.flock``): one run writes a folder at a time

Chunks are written when ``chunk_draws`` draws are pending and at every checkpoint, so a
checkpoint always refers to chunks already on disk; on resume, chunks written after the last
checkpoint are removed and regenerated. The manifest is the folder's table of contents: every
file is written atomically (a unique temporary name, then ``os.replace``) and only then listed
in the manifest (itself replaced atomically); a new checkpoint goes to a new file, the manifest
then names it as current, and only then is the previous one removed. A kill at any moment thus
leaves a manifest that names complete files matching their digests; files it does not list are
leftovers of the interrupted write, ignored by readers and removed by the next writer. A file
rewritten under its own name (``run.json`` on resume) is first named in the manifest as
``pending`` with its new digest, then replaced, then listed as current: killed in between, the
file matches one of the two digests and readers accept either. Reading ``run.json``, a chunk or
the checkpoint checks the digest and names the file that is missing, truncated or altered; a
``chain.pt`` (:func:`save_chain`) is never written into a run folder, and one found there is
ignored with a warning. A folder written by this version without its manifest is an error (nothing could be
verified); folders from before manifests load with a warning that they are unverified.
"""

from __future__ import annotations

from .atomic import _atomic_save, _atomic_write_bytes, _digest, write_atomic
from .chains import load_chain, save_chain
from .folder import RunFolder, concat_info
from .layout import (
    FOLDER_FORMAT,
    LEGACY_CHECKPOINT,
    LOCK,
    MANIFEST,
    RUN_FOLDER_ENTRIES,
    RunFolderBusy,
    RunFolderError,
    _chunk_index,
    _is_run_folder_entry,
)
from .manifest import VerifiedFolder

# issue 23: storage was one module (structmc.storage); its classes and functions keep that module
# name, so that fingerprints, pickles and documentation naming them still resolve
for _obj in (
    RunFolder,
    VerifiedFolder,
    RunFolderError,
    RunFolderBusy,
    concat_info,
    save_chain,
    load_chain,
    _digest,
    _atomic_write_bytes,
    _atomic_save,
    write_atomic,
    _chunk_index,
    _is_run_folder_entry,
):
    _obj.__module__ = __name__
del _obj

__all__ = [
    "RunFolder",
    "RunFolderError",
    "RunFolderBusy",
    "save_chain",
    "load_chain",
    "concat_info",
    "write_atomic",
    "MANIFEST",
    "LOCK",
    "FOLDER_FORMAT",
    "LEGACY_CHECKPOINT",
    "RUN_FOLDER_ENTRIES",
]
