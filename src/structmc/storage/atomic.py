"""Atomic writes (a unique temporary file, then ``os.replace``) and the digests a manifest records."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
from pathlib import Path
from typing import Any

import torch


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


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically: readers see the old file or the
    whole new one, never a part, and two writers never share a temporary file."""
    _atomic_write_bytes(data.encode() if isinstance(data, str) else data, Path(path))


def _atomic_save(obj: Any, path: Path) -> tuple[str, int]:
    """``torch.save`` to ``path`` atomically; returns the blake2b digest and size of the bytes written."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    _atomic_write_bytes(data, path)
    return _digest(data), len(data)
