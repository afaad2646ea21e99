"""A module's parameters bound to one flat vector, and its buffers kept per chain
(:class:`~structmc.energy.ModuleEnergy`).

:func:`bind_flat` makes every sampled parameter a view of one flat vector ``[P]`` and its
``.grad`` a view of one flat gradient ``[P]``, in the order of the
:class:`~structmc.space.ParamSpace`: one chain then runs the module's own forward with no
per-tensor work (θ is copied into the flat vector once) and the backward pass writes straight
into the flat gradient.

The buffer store is a dict ``{"chains": [buffers of chain 0, ...]}`` (a dict, as pickled in
checkpoints): the per-chain copies of the module's buffers (BatchNorm statistics) of the last
multi-chain evaluation, swapped into the module around each chain's forward.
:func:`buffer_state` / :func:`load_buffer_state` save and restore the module's buffers and the
store together (a run's checkpoint: the running statistics are part of where a chain is).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from .space import ParamSpace


def bind_flat(module: nn.Module, space: ParamSpace) -> tuple[Tensor, Tensor]:
    """Make the module's parameters views of one flat vector and one flat gradient; returns
    ``(flat, grad)`` (the flat vector holds the parameters' current values)."""
    params = dict(module.named_parameters())
    flat = space.flatten(params).clone()
    grad = torch.zeros_like(flat)
    for info in space.params:
        p = params[info.name]
        p.data = flat[info.slice].view(info.shape)
        p.grad = grad[info.slice].view(info.shape)
    return flat, grad


def swap_buffers(module: nn.Module, store: dict, c: int, n_chains: int, save: bool) -> None:
    """Copy chain ``c``'s buffers into the module (``save=False``, before its forward) or the
    module's buffers into chain ``c``'s (``save=True``, after it); the store is (re)made with
    copies of the module's buffers for ``n_chains`` chains when it holds another number."""
    live = dict(module.named_buffers())
    chains = store.get("chains")
    if chains is None or len(chains) != n_chains:
        chains = store["chains"] = [{k: v.detach().clone() for k, v in live.items()} for _ in range(n_chains)]
    kept = chains[c]
    for k, v in live.items():
        (kept[k] if save else v).copy_(v if save else kept[k])


def buffer_chains(store: dict) -> int | None:
    """Number of chains whose buffers are kept, or ``None`` (no multi-chain evaluation yet)."""
    chains = store.get("chains")
    return None if chains is None else len(chains)


def chain_buffers(module: nn.Module, store: dict, chain: int) -> dict[str, Tensor]:
    """Buffers of one chain of the last multi-chain evaluation (copies of the module's own
    buffers when there was none)."""
    chains = store.get("chains")
    if chains is None:
        return {k: v.detach().clone() for k, v in module.named_buffers()}
    if not 0 <= chain < len(chains):
        raise ValueError(f"buffers are kept for {len(chains)} chains; no chain {chain}")
    return chains[chain]


def buffer_state(module: nn.Module, store: dict) -> dict:
    """The module's buffers and the store's per-chain copies, on the CPU (what a checkpoint
    keeps): ``{"own": {name: tensor}, "chains": [{name: tensor}, ...] or None}``."""
    own = {k: v.detach().cpu().clone() for k, v in module.named_buffers()}
    chains = store.get("chains")
    if chains is not None:
        chains = [{k: v.detach().cpu().clone() for k, v in c.items()} for c in chains]
    return {"own": own, "chains": chains}


def load_buffer_state(module: nn.Module, store: dict, state: dict) -> None:
    """Restore :func:`buffer_state`'s ``state``: the module's buffers in place (on their device,
    in their dtype) and the store's per-chain copies (none when it has none)."""
    live = dict(module.named_buffers())
    if not isinstance(state, dict) or not isinstance(state.get("own"), dict) or "chains" not in state:
        raise ValueError(
            "buffer state must be a dict {'own': {name: tensor}, 'chains': [...] or None}, as buffer_state_dict() "
            f"returns; got {type(state).__name__}"
        )
    chains = state["chains"]
    for what, saved in [("the module's", state["own"]), *((f"chain {c}'s", b) for c, b in enumerate(chains or ()))]:
        if set(saved) != set(live):
            raise ValueError(
                f"buffer state: {what} buffers are {sorted(saved)} but the module's are {sorted(live)}: "
                "restore the state of the same module"
            )
    for k, v in state["own"].items():
        live[k].copy_(v)
    if chains is None:
        store.pop("chains", None)
    else:
        store["chains"] = [{k: v.to(live[k]).clone() for k, v in c.items()} for c in chains]


# -- keyword inputs and structured outputs (Hugging Face models) ---------------------------------


def check_input_keys(input_keys) -> tuple[str, ...] | None:
    """``ModuleEnergy(input_keys=...)`` as a tuple of distinct names (``None``: positional inputs)."""
    if input_keys is None:
        return None
    keys = (input_keys,) if isinstance(input_keys, str) else tuple(input_keys)
    if not keys or not all(isinstance(k, str) and k for k in keys) or len(set(keys)) != len(keys):
        raise ValueError(
            f"input_keys must be distinct keyword names of the module's forward, e.g. ('input_ids', "
            f"'attention_mask'), got {input_keys!r}"
        )
    return keys


def flat_inputs(input_keys: tuple[str, ...] | None, inputs, who: str) -> tuple:
    """The model's inputs as the tuple of tensors the batches carry.

    ``inputs`` is a tuple of the model's inputs; a dict of tensors among them (``{"input_ids":
    [N, L], "attention_mask": [N, L]}``) stands for the keyword inputs ``input_keys`` and becomes
    their tensors in that order, so that minibatches index every tensor of the dict with the same
    rows (the batching code sees tensors only). Its keys must be ``input_keys`` exactly and its
    tensors must have the same number of rows (``ValueError`` naming the key, before any compute).
    Tuples without a dict are returned as they are."""
    if not any(isinstance(x, Mapping) for x in inputs):
        return tuple(inputs)
    if len(inputs) != 1 or not isinstance(inputs[0], Mapping):
        raise ValueError(
            f"{who}: keyword inputs are one dict of tensors (the model's inputs), then the targets; got "
            f"{len(inputs)} inputs, {', '.join(type(x).__name__ for x in inputs)}"
        )
    given = inputs[0]
    if input_keys is None:
        raise ValueError(
            f"{who}: the inputs are a dict with keys {list(given)} but the energy takes positional inputs: "
            f"build it with ModuleEnergy(module, ..., input_keys={tuple(given)!r}) to call module(**inputs)"
        )
    if set(given) != set(input_keys):
        missing = [k for k in input_keys if k not in given]
        extra = [k for k in given if k not in input_keys]
        raise ValueError(
            f"{who}: the inputs' keys {list(given)} are not the energy's input_keys {list(input_keys)}"
            f"{f' (missing {missing})' if missing else ''}{f' (not declared {extra})' if extra else ''}"
        )
    tensors = tuple(given[k] for k in input_keys)
    for k, t in zip(input_keys, tensors):
        if not isinstance(t, Tensor) or t.dim() == 0:
            what = f"shape {list(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{who}: input {k!r} must be a tensor [n, ...], got {what}")
    rows = {k: int(t.shape[0]) for k, t in zip(input_keys, tensors)}
    if len(set(rows.values())) > 1:
        first = input_keys[0]
        odd = next(k for k in input_keys if rows[k] != rows[first])
        raise ValueError(
            f"{who}: every tensor of the inputs needs the same number of rows: {first!r} has {rows[first]}, "
            f"{odd!r} has {rows[odd]} (rows {rows})"
        )
    return tensors


