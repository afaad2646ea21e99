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
was not checked. Version-1 fingerprints (structmc 0.1, a strided sample of 4,096 data elements
and qualified names) are still compared, on what they recorded, with a warning.
"""

from __future__ import annotations

import builtins
import dis
import functools
import hashlib
import json
import re
import sys
import types
import warnings
from collections.abc import Mapping

import torch
from torch import Tensor, nn

FINGERPRINT_VERSION = 2
DATASET_ITEMS = 100_000  # a Dataset longer than this is hashed on this many evenly spaced items
MAX_DEPTH = 8             # nesting followed through closures, globals, attributes and containers
_DATASET_CHUNK = 1024
_LIBRARIES = {"torch", "structmc", "numpy", "scipy", "math", "cmath", "builtins", "operator", "_operator",
              "functools", "_functools", "itertools", "collections", "typing", "abc", "_abc", "random", "statistics"}
# attributes of structmc objects that are not part of the target: a bound prior's parameter
# space (in the run's settings already) and the tensor a flat prior was bound "like" (a view of
# the module's current parameters, which the chain overwrites); and whether a bound Normal uses
# the fused forms of ModuleEnergy's prior_std (how it rounds, not which density it is)
_NOT_TARGET = {"structmc.priors": ("space", "_like", "_fused")}
_META = ("fingerprint_version", "python", "unfingerprintable", "v1")
_LEVEL_KEYS = ("kind", "base", "unfingerprintable")  # of a describe() level: not parts
_PARTS = {
    "data": "the data", "data_transform": "the data's transform or collate_fn", "num_data": "the energy's num_data",
    "energy": "the energy's kind", "module": "the module's structure or code",
    "module_state": "the module's buffers or frozen (not sampled) parameters", "likelihood": "the likelihood",
    "prior": "the prior", "log_prob": "the log density", "log_likelihood": "the log-likelihood",
    "log_prior": "the log prior", "partition": "the partition", "structured": "the structured energy's settings",
    "hierarchical": "the hierarchical prior", "noise": "the gradient noise", "energy_object": "the energy object",
}


# ---------------------------------------------------------------------------------------------
# tensors and data
# ---------------------------------------------------------------------------------------------
def tensor_digest(t: Tensor) -> str:
    """blake2b over every byte of ``t`` (any device, dtype, layout), with its shape and dtype."""
    h = hashlib.blake2b(f"{tuple(t.shape)}{t.dtype}".encode(), digest_size=16)
    _update_tensor(h, t)
    return h.hexdigest()


def _update_tensor(h, t: Tensor) -> None:
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    flat = t.reshape(-1).contiguous().cpu()
    raw = flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
    h.update(memoryview(raw.numpy()))


def data_fingerprint(data=None, source=None) -> dict:
    """The ``data`` part (plus ``data_transform`` and ``unfingerprintable`` where they apply) for
    in-memory tensors ``data`` or a :class:`~structmc.batching.DataSource` ``source``."""
    out: dict = {"data": None}
    unchecked: list[str] = []
    if data is not None:
        out["data"] = [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "hash": tensor_digest(t)}
                       for t in data]
    elif source is not None and getattr(source, "dataset", None) is not None:
        out["data"], missing = dataset_fingerprint(source)
        unchecked += missing
    if source is not None and (source.transform is not None or source.collate_fn is not None):
        out["data_transform"], missing = value_fingerprint(
            {"transform": source.transform, "collate_fn": source.collate_fn}, "the data's transform")
        unchecked += missing
    if unchecked:
        out["unfingerprintable"] = unchecked
    return out


def dataset_fingerprint(source, max_items: int | None = None) -> tuple[dict, list[str]]:
    """Every item of a map-style Dataset (as collated for the run), up to ``max_items`` (default
    :data:`DATASET_ITEMS`) evenly spaced ones for a longer one; returns the part and what was
    left unchecked."""
    max_items = DATASET_ITEMS if max_items is None else int(max_items)
    n = len(source)
    if n <= max_items:
        indices = range(n)
    else:
        indices = sorted({i * (n - 1) // (max_items - 1) for i in range(max_items)})
    h = hashlib.blake2b(digest_size=16)
    indices = list(indices)
    for start in range(0, len(indices), _DATASET_CHUNK):
        for t in source.collate(indices[start:start + _DATASET_CHUNK]):
            h.update(f"{tuple(t.shape)}{t.dtype}".encode())
            _update_tensor(h, t)
    ds = source.dataset
    part = {"dataset": f"{type(ds).__module__}.{type(ds).__qualname__}", "len": n, "items": len(indices),
            "hash": h.hexdigest()}
    missing = [] if len(indices) == n else [
        f"the data: {n - len(indices)} of the Dataset's {n} items (only {len(indices)} evenly spaced items are "
        f"hashed; structmc.fingerprint.DATASET_ITEMS = {max_items})"]
    return part, missing


# ---------------------------------------------------------------------------------------------
# values and code
# ---------------------------------------------------------------------------------------------
def value_fingerprint(obj, name: str) -> tuple[dict, list[str]]:
    """``({"values": hex, "code": hex}, unfingerprintable)`` of any object (a callable, a module,
    a container of tensors): see the module docstring for what is hashed."""
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


class _Hasher:
    """Two blake2b streams: ``values`` (data, numbers, structure) and ``code`` (bytecode,
    constants, names); ``unchecked`` lists what could not be hashed."""

    def __init__(self):
        self.values = hashlib.blake2b(digest_size=16)
        self.code = hashlib.blake2b(digest_size=16)
        self.unchecked: list[str] = []
        self._stack: set[int] = set()  # objects being hashed: a reference back to one is a cycle

    def result(self) -> dict:
        return {"values": self.values.hexdigest(), "code": self.code.hexdigest()}

    def put(self, *items) -> None:
        for x in items:
            self.values.update(repr(x).encode() + b"\x00")

    def put_code(self, *items) -> None:
        for x in items:
            self.code.update(repr(x).encode() + b"\x00")

    def feed(self, x, name: str, depth: int) -> None:
        if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
            self.put(type(x).__name__, x)
            return
        if isinstance(x, (torch.dtype, torch.device, torch.Size, slice, range, type(Ellipsis), type(NotImplemented))):
            self.put(type(x).__name__, str(x))
            return
        if isinstance(x, Tensor):
            try:
                self.put("tensor", tensor_digest(x))
            except Exception as err:  # meta tensors, tensor subclasses without storage
                self.put("tensor", tuple(x.shape), str(x.dtype))
                self.unchecked.append(f"{name} (a tensor whose values cannot be read: {err})")
            return
        if isinstance(x, torch.Generator):  # a random state, not a definition of the target
            self.put("generator")
            return
        if depth > MAX_DEPTH:
            self.put("too deep", type(x).__qualname__)
            self.unchecked.append(f"{name} (nested deeper than {MAX_DEPTH} levels)")
            return
        np = sys.modules.get("numpy")
        if np is not None and isinstance(x, np.generic):
            self.put(type(x).__name__, x.item() if x.dtype != object else repr(type(x)))
            return
        if np is not None and isinstance(x, np.ndarray):
            if x.dtype == object:
                self.put("ndarray[object]", x.shape)
                for i, v in enumerate(x.reshape(-1)):
                    self.feed(v, f"{name}[{i}]", depth + 1)
            else:
                self.put("ndarray", x.shape, str(x.dtype))
                self.values.update(memoryview(np.ascontiguousarray(x)).cast("B"))
            return
        if isinstance(x, types.ModuleType):
            self.put("module", x.__name__)
            return
        if id(x) in self._stack:  # a cycle (a recursive function, a class's own methods)
            self.put("cycle", type(x).__qualname__)
            return
        self._stack.add(id(x))
        try:
            self._feed_object(x, name, depth)
        except Exception as err:  # an object that breaks when inspected: say so, never stop the run
            self.put("failed", type(x).__qualname__, type(err).__name__)
            self.unchecked.append(f"{name} (fingerprinting it failed: {type(err).__name__}: {err})")
        finally:
            self._stack.discard(id(x))

    def _feed_object(self, x, name: str, depth: int) -> None:
        # shared objects are hashed at every reference: the digest does not depend on which equal
        # objects happen to be one object (that differs between processes)
        if isinstance(x, (list, tuple)):
            self.put(type(x).__name__, len(x))
            for i, v in enumerate(x):
                self.feed(v, f"{name}[{i}]", depth + 1)
        elif isinstance(x, Mapping):
            self.put(type(x).__name__, len(x))
            for k, v in sorted(x.items(), key=lambda kv: repr(kv[0])):
                self.feed(k, f"{name} key", depth + 1)
                self.feed(v, f"{name}[{k!r}]", depth + 1)
        elif isinstance(x, (set, frozenset)):
            subs = sorted(value_fingerprint(v, name)[0]["values"] for v in x)
            self.put(type(x).__name__, subs)
        elif isinstance(x, nn.Module):
            self.module_structure(x, name, depth)
            self.module_state(x, frozenset())
        elif isinstance(x, types.FunctionType):
            self.function(x, name, depth)
        elif isinstance(x, types.MethodType):
            self.put("method", x.__func__.__name__)
            self.feed(x.__func__, name, depth + 1)
            self.feed(x.__self__, f"{name}.__self__", depth + 1)
        elif isinstance(x, functools.partial):
            self.put("partial")
            self.feed(x.func, name, depth + 1)
            self.feed(x.args, f"{name} args", depth + 1)
            self.feed(x.keywords, f"{name} keywords", depth + 1)
        elif isinstance(x, (staticmethod, classmethod)):
            self.put(type(x).__name__)
            self.feed(x.__func__, name, depth + 1)
        elif isinstance(x, property):
            self.put("property")
            for f in (x.fget, x.fset, x.fdel):
                self.feed(f, name, depth + 1)
        elif isinstance(x, types.CodeType):
            self.code_object(x)
        elif isinstance(x, type):
            self.cls(x, name, depth)
        elif callable(x) and not hasattr(x, "__dict__") and not hasattr(type(x), "__slots__"):
            self.builtin(x, name, depth)
        else:
            self.instance(x, name, depth)

    # -- callables -----------------------------------------------------------------------------
    def function(self, f: types.FunctionType, name: str, depth: int) -> None:
        lib = _library_name(f)
        if lib is not None:  # identified by name; its closure and defaults still count
            self.put("library function", lib)
        else:
            self.put("function")
            self.code_object(f.__code__)
        self.feed(f.__defaults__, f"{name} defaults", depth + 1)
        self.feed(f.__kwdefaults__, f"{name} keyword defaults", depth + 1)
        cells = f.__closure__ or ()
        for var, cell in zip(f.__code__.co_freevars, cells):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned after the function was made)
                self.put("empty cell", var)
                continue
            self.put("cell", var)
            self.feed(value, f"{name} (its closure variable {var!r})", depth + 1)
        if lib is None:
            g = f.__globals__
            for var in sorted(_loaded_globals(f.__code__)):
                if var in g:
                    self.put("global", var)
                    self.feed(g[var], f"{name} (its global {var!r})", depth + 1)
                elif hasattr(builtins, var):
                    self.put("builtin", var)
                else:
                    self.put("missing global", var)

    def code_object(self, c: types.CodeType) -> None:
        # bytecode and what it refers to; not the name, file or line numbers
        self.code.update(c.co_code)
        self.put_code(c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_flags, c.co_names,
                      c.co_varnames, c.co_freevars, c.co_cellvars)
        table = getattr(c, "co_exceptiontable", None)
        if table is not None:
            self.code.update(table)
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                self.put_code("code")
                self.code_object(const)
            elif isinstance(const, frozenset):
                self.put_code("frozenset", sorted(repr(v) for v in const))
            else:
                self.put_code(type(const).__name__, const)

    def builtin(self, f, name: str, depth: int) -> None:
        self_ = getattr(f, "__self__", None)
        if self_ is not None and not isinstance(self_, (types.ModuleType, type)):  # e.g. tensor.add
            self.put("bound builtin", getattr(f, "__name__", type(f).__name__))
            self.feed(self_, f"{name}.__self__", depth + 1)
            return
        lib = _library_name(f)
        label = lib or _qualified(f)
        self.put("builtin", label)
        if lib is None:
            self.unchecked.append(f"{name} ({label}: compiled code, its name is checked but not what it computes)")

    def cls(self, c: type, name: str, depth: int) -> None:
        lib = _library_name(c)
        if lib is not None:
            self.put("library class", lib)
            return
        self.put("class", c.__qualname__)
        for base in c.__mro__[1:]:
            self.feed(base, f"{name} base {base.__qualname__}", depth + 1)
        for key in sorted(vars(c)):
            if key in ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
                       "__slotnames__", "__parameters__", "__orig_bases__", "__abstractmethods__", "_abc_impl"):
                continue
            self.put("attribute", key)
            self.feed(vars(c)[key], f"{name}.{key}", depth + 1)

    def instance(self, x, name: str, depth: int) -> None:
        self.feed(type(x), f"{name} (its class)", depth + 1)
        state = _instance_state(x)
        if state is None:
            self.put("opaque", _qualified(type(x)))
            self.unchecked.append(f"{name} (a {_qualified(type(x))} object whose contents cannot be read)")
            return
        skip = _NOT_TARGET.get(_origin_module(type(x)), ())
        for key in sorted(state):
            if key in skip:
                continue
            self.put("attribute", key)
            self.feed(state[key], f"{name}.{key}", depth + 1)

    # -- modules -------------------------------------------------------------------------------
    def module_structure(self, module: nn.Module, name: str, depth: int) -> None:
        self.put("nn.Module", re.sub(r"0x[0-9a-fA-F]+", "0x", repr(module)))
        for sub_name, sub in module.named_modules(remove_duplicate=False):
            where = f"{name} submodule {sub_name!r}" if sub_name else name
            self.put("submodule", sub_name, sub.training)
            self.feed(type(sub), f"{where} (its class)", depth + 1)
            for key in sorted(vars(sub)):
                value = vars(sub)[key]
                if key in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                           "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs"):
                    if value:
                        self.put("hooks", key)
                        self.feed(list(value.values()), f"{where} {key}", depth + 1)
                elif not key.startswith("_") and key != "training":
                    self.put("attribute", key)
                    self.feed(value, f"{where}.{key}", depth + 1)

    def module_state(self, module: nn.Module, sampled) -> None:
        """Buffers (BatchNorm running statistics of a layer in training mode excepted: the forward
        updates them and does not read them) and the parameters not in ``sampled``."""
        from torch.nn.modules.batchnorm import _BatchNorm

        skip = set()
        for sub_name, sub in module.named_modules():
            if isinstance(sub, _BatchNorm) and sub.training:
                prefix = f"{sub_name}." if sub_name else ""
                skip |= {prefix + b for b in ("running_mean", "running_var", "num_batches_tracked")}
        for key, buf in module.named_buffers():
            if key not in skip and buf is not None:
                self.put("buffer", key, tensor_digest(buf))
        for key, p in module.named_parameters():
            if key not in sampled:
                self.put("parameter", key, tensor_digest(p))


def _instance_state(x) -> dict | None:
    state: dict = {}
    d = getattr(x, "__dict__", None)
    if isinstance(d, dict):
        state.update(d)
    for klass in type(x).__mro__:
        for slot in getattr(klass, "__slots__", ()) if isinstance(getattr(klass, "__slots__", ()), (tuple, list)) else ():
            if slot not in ("__dict__", "__weakref__") and hasattr(x, slot):
                state[slot] = getattr(x, slot)
    if not state and d is None and not getattr(type(x), "__slots__", None):
        return None
    return state


def _loaded_globals(code: types.CodeType) -> set[str]:
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            names.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _loaded_globals(const)
    return names


def _origin_module(obj) -> str | None:
    mod = getattr(obj, "__module__", None)
    if not isinstance(mod, str):
        owner = getattr(obj, "__objclass__", None) or getattr(obj, "__self__", None)
        if isinstance(owner, types.ModuleType):
            mod = owner.__name__
        elif owner is not None:
            mod = getattr(owner, "__module__", None) if isinstance(owner, type) else type(owner).__module__
    return mod if isinstance(mod, str) else None


def _qualified(obj) -> str:
    mod = _origin_module(obj)
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{mod}.{qual}" if mod else str(qual)


def _library_name(obj) -> str | None:
    """``module.qualname`` of an object of a library (torch, structmc, numpy, the standard
    library) that its name identifies: importable under it, or a closure made by library code
    (whose cell values are hashed); ``None`` for anything else (user code is hashed)."""
    mod = _origin_module(obj)
    if mod is None or mod.split(".")[0] not in _LIBRARIES:
        return None
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if isinstance(qual, str) and "<locals>" not in qual:
        found = sys.modules.get(mod)
        for part in qual.split("."):
            found = getattr(found, part, None)
        if found is not obj and not _same_builtin(found, obj):  # torch.sin: found as torch.sin, not by qualname
            found = getattr(sys.modules.get(mod), getattr(obj, "__name__", "") or "", None)
        if found is not obj and not _same_builtin(found, obj):  # e.g. a class exec'd with no __name__
            return None
    return _qualified(obj)


def _same_builtin(a, b) -> bool:
    # builtin methods are made anew on every attribute access (torch.sin is a bound method of
    # torch._C._VariableFunctions): compare what they are bound to and their name
    return (a is not None and type(a) is type(b) and getattr(a, "__self__", None) is getattr(b, "__self__", None)
            and getattr(a, "__name__", None) == getattr(b, "__name__", None))


# ---------------------------------------------------------------------------------------------
# energies and targets
# ---------------------------------------------------------------------------------------------
def energy_fingerprint(energy) -> dict:
    """The energy's parts of the fingerprint, from ``energy.describe()`` (see
    :class:`structmc.energy.Energy`): ``num_data``, ``energy`` (the kinds, outermost first) and,
    outermost first, every part a level describes (a wrapper nests its base's description under
    ``base``); ``unfingerprintable`` gathers what no level could hash."""
    out: dict = {"num_data": energy.num_data}
    kinds: list[str] = []
    unchecked: list[str] = []
    level = energy.describe()
    try:
        json.dumps(level)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{type(energy).__name__}.describe() must return a JSON-able dict (numbers, strings, lists, "
                        f"dicts; hash tensors and functions with structmc.fingerprint): {err}") from None
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
    out = {"fingerprint_version": FINGERPRINT_VERSION, "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
           **{k: v for k, v in energy_parts.items() if k != "unfingerprintable"},
           **{k: v for k, v in data_parts.items() if k != "unfingerprintable"}}
    unchecked = [*energy_parts.get("unfingerprintable", ()), *data_parts.get("unfingerprintable", ())]
    if unchecked:
        out["unfingerprintable"] = unchecked
    if legacy is not None:
        out["v1"] = legacy
    return out


def fingerprint(energy, data=None, source=None, probe=None) -> dict:
    """:func:`target_fingerprint` of an energy and its data (tensors, or a DataSource whose
    first items are ``probe``), with the version-1 fingerprint alongside."""
    return target_fingerprint(energy_fingerprint(energy), data_fingerprint(data, source),
                              legacy_fingerprint(energy, data, source, probe))


# ---------------------------------------------------------------------------------------------
# comparison
# ---------------------------------------------------------------------------------------------
def compare(old: dict | None, new: dict) -> tuple[list[str], list[str]]:
    """``(changes, warnings)`` between a stored fingerprint ``old`` and the current ``new``: each
    change names the part (``"the data (...)"``); warnings say what could not be checked."""
    if old is None:
        return [], ["the checkpoint was written before targets were fingerprinted: the target could not be "
                    "checked (make sure it is the one the run started with)"]
    version = old.get("fingerprint_version", 1)
    if not isinstance(version, int) or version > FINGERPRINT_VERSION:
        raise ValueError(f"cannot resume: the target fingerprint has version {version!r}, newer than this "
                         f"structmc understands ({FINGERPRINT_VERSION}): upgrade structmc")
    if version == 1:
        return _compare_v1(old, new.get("v1", {})), [
            "the checkpoint was written by an older structmc: the target was checked with its weaker fingerprint "
            "(a strided sample of the data and the names of the functions, not their code nor the module's forward)"]
    warns: list[str] = []
    same_python = old.get("python") == new.get("python")
    was, now = dict(old), dict(new)
    if not same_python:
        was, now = _without_code(was), _without_code(now)
        warns.append(f"the checkpoint was written under Python {old.get('python')} and this is Python "
                     f"{new.get('python')}: bytecode differs between them, so the code of the functions and "
                     f"module classes was not compared (their values were)")
    changes = [_change(key, was.get(key), now.get(key)) for key in sorted((set(was) | set(now)) - set(_META))
               if _json(was.get(key)) != _json(now.get(key))]
    unchecked = list(dict.fromkeys([*old.get("unfingerprintable", ()), *new.get("unfingerprintable", ())]))
    if unchecked:
        warns.append("these parts of the target could not be fingerprinted, so resuming cannot tell whether "
                     "they changed: " + "; ".join(unchecked))
    return changes, warns


def check(old: dict | None, new: dict, what: str = "the checkpoint") -> None:
    """``ValueError`` naming every changed part; ``UserWarning`` for what could not be checked."""
    changes, warns = compare(old, new)
    if changes:
        raise ValueError(f"cannot resume: the target changed since {what}: " + "; ".join(changes) +
                         " (resume only onto the same target; start a new run in another out_dir for this one)")
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


def json_text(x) -> str:
    """``x`` as canonical JSON text (sorted keys; what JSON cannot hold as its ``str``)."""
    return json.dumps(x, sort_keys=True, default=str)


_json = json_text


# ---------------------------------------------------------------------------------------------
# version 1 (structmc 0.1): kept to compare checkpoints written then
# ---------------------------------------------------------------------------------------------
_V1_SINCE_0_1 = {"data", "num_data", "energy", "prior", "likelihood", "partition", "log_prob", "log_likelihood",
                 "log_prior"}


def _compare_v1(was: dict, now: dict) -> list[str]:
    # a part the checkpoint does not record (written before it was fingerprinted) is not compared
    return [f"{_PARTS.get(key, key)} ({key}: {was.get(key)!r} vs {now.get(key)!r})"
            for key in sorted(set(was) | set(now))
            if (key in was or key in _V1_SINCE_0_1) and _json(was.get(key)) != _json(now.get(key))]


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
    return [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "hash": legacy_tensor_fingerprint(t)}
            for t in data]


def legacy_fingerprint(energy, data=None, source=None, probe=None) -> dict:
    """The version-1 fingerprint, exactly as structmc 0.1 wrote it."""
    return {**legacy_data_fingerprint(data, source, probe), **legacy_energy_fingerprint(energy)}


def legacy_data_fingerprint(data=None, source=None, probe=None) -> dict:
    """Version 1's ``data`` part (a DataSource over tensors was not fingerprinted)."""
    data_fp = _legacy_data(data) if source is None or source.tensors is None else None
    if source is not None and source.dataset is not None:
        data_fp = [{"dataset": type(source.dataset).__name__, "len": len(source)}] + _legacy_data(probe)
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


__all__ = ["FINGERPRINT_VERSION", "DATASET_ITEMS", "tensor_digest", "data_fingerprint", "dataset_fingerprint",
           "value_fingerprint", "object_fingerprint", "module_fingerprint", "energy_fingerprint", "target_fingerprint", "fingerprint",
           "compare", "check", "legacy_fingerprint", "legacy_data_fingerprint", "legacy_energy_fingerprint"]
