"""Targets and their comparison (:mod:`structmc.fingerprint`): the energy's parts from its
``describe()``, the stored fingerprint of a target, and what ``resume=True`` compares."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Mapping

from .parts import _PARTS, _json, data_fingerprint
from .version1 import _compare_v1, legacy_fingerprint

FINGERPRINT_VERSION = 2
_META = ("fingerprint_version", "python", "unfingerprintable", "v1")
_LEVEL_KEYS = ("kind", "base", "unfingerprintable")  # of a describe() level: not parts


def energy_fingerprint(energy) -> dict:
    """The energy's parts of the fingerprint, from ``energy.describe()`` (see
    :class:`structmc.energy.Energy`): ``num_data``, ``energy`` (the kinds, outermost first) and,
    outermost first, every part a level describes (a wrapper nests its base's description under
    ``base``); ``unfingerprintable`` gathers what no level could hash."""
    out: dict = {"num_data": energy.num_data}
    kinds: list[str | None] = []
    unchecked: list[str] = []
    level = energy.describe()
    try:
        json.dumps(level)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"{type(energy).__name__}.describe() must return a JSON-able dict (numbers, strings, lists, "
            f"dicts; hash tensors and functions with structmc.fingerprint): {err}"
        ) from None
    while isinstance(level, Mapping):
        kinds.append(level.get("kind"))
        for key, value in level.items():
            if key not in _LEVEL_KEYS and key not in out:
                out[key] = value
        unchecked.extend(level.get("unfingerprintable", ()))
        level = level.get("base")
    out["energy"] = kinds
    if unchecked:
        out["unfingerprintable"] = unchecked
    return out


def target_fingerprint(energy_parts: dict, data_parts: dict, legacy: dict | None = None) -> dict:
    """The stored fingerprint: version, Python version, the energy's and the data's parts,
    ``unfingerprintable`` and (``legacy``) the version-1 fingerprint, compared against
    checkpoints written by structmc 0.1."""
    out = {
        "fingerprint_version": FINGERPRINT_VERSION,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        **{k: v for k, v in energy_parts.items() if k != "unfingerprintable"},
        **{k: v for k, v in data_parts.items() if k != "unfingerprintable"},
    }
    unchecked = [*energy_parts.get("unfingerprintable", ()), *data_parts.get("unfingerprintable", ())]
    if unchecked:
        out["unfingerprintable"] = unchecked
    if legacy is not None:
        out["v1"] = legacy
    return out


def fingerprint(energy, data=None, source=None, probe=None) -> dict:
    """:func:`target_fingerprint` of an energy and its data (tensors, or a DataSource whose
    first items are ``probe``), with the version-1 fingerprint alongside."""
    return target_fingerprint(
        energy_fingerprint(energy), data_fingerprint(data, source), legacy_fingerprint(energy, data, source, probe)
    )


# ---------------------------------------------------------------------------------------------
# comparison
# ---------------------------------------------------------------------------------------------
def compare(old: dict | None, new: dict) -> tuple[list[str], list[str]]:
    """``(changes, warnings)`` between a stored fingerprint ``old`` and the current ``new``: each
    change names the part (``"the data (...)"``); warnings say what could not be checked."""
    if old is None:
        return [], [
            "the checkpoint was written before targets were fingerprinted: the target could not be "
            "checked (make sure it is the one the run started with)"
        ]
    version = old.get("fingerprint_version", 1)
    if not isinstance(version, int) or version > FINGERPRINT_VERSION:
        raise ValueError(
            f"cannot resume: the target fingerprint has version {version!r}, newer than this "
            f"structmc understands ({FINGERPRINT_VERSION}): upgrade structmc"
        )
    if version == 1:
        return _compare_v1(old, new.get("v1", {})), [
            "the checkpoint was written by an older structmc: the target was checked with its weaker fingerprint "
            "(a strided sample of the data and the names of the functions, not their code nor the module's forward)"
        ]
    warns: list[str] = []
    same_python = old.get("python") == new.get("python")
    was, now = dict(old), dict(new)
    if not same_python:
        was, now = _without_code(was), _without_code(now)
        warns.append(
            f"the checkpoint was written under Python {old.get('python')} and this is Python "
            f"{new.get('python')}: bytecode differs between them, so the code of the functions and "
            f"module classes was not compared (their values were)"
        )
    changes = [
        _change(key, was.get(key), now.get(key))
        for key in sorted((set(was) | set(now)) - set(_META))
        if _json(was.get(key)) != _json(now.get(key))
    ]
    unchecked = list(dict.fromkeys([*old.get("unfingerprintable", ()), *new.get("unfingerprintable", ())]))
    if unchecked:
        warns.append(
            "these parts of the target could not be fingerprinted, so resuming cannot tell whether "
            "they changed: " + "; ".join(unchecked)
        )
    return changes, warns


def check(old: dict | None, new: dict, what: str = "the checkpoint") -> None:
    """``ValueError`` naming every changed part; ``UserWarning`` for what could not be checked."""
    changes, warns = compare(old, new)
    if changes:
        raise ValueError(
            f"cannot resume: the target changed since {what}: "
            + "; ".join(changes)
            + " (resume only onto the same target; start a new run in another out_dir for this one)"
        )
    for w in warns:
        warnings.warn(f"resuming from {what}: {w}", stacklevel=3)


def _without_code(x):
    if isinstance(x, dict):
        return {k: _without_code(v) for k, v in x.items() if k != "code"}
    if isinstance(x, list):
        return [_without_code(v) for v in x]
    return x


def _change(key: str, was, now) -> str:
    label = _PARTS.get(key, key)
    if isinstance(was, list) and isinstance(now, list) and len(was) == len(now):
        which = [i for i, (a, b) in enumerate(zip(was, now)) if _json(a) != _json(b)]
        return f"{label} ({key}: entry {which[0]} of {len(was)}: {_short(was[which[0]])} vs {_short(now[which[0]])})"
    if isinstance(was, dict) and isinstance(now, dict):
        which = [k for k in sorted(set(was) | set(now)) if _json(was.get(k)) != _json(now.get(k))]
        fields = ", ".join(f"{k}: {_short(was.get(k))} vs {_short(now.get(k))}" for k in which[:3])
        return f"{label} ({key}: {fields})"
    return f"{label} ({key}: {_short(was)} vs {_short(now)})"


def _short(x, n: int = 100) -> str:
    s = repr(x)
    return s if len(s) <= n else s[: n - 3] + "..."
