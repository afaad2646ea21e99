"""The hasher of :mod:`structmc.fingerprint`: blake2b digests of tensors, and of any object
(callables by what they compute, modules by structure and state) as two streams, ``values`` and
``code`` (see the package docstring for what is hashed and what is identified by name)."""

from __future__ import annotations

import builtins
import dis
import functools
import hashlib
import re
import sys
import types
from collections.abc import Mapping

import torch
from torch import Tensor, nn

MAX_DEPTH = 8  # nesting followed through closures, globals, attributes and containers
_LIBRARIES = {
    "torch",
    "structmc",
    "numpy",
    "scipy",
    "math",
    "cmath",
    "builtins",
    "operator",
    "_operator",
    "functools",
    "_functools",
    "itertools",
    "collections",
    "typing",
    "abc",
    "_abc",
    "random",
    "statistics",
    # Hugging Face models (ModuleEnergy(input_keys=...)): installed libraries, identified by name
    # as torch is. Hashed by what they compute, a transformers model's code graph is followed at
    # every reference, 8 levels deep: a tiny BERT's run fingerprint had not finished after minutes
    "transformers",
    "peft",
    "accelerate",
    "huggingface_hub",
    "safetensors",
    "tokenizers",
}
# Names recorded in place of the current ones (issue 38): a qualified-name prefix (a package, a
# module or one object) -> the name it is recorded under, so that a run folder written before a
# move still resumes (its fingerprint named the old home). Built in: HierarchicalEnergy, which
# lived in structmc.priors when runs were first written; a companion package adds its own with
# register_library (structmc_papers: the former structmc.experiments).
_RECORDED_AS: dict[str, str] = {"structmc.hierarchical.HierarchicalEnergy": "structmc.priors.HierarchicalEnergy"}


def register_library(package: str, recorded_as: str | None = None) -> None:
    """Identify the code of ``package`` (a top-level package name, e.g. ``"structmc_papers"``)
    by its qualified name, as structmc's own is, instead of hashing what it computes: upgrading
    it keeps a run resumable. With ``recorded_as``, its names are recorded under that prefix in
    place of ``package`` (``register_library("structmc_papers", recorded_as="structmc.experiments")``:
    the package's former home), so that fingerprints written before it moved still match.

    Public: the hook through which a package built on structmc (the papers' reproductions,
    ``structmc_papers``) declares itself; structmc never imports such a package."""
    if not package.isidentifier():
        raise ValueError(f"register_library: {package!r} is not a top-level package name")
    _LIBRARIES.add(package)
    if recorded_as is not None:
        if recorded_as.split(".")[0] not in _LIBRARIES:
            raise ValueError(f"register_library: {recorded_as!r} is not under a library's name")
        _RECORDED_AS[package] = recorded_as


def recorded_name(name: str) -> str:
    """A qualified name (``"structmc_papers._common.log_loss_metric"``) as run and tuning folders
    record it: under the former name a package declared with :func:`register_library`
    (``"structmc.experiments._common.log_loss_metric"``), else unchanged. What a folder records
    by name (a tuning metric's function) goes through it, so that resuming compares like names."""
    return _recorded(name)


def _recorded(name: str) -> str:
    """``name`` as fingerprints record it (:data:`_RECORDED_AS`, the longest matching prefix)."""
    for current in sorted(_RECORDED_AS, key=len, reverse=True):
        if name == current or name.startswith(current + "."):
            return _RECORDED_AS[current] + name[len(current) :]
    return name


# attributes of structmc objects that are not part of the target: a bound prior's parameter
# space (in the run's settings already) and the tensor a flat prior was bound "like" (a view of
# the module's current parameters, which the chain overwrites); and whether a bound Normal uses
# the fused forms of ModuleEnergy's prior_std (how it rounds, not which density it is)
_NOT_TARGET: dict[str | None, tuple[str, ...]] = {"structmc.priors": ("space", "_like", "_fused")}


def _setting(name: str):
    """A knob of the fingerprint (``MAX_DEPTH``, ``DATASET_ITEMS``), read at call time where users
    set it, ``structmc.fingerprint.<name>`` (the package re-exports the default from the submodule
    that defines it)."""
    return getattr(sys.modules["structmc.fingerprint"], name)


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
    if flat.is_floating_point() and flat.element_size() >= 2:
        # -0.0 and +0.0 are the same number: hash +0.0 for both (x + 0.0 is x for every other
        # value, so a tensor without -0.0 hashes the same bytes as before), in chunks (no copy
        # of a large data set)
        for lo in range(0, flat.numel(), _CHUNK):
            h.update((flat[lo : lo + _CHUNK] + 0.0).view(torch.uint8).numpy().data)
        return
    raw = flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
    h.update(raw.numpy().data)  # the array's buffer (a memoryview), not a copy


_CHUNK = 1 << 22  # elements per hashed piece of a floating tensor (16 MB of float32)


