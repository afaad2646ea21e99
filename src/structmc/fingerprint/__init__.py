"""Fingerprints of a sampling target: what ``resume=True`` compares before it continues a run.

A run folder (``sample(..., out_dir=...)``) or a tuning folder (``mamba(..., out_dir=...)``)
stores the fingerprint of the target it sampled; resuming onto another target would splice two
posteriors into one chain, so any difference is refused, naming the part that changed. The
fingerprint (version :data:`FINGERPRINT_VERSION`) holds, as JSON-friendly parts:

* ``data``: blake2b over every byte of every data tensor (about 0.2 s per 188 MB: 60,000 x 784
  float32 on one CPU core), or over every item of a map-style ``Dataset`` up to
  :data:`DATASET_ITEMS` items (about 1 s per 60,000 items of a tensor-backed one), evenly spaced
  items beyond (the rest is reported as not checked); ``data_transform``: a per-batch transform
  and collate function;
* ``energy`` (the kinds, outermost first), ``num_data``; and the parts each energy declares
  in its ``describe()`` (:class:`structmc.energy.Energy`; a wrapper nests its base's), hashed
  with the helpers below — for structmc's energies:
* ``module``: the module's structure (``repr``, every submodule's class, attributes, train/eval
  mode and hooks; the code of user-defined classes), ``module_state``: its buffers and frozen
  (not sampled) parameters — sampled parameters are the chain's state, not the target;
* ``likelihood``, ``prior`` (every tensor the prior holds, not a summary), ``log_prob`` /
  ``log_likelihood`` / ``log_prior``, ``partition``, ``structured``, ``hierarchical``,
  ``noise`` and, for an energy class defined outside structmc, ``energy_object``.

Callables are hashed by what they compute: bytecode, constants, names, defaults, closure cells
and the globals they load (tensors, numbers, and functions recursively, to a depth of
:data:`MAX_DEPTH`); not by name or line number. Code of ``torch``, ``structmc``, ``numpy`` and
the standard library is identified by its qualified name (and closure values), so upgrading
them keeps a run resumable. Bytecode differs between Python versions: each hashed part keeps its
``code`` digest apart from its ``values`` digest, and a run written under another Python
compares values only (with a warning). What cannot be hashed (a C function of an unknown
extension, an opaque object) is listed under ``unfingerprintable`` and resuming warns that it
was not checked. A package built on structmc declares its code to be identified by name too, and
the name its objects were recorded under before it moved, with :func:`register_library` (:func:`recorded_name` maps a name so; the
papers' reproductions, ``structmc_papers``, recorded as ``structmc.experiments``, their home
until issue 38; ``structmc.hierarchical.HierarchicalEnergy`` is recorded as
``structmc.priors.HierarchicalEnergy``, its first home). Version-1 fingerprints (structmc 0.1, a strided sample of 4,096 data elements
and qualified names) are still compared, on what they recorded, with a warning.
"""

from __future__ import annotations

from .hashing import (
    _LIBRARIES,
    _NOT_TARGET,
    MAX_DEPTH,
    _Hasher,
    _instance_state,
    _library_name,  # noqa: F401
    _loaded_globals,
    _origin_module,
    _qualified,
    _same_builtin,
    _update_tensor,
    recorded_name,
    register_library,
    tensor_digest,
)
from .parts import (
    _DATASET_CHUNK,
    _PARTS,
    DATASET_ITEMS,
    _json,
    data_fingerprint,
    dataset_fingerprint,  # noqa: F401
    json_text,
    module_fingerprint,
    object_fingerprint,
    value_fingerprint,
)
from .targets import (
    _LEVEL_KEYS,
    _META,
    FINGERPRINT_VERSION,
    _change,
    _short,
    _without_code,
    check,  # noqa: F401
    compare,
    energy_fingerprint,
    fingerprint,
    target_fingerprint,
)
from .version1 import (
    _V1_SINCE_0_1,
    _compare_v1,
    _legacy_data,
    legacy_data_fingerprint,  # noqa: F401
    legacy_energy_fingerprint,
    legacy_fingerprint,
    legacy_tensor_fingerprint,
)

# one home for the names of this package, whichever file defines them (hashing: the hasher;
# parts: data, values, modules; targets: an energy's parts, the stored fingerprint, comparison;
# version1: structmc 0.1's), as when it was one module: a fingerprint or a pickle that names one
# of them names structmc.fingerprint. MAX_DEPTH and DATASET_ITEMS are read from here at call time.
for _obj in (
    _Hasher,
    tensor_digest,
    data_fingerprint,
    dataset_fingerprint,
    value_fingerprint,
    object_fingerprint,
    module_fingerprint,
    json_text,
    energy_fingerprint,
    target_fingerprint,
    fingerprint,
    compare,
    check,
    legacy_fingerprint,
    legacy_data_fingerprint,
    legacy_energy_fingerprint,
    legacy_tensor_fingerprint,
    recorded_name,
    register_library,
):
    _obj.__module__ = __name__
del _obj

__all__ = [
    "FINGERPRINT_VERSION",
    "DATASET_ITEMS",
    "tensor_digest",
    "data_fingerprint",
    "dataset_fingerprint",
    "value_fingerprint",
    "object_fingerprint",
    "module_fingerprint",
    "energy_fingerprint",
    "target_fingerprint",
    "fingerprint",
    "compare",
    "check",
    "legacy_fingerprint",
    "legacy_data_fingerprint",
    "legacy_energy_fingerprint",
    "register_library",
    "recorded_name",
]
