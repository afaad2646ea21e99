"""The parts of a fingerprint (:mod:`structmc.fingerprint`): the data (tensors or a map-style
Dataset), any value or object, a module's structure and state; their labels, and canonical JSON."""

from __future__ import annotations

import hashlib
import json

from torch import nn

from .hashing import _Hasher, _instance_state, _setting, _update_tensor, tensor_digest

DATASET_ITEMS = 100_000  # a Dataset longer than this is hashed on this many evenly spaced items
_DATASET_CHUNK = 1024
_PARTS = {
    "data": "the data",
    "data_transform": "the data's transform or collate_fn",
    "num_data": "the energy's num_data",
    "energy": "the energy's kind",
    "module": "the module's structure or code",
    "module_state": "the module's buffers or frozen (not sampled) parameters",
    "likelihood": "the likelihood",
    "prior": "the prior",
    "log_prob": "the log density",
    "log_likelihood": "the log-likelihood",
    "log_prior": "the log prior",
    "partition": "the partition",
    "structured": "the structured energy's settings",
    "hierarchical": "the hierarchical prior",
    "noise": "the gradient noise",
    "energy_object": "the energy object",
}


def data_fingerprint(data=None, source=None) -> dict:
    """The ``data`` part (plus ``data_transform`` and ``unfingerprintable`` where they apply) for
    in-memory tensors ``data`` or a :class:`~structmc.batching.DataSource` ``source``."""
    out: dict = {"data": None}
    unchecked: list[str] = []
    if data is not None:
        out["data"] = [
            {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "hash": tensor_digest(t)}
            for t in data
        ]
    elif source is not None and getattr(source, "dataset", None) is not None:
        out["data"], missing = dataset_fingerprint(source)
        unchecked += missing
    if source is not None and (source.transform is not None or source.collate_fn is not None):
        out["data_transform"], missing = value_fingerprint(
            {"transform": source.transform, "collate_fn": source.collate_fn}, "the data's transform"
        )
        unchecked += missing
    if unchecked:
        out["unfingerprintable"] = unchecked
    return out


def dataset_fingerprint(source, max_items: int | None = None) -> tuple[dict, list[str]]:
    """Every item of a map-style Dataset (as collated for the run), up to ``max_items`` (default
    :data:`DATASET_ITEMS`) evenly spaced ones for a longer one; returns the part and what was
    left unchecked."""
    max_items = _setting("DATASET_ITEMS") if max_items is None else int(max_items)
    n = len(source)
    if n <= max_items:
        indices = list(range(n))
    else:
        indices = sorted({i * (n - 1) // (max_items - 1) for i in range(max_items)})
    h = hashlib.blake2b(digest_size=16)
    for start in range(0, len(indices), _DATASET_CHUNK):
        for t in source.collate(indices[start : start + _DATASET_CHUNK]):
            h.update(f"{tuple(t.shape)}{t.dtype}".encode())
            _update_tensor(h, t)
    ds = source.dataset
    part = {
        "dataset": f"{type(ds).__module__}.{type(ds).__qualname__}",
        "len": n,
        "items": len(indices),
        "hash": h.hexdigest(),
    }
    missing = (
        []
        if len(indices) == n
        else [
            f"the data: {n - len(indices)} of the Dataset's {n} items (only {len(indices)} evenly spaced items are "
            f"hashed; structmc.fingerprint.DATASET_ITEMS = {max_items})"
        ]
    )
    return part, missing


def value_fingerprint(obj, name: str) -> tuple[dict, list[str]]:
    """``({"values": hex, "code": hex}, unfingerprintable)`` of any object (a callable, a module,
    a container of tensors): see :mod:`structmc.fingerprint` for what is hashed."""
    h = _Hasher()
    h.feed(obj, name, 0)
    return h.result(), h.unchecked


def object_fingerprint(obj, name: str, exclude=()) -> tuple[dict, list[str]]:
    """:func:`value_fingerprint` of ``obj``'s class (its code included) and its attributes (but
    those named in ``exclude``): an energy class's :meth:`~structmc.energy.EnergyBase.describe`."""
    state = {k: v for k, v in (_instance_state(obj) or {}).items() if k not in exclude}
    return value_fingerprint((type(obj), state), name)


def module_fingerprint(module: nn.Module, sampled: set[str] | frozenset = frozenset()) -> tuple[dict, dict, list[str]]:
    """``(structure, state, unfingerprintable)`` of a module: ``state`` hashes its buffers and
    the parameters not named in ``sampled``."""
    h, s = _Hasher(), _Hasher()
    try:
        h.module_structure(module, "the module", 0)
    except Exception as err:  # e.g. a broken extra_repr
        h.unchecked.append(f"the module's structure (fingerprinting it failed: {type(err).__name__}: {err})")
    s.module_state(module, sampled)
    return h.result(), s.result()["values"], h.unchecked


def json_text(x) -> str:
    """``x`` as canonical JSON text (sorted keys; what JSON cannot hold as its ``str``)."""
    return json.dumps(x, sort_keys=True, default=str)


_json = json_text
