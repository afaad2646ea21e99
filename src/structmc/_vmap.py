"""``vmap`` for the hot path, immune to other libraries' monkey-patches of ``torch.func.vmap``.

``torch.func.vmap`` looks up ``_process_batched_inputs``, ``_create_batched_inputs`` and
``_unwrap_batched`` in the module ``torch._functorch.vmap`` at every call. tensordict (imported
by ``posteriors``) replaces the three, process-wide, with TensorDict-aware versions that call
``is_tensor_collection`` on every leaf: the same results for tensors, ~6 µs more per call with
7 leaves (67 -> 73 µs for a trivial function; +163 Python calls per step of a 2-chain MLP run;
issue 22 §3), so a run's speed depended on what else the process had imported. Here the same source
file is executed once more as a private module, so its ``vmap_impl`` calls the unpatched
functions of the installed torch. Same code, same results, bit for bit (default arguments
only: ``in_dims``, ``out_dims``, ``randomness``; no ``chunk_size``). Should the private copy
not load (a torch whose layout differs), ``torch.func.vmap`` is used.
"""

from __future__ import annotations

import importlib.util

import torch


def _load_private_copy():
    try:
        spec = importlib.util.find_spec("torch._functorch.vmap")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.vmap_impl  # noqa: B018  (the entry point torch.func.vmap calls)
        return module
    except Exception:  # noqa: BLE001  (fall back to torch.func.vmap)
        return None


_private = _load_private_copy()


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error"):
    """``torch.func.vmap(func, in_dims, out_dims, randomness)`` through torch's own, unpatched
    batching helpers."""
    if _private is None:
        return torch.func.vmap(func, in_dims, out_dims, randomness=randomness)
    impl = _private.vmap_impl

    def wrapped(*args, **kwargs):
        return impl(func, in_dims, out_dims, randomness, None, *args, **kwargs)

    return wrapped
