"""Independent chains on an executor (:mod:`structmc.executors`): :func:`run_chains` runs
single-chain :func:`structmc.sample` calls as tasks, :func:`merge_chains` joins their results
into one :class:`~structmc.Chain`, and :func:`chain_seeds` gives each chain its seed."""

from __future__ import annotations

import concurrent.futures as cf
import copy
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..chain import Chain
from ..run import DivergenceError, sample
from ..run_inputs import check_int as _check_int
from .adapters import as_executor
from .tasks import resolve


def chain_seeds(seed: int, num_chains: int) -> list[int]:
    """The seeds :func:`run_chains` gives its chains: ``numpy.random.SeedSequence(seed)
    .spawn(num_chains)``, each child's first 64-bit word."""
    return [
        int(child.generate_state(1, dtype=np.uint64)[0]) for child in np.random.SeedSequence(seed).spawn(num_chains)
    ]


def run_chains(
    target, init, sampler, num_steps: int, *, num_chains: int, executor=None, seed: int = 0, **sample_kwargs
) -> Chain:
    """Run ``num_chains`` independent chains as tasks on ``executor`` and merge them.

    Chain ``i`` is ``structmc.sample(target, init_i, sampler, num_steps, seed=seed_i,
    num_chains=1, **sample_kwargs)``: ``init`` is ``None``, ``[P]`` (every chain) or
    ``[num_chains, P]`` (row ``i`` for chain ``i``), and the seeds are :func:`chain_seeds`
    ``(seed, num_chains)``. The chains are therefore not the ones of one batched
    ``sample(..., num_chains=num_chains, seed=seed)`` run (that draws all chains from one
    random stream), but each is reproducible on its own, whatever the executor.

    ``executor`` is anything :func:`as_executor` accepts (default: serial); one made here
    from a spec is closed at the end. The target and ``data`` are shipped once with
    ``share``; the sampler and the other arguments travel with each task, so with a process,
    Dask or Ray executor they must pickle. ``out_dir``, if given, is split: chain ``i``
    writes to ``out_dir/chain_{i}``. ``progress`` defaults to ``False``.

    Returns the merged :class:`~structmc.Chain` (:func:`merge_chains`; ``samples [C, D, P]``),
    whose ``config["chain_seeds"]`` lists the seeds. A :class:`~structmc.DivergenceError` of
    chain ``i`` is raised again with ``"chain i: "`` before its message (``.chain`` holds that
    chain's draws so far); chains not yet started are cancelled where the engine can.
    """
    num_chains = _check_int("num_chains", num_chains, 1)
    inits = _chain_inits(init, num_chains)
    seeds = chain_seeds(seed, num_chains)
    options = dict(sample_kwargs)
    data = options.pop("data", None)
    out_dir = options.pop("out_dir", None)
    options.setdefault("progress", False)  # bars of parallel chains would interleave
    engine = as_executor(executor)
    try:
        problem = engine.share((target, data))
        futures = []
        for i in range(num_chains):
            chain_dir = None if out_dir is None else Path(out_dir) / f"chain_{i}"
            futures.append(
                engine.submit(
                    _sample_one_chain,
                    problem,
                    inits[i],
                    sampler,
                    num_steps,
                    seeds[i],
                    {**options, "out_dir": chain_dir},
                )
            )
            if _failed(futures[-1]):  # serially the task has run already: stop at the first failure
                break
        chains = [_chain_result(i, future, futures) for i, future in enumerate(futures)]
    finally:
        if engine is not executor:
            engine.close()
    merged = merge_chains(chains)
    merged.config["chain_seeds"] = seeds
    return merged


def _sample_one_chain(problem, init, sampler, num_steps: int, seed: int, options: dict) -> Chain:
    target, data = resolve(problem)
    return sample(target, init, sampler, num_steps, data=data, seed=seed, num_chains=1, **options)


def _chain_inits(init, num_chains: int) -> list:
    if init is None or isinstance(init, Mapping):  # named values: the same start for every chain
        return [init] * num_chains
    init = torch.as_tensor(init)
    if init.dim() == 1:
        return [init] * num_chains
    if init.dim() == 2 and init.shape[0] == num_chains:
        return [row.clone() for row in init]  # a row alone, not a view that would pickle all rows
    raise ValueError(f"init must have shape [P] or [num_chains={num_chains}, P], got {tuple(init.shape)}")


def _failed(future) -> bool:
    return isinstance(future, cf.Future) and future.done() and future.exception() is not None


def _chain_result(i: int, future, futures: list) -> Chain:
    try:
        return future.result()
    except BaseException as err:
        for later in futures[i + 1 :]:
            later.cancel()
        if isinstance(err, DivergenceError):
            raise DivergenceError(f"chain {i}: {err}", err.step, err.chain) from err
        if hasattr(err, "add_note"):  # Python >= 3.11
            err.add_note(f"(in chain {i} of run_chains)")
        raise


def merge_chains(chains: Iterable[Chain]) -> Chain:
    """One :class:`~structmc.Chain` from several runs of the same model and settings.

    ``samples`` are concatenated along the chain dimension; ``space`` and ``draw_steps`` must
    agree. ``info`` records with a leading chain dimension (``energy [c, S]``) are
    concatenated to ``[C, S]``; records without one (``lr``, ``grad_evals``, ``time [S]``)
    are kept when they are equal in every run and otherwise become per chain, ``[C, S]``.
    ``config`` is the first run's.
    """
    chains = list(chains)
    if not chains:
        raise ValueError("merge_chains needs at least one chain")
    first = chains[0]
    layout = first.space.to_config()
    for k, other in enumerate(chains[1:], 1):
        if other.space.to_config() != layout:
            raise ValueError(f"chain {k} has a different parameter space from chain 0")
        if not torch.equal(other.draw_steps, first.draw_steps):
            raise ValueError(f"chain {k} kept draws at other iterations than chain 0")
        if other.info.keys() != first.info.keys():
            raise ValueError(f"chain {k} has info records {sorted(other.info)}, chain 0 has {sorted(first.info)}")
    sizes = [c.num_chains for c in chains]
    info = {key: _merge_record(key, [c.info[key] for c in chains], sizes) for key in first.info}
    samples = torch.cat([c.samples for c in chains], 0)
    return Chain(samples, first.space, first.draw_steps.clone(), info, copy.deepcopy(first.config))


def _merge_record(key: str, values: list[Tensor], sizes: list[int]) -> Tensor:
    try:
        if all(v.dim() >= 2 and v.shape[0] == n for v, n in zip(values, sizes)):
            return torch.cat(values, 0)
        if all(torch.equal(v, values[0]) for v in values[1:]):
            return values[0].clone()
        return torch.cat([v.unsqueeze(0).expand(n, *v.shape) for v, n in zip(values, sizes)], 0)
    except RuntimeError as err:  # shapes that do not line up (runs of different lengths)
        raise ValueError(f"cannot merge info[{key!r}] of shapes {[tuple(v.shape) for v in values]}") from err
