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