class _Hasher:
    """Two blake2b streams: ``values`` (data, numbers, structure) and ``code`` (bytecode,
    constants, names); ``unchecked`` lists what could not be hashed."""

    def __init__(self) -> None:
        self.values = hashlib.blake2b(digest_size=16)
        self.code = hashlib.blake2b(digest_size=16)
        self.unchecked: list[str] = []
        self._stack: set[int] = set()  # objects being hashed: a reference back to one is a cycle
        self._max_depth = _setting("MAX_DEPTH")

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
        if depth > self._max_depth:
            self.put("too deep", type(x).__qualname__)
            self.unchecked.append(f"{name} (nested deeper than {self._max_depth} levels)")
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
            subs = sorted(_values_digest(v, name) for v in x)
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
            loaded = _loaded_globals(f.__code__)
            paths = _attribute_paths(f.__code__)
            for var in sorted(loaded):
                if var in g:
                    self.put("global", var)
                    self.feed(g[var], f"{name} (its global {var!r})", depth + 1)
                    if isinstance(g[var], types.ModuleType):
                        self.module_attributes(
                            g[var], sorted(paths.get(var, ())), f"{name} (its global {var!r})", depth
                        )
                elif hasattr(builtins, var):
                    self.put("builtin", var)
                else:
                    self.put("missing global", var)
            if "globals" in loaded and "globals" not in g:
                # globals()["G"] (issue 36 §1): the module globals named by the function's string constants
                for key in sorted(k for k in _string_constants(f.__code__) if k in g and k not in loaded):
                    self.put("global by name", key)
                    self.feed(g[key], f"{name} (globals()[{key!r}])", depth + 1)

    def module_attributes(self, module: types.ModuleType, paths, name: str, depth: int) -> None:
        """The values a function reads through a module of the user's (``cfg.SIGMA``; issue 36
        §1): a library module is identified by its name, a user's module by what is read."""
        if module.__name__.split(".")[0] in _LIBRARIES:
            return
        for path in paths:
            obj: object = module
            for k, attr in enumerate(path):
                if not isinstance(obj, types.ModuleType):
                    break  # the rest is an attribute of a value hashed whole
                obj = getattr(obj, attr, _MISSING)
                if obj is _MISSING:
                    self.put("missing attribute", ".".join(path[: k + 1]))
                    break
            if obj is not _MISSING:
                self.put("module attribute", ".".join(path))
                self.feed(obj, f"{name}.{'.'.join(path)}", depth + 1)

    def code_object(self, c: types.CodeType) -> None:
        # bytecode and what it refers to; not the name, file or line numbers
        self.code.update(c.co_code)
        self.put_code(
            c.co_argcount,
            c.co_posonlyargcount,
            c.co_kwonlyargcount,
            c.co_flags,
            c.co_names,
            c.co_varnames,
            c.co_freevars,
            c.co_cellvars,
        )
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
            if key in (
                "__module__",
                "__qualname__",
                "__doc__",
                "__dict__",
                "__weakref__",
                "__annotations__",
                "__slotnames__",
                "__parameters__",
                "__orig_bases__",
                "__abstractmethods__",
                "_abc_impl",
            ):
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
                if key in (
                    "_forward_hooks",
                    "_forward_pre_hooks",
                    "_backward_hooks",
                    "_backward_pre_hooks",
                    "_forward_hooks_with_kwargs",
                    "_forward_pre_hooks_with_kwargs",
                ):
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
        for slot in (
            getattr(klass, "__slots__", ()) if isinstance(getattr(klass, "__slots__", ()), (tuple, list)) else ()
        ):
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


_MISSING = object()


def _attribute_paths(code: types.CodeType) -> dict[str, set[tuple[str, ...]]]:
    """``{global: {(attr, attr, ...)}}``: the attribute chains read off each global
    (``cfg.SIGMA`` -> ``{"cfg": {("SIGMA",)}}``), nested functions included."""
    out: dict[str, set[tuple[str, ...]]] = {}
    ins = list(dis.get_instructions(code))
    for i, x in enumerate(ins):
        if x.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            chain = []
            for y in ins[i + 1 :]:
                if y.opname not in ("LOAD_ATTR", "LOAD_METHOD"):
                    break
                chain.append(str(y.argval))
            if chain:
                out.setdefault(str(x.argval), set()).add(tuple(chain))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            for k, v in _attribute_paths(const).items():
                out.setdefault(k, set()).update(v)
    return out


def _string_constants(code: types.CodeType) -> set[str]:
    out = {c for c in code.co_consts if isinstance(c, str)}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _string_constants(const)
    return out


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
    return _recorded(f"{mod}.{qual}") if mod else str(qual)


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
    return (
        a is not None
        and type(a) is type(b)
        and getattr(a, "__self__", None) is getattr(b, "__self__", None)
        and getattr(a, "__name__", None) == getattr(b, "__name__", None)
    )


def _values_digest(x, name: str) -> str:
    # the ``values`` digest of one element of a set (structmc.fingerprint.value_fingerprint's,
    # made here so that the hasher does not import the parts built on it)
    h = _Hasher()
    h.feed(x, name, 0)
    return h.result()["values"]
