"""Version 1 of the fingerprint (structmc 0.1): kept to compare checkpoints written then
(:func:`structmc.fingerprint.compare` on a version-1 fingerprint), and still written alongside
version 2 (``"v1"``) so that a run written now can be told from one written by 0.1."""

from __future__ import annotations

import hashlib
from typing import cast

import torch
from torch import Tensor

from .parts import _PARTS, _json

_V1_SINCE_0_1 = {
    "data",
    "num_data",
    "energy",
    "prior",
    "likelihood",
    "partition",
    "log_prob",
    "log_likelihood",
    "log_prior",
}


def _compare_v1(was: dict, now: dict) -> list[str]:
    # a part the checkpoint does not record (written before it was fingerprinted) is not compared
    return [
        f"{_PARTS.get(key, key)} ({key}: {was.get(key)!r} vs {now.get(key)!r})"
        for key in sorted(set(was) | set(now))
        if (key in was or key in _V1_SINCE_0_1) and _json(was.get(key)) != _json(now.get(key))
    ]


def legacy_tensor_fingerprint(t: Tensor, samples: int = 4096) -> str:
    """Version 1: blake2b over up to ``samples`` evenly strided elements, with shape and dtype."""
    flat = t.detach().reshape(-1)
    n = flat.numel()
    if n > samples:
        flat = flat[torch.arange(samples, device=flat.device) * (n - 1) // (samples - 1)]
    raw = flat.contiguous().cpu()
    raw = raw.view(torch.uint8) if raw.dtype != torch.bool else raw.to(torch.uint8)
    h = hashlib.blake2b(raw.numpy().tobytes(), digest_size=10)
    h.update(f"{tuple(t.shape)}{t.dtype}".encode())
    return h.hexdigest()


def _legacy_data(data) -> list | None:
    if data is None:
        return None
    return [
        {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "hash": legacy_tensor_fingerprint(t)}
        for t in data
    ]


def legacy_fingerprint(energy, data=None, source=None, probe=None) -> dict:
    """The version-1 fingerprint, exactly as structmc 0.1 wrote it."""
    return {**legacy_data_fingerprint(data, source, probe), **legacy_energy_fingerprint(energy)}


def legacy_data_fingerprint(data=None, source=None, probe=None) -> dict:
    """Version 1's ``data`` part (a DataSource over tensors was not fingerprinted)."""
    data_fp = _legacy_data(data) if source is None or source.tensors is None else None
    if source is not None and source.dataset is not None:
        # the run passes the Dataset's first items as probe (version 1 hashed them)
        data_fp = [{"dataset": type(source.dataset).__name__, "len": len(source)}] + cast(list, _legacy_data(probe))
    return {"data": data_fp}


def legacy_energy_fingerprint(energy) -> dict:
    """Version 1's energy parts: kinds, ``num_data``, a sum of the prior precision, qualified
    names. Each level of ``energy.levels()`` (outermost first, at most 8) declares its own
    parts in ``describe_v1()``; an outer level's part wins over an inner one's."""
    out: dict = {"num_data": energy.num_data}
    kinds = []
    for e in energy.levels()[:8]:
        kinds.append(type(e).__name__)
        for key, value in e.describe_v1().items():
            out.setdefault(key, value)
    out["energy"] = kinds
    return out