def flat_data(input_keys: tuple[str, ...] | None, data, who: str):
    """``(inputs..., targets)`` with a dict of keyword inputs replaced by its tensors
    (:func:`flat_inputs`); any other ``data`` (tensors, a Dataset) is returned as it is."""
    if isinstance(data, (tuple, list)) and len(data) >= 2 and any(isinstance(x, Mapping) for x in data[:-1]):
        return (*flat_inputs(input_keys, tuple(data[:-1]), who), data[-1])
    return data


def energy_input_keys(energy) -> tuple[str, ...] | None:
    """The ``input_keys`` of the module through which ``energy`` predicts (its declared
    ``predictive_energy``: a :class:`~structmc.energy.ModuleEnergy` is its own), or ``None``."""
    return getattr(getattr(energy, "predictive_energy", None), "input_keys", None)


def keyword_call(input_keys: tuple[str, ...] | None, inputs) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of the module's call on the batch's input tensors: positional, or
    ``{key: tensor}`` in ``input_keys`` order (``module(**inputs)``)."""
    if input_keys is None:
        return tuple(inputs), {}
    return (), dict(zip(input_keys, inputs))


def read_output(out, output):
    r"""The tensor the likelihood reads from the module's output.

    ``output=None``: a tensor as it is; a mapping with a ``"logits"`` entry — a dict or a
    ``transformers`` ``ModelOutput`` (an ``OrderedDict`` subclass: read as a mapping, no attribute
    probing) — gives its logits; anything else as it is (a custom likelihood may take it).
    ``output="key"``: that entry of a mapping output; a callable: ``output(out)``."""
    if output is None:
        if isinstance(out, Mapping) and not isinstance(out, Tensor) and "logits" in out:
            return out["logits"]
        return out
    if callable(output):
        return output(out)
    if not isinstance(out, Mapping) or output not in out:
        keys = list(out) if isinstance(out, Mapping) else None
        raise ValueError(
            f"output={output!r}: the module returned {type(out).__name__}"
            f"{f' with keys {keys}' if keys is not None else ', not a mapping'}"
        )
    return out[output]
