r"""One chain over several processes or GPUs: data-parallel gradients with :mod:`torch.distributed`.

``sample(..., distributed=True)`` (or :class:`Distributed` for options), run by every process of
an initialised process group (``torchrun --nproc-per-node W script.py``; :func:`init` sets one up
from torchrun's environment), runs **one** set of chains whose gradient estimates are computed
by all ``W`` ranks together. The samplers do not change: the run's
:class:`~structmc.oracle.Oracle` is replaced by a :class:`DistributedOracle` and its minibatch
stream by a :class:`ShareStream`.

How a step works
    Every rank holds the data and the run's generator with the same seed, so every rank draws
    the **same** global minibatch indices ``[C, B]`` (and the same noise, masks, momenta). Rank
    ``r`` evaluates the energy on its contiguous share of those ``B`` rows, ``b_r`` of them
    (``b_r = B // W``, the first ``B mod W`` ranks one more). The energy scales a batch of ``b``
    rows by ``N / b``, so with ``Û_r`` the rank's estimate the global estimate is

    .. math:: \hat U_B(\theta) = \frac{N}{B}\sum_{i \in B} \ell_i(\theta) + U_0(\theta)
              = \sum_r \frac{b_r}{B}\, \hat U_r(\theta),

    one weighted all-reduce (sum) of ``(Û, ∇Û)`` (the prior ``U_0`` is in every ``Û_r`` with total
    weight one). The gradient travels as the flat ``[C, P]`` vector in buckets of ``bucket_mb``
    launched asynchronously together. Every rank then applies the same update to the same
    positions with the same noise, so the positions stay identical without a broadcast; every
    ``sync_check_every`` iterations a 2-element all-reduce of a bit-level checksum of θ checks
    that and raises :class:`DistributedError` naming the iteration if a rank drifted.

    Anything linear in the minibatch's per-item sum reduces this way: the gradient of every
    SGMCMC sampler (SGLD, pSGLD and its Hessian-diagonal Γ term, SGHMC and scale-adapted SGHMC,
    SGNHT), the control variate's two minibatch terms (its centre's full-data gradient is
    computed once, each rank on its rows of the data, and reduced), and the S / Sd structured
    energies (their θ̃ and masks come from their own generator, identical on every rank). A
    Metropolis-adjusted full-data step falls out of the same machinery: the one-block MALA move
    (``MetropolisWithinGibbs(fully_joint(P), mala=True, scaling="N/n")``, ``batch_size=None``)
    evaluates every energy and gradient through the oracle, so both states' energies are
    reduced and every rank takes the same accept decision from the shared generator. The
    chain equals the single-process chain with the same global batch to float rounding (the
    sum is split differently), not bit for bit.

Data past one machine's memory
    With a map-style ``Dataset`` (or a :class:`~structmc.batching.DataSource` over one) no rank
    holds the data: every rank draws the same global indices ``[C, B]`` and reads from the
    Dataset only the items of its share, ``C·b_r`` per batch (:class:`DatasetShareStream`:
    ``dataset[i]`` per index or one ``__getitems__`` call, collated as in one process; a full
    batch reads its share of the items once). Before any compute the ranks compare the
    Dataset's class, length and first items, not every item. The run reads the Dataset in
    full nowhere: a control variate's full-data gradient is refused on a Dataset (in one
    process too) and a divergence at the first iteration is explained on the first items.

What it refuses, before any compute
    Kernels that are not gradient samplers, except the one-block MALA step (the blocked Gibbs
    sweep stays single-process: its per-block accept/reject would need one latency-bound
    reduction per block, hundreds per sweep); an unscaled minibatch energy
    (``MetropolisWithinGibbs(scaling="none")``: the shares' estimates are averaged); energies
    with module buffers (BatchNorm's batch statistics are per share); a per-batch transform
    (``DataSource(transform=...)``: its random numbers depend on the share) and
    ``split_batch=True`` structured energies; a global batch smaller than the world size;
    ranks whose settings, data or initial positions differ.

Run folders
    Rank 0 writes the run folder, checkpoints and draws; the others write nothing. On resume
    rank 0 reads the checkpoint and broadcasts it, so every rank continues from the same state;
    a folder written with another world size is refused (the chains agree across world sizes
    only to float rounding, so structmc does not re-shard). With a run folder, every rank
    returns rank 0's :class:`~structmc.Chain` (one broadcast at the end).

Failure
    A collective that fails (a rank died: gloo and NCCL report the closed connection) or does
    not complete within the process group's timeout (a rank hangs; :func:`init`'s default is
    five minutes) raises :class:`DistributedError` naming the rank and the iteration. The last
    checkpoint stays valid: rank 0 writes a checkpoint only between iterations.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
from torch import Tensor

from .batching import DatasetStream, MinibatchStream
from .energy import Energy, full_data_value_and_grad
from .execution import Execution
from .gradients import ControlVariate
from .oracle import Oracle


class DistributedError(RuntimeError):
    """A collective operation of a distributed run failed or timed out, or the ranks' chains
    drifted apart. ``.iteration`` is the iteration it happened in (0: during set-up)."""

    def __init__(self, message: str, iteration: int = 0):
        super().__init__(message)
        self.iteration = iteration

    def __reduce__(self):
        return (type(self), (str(self), self.iteration))


@dataclass(frozen=True)
class Distributed:
    """Options of a distributed run (``sample(..., distributed=Distributed(...))``;
    ``distributed=True`` is ``Distributed()``).

    ``group``: the process group (``None``: the default one). ``bucket_mb``: the energy and the
    gradient travel in one flat buffer; one larger than this many MiB is split into buckets,
    launched together (asynchronously) and waited for once. ``sync_check_every``: iterations between the checksum all-reduce that
    verifies every rank holds the same positions (``None``: the run's ``check_every``).
    ``timing``: measure the seconds spent communicating (``run.oracle.comm_seconds``); on a GPU
    this synchronises the device around each reduction, so keep it for benchmarks."""

    group: Any = None
    bucket_mb: float = 25.0
    sync_check_every: int | None = None
    timing: bool = False

    def __post_init__(self):
        if isinstance(self.bucket_mb, bool) or not isinstance(self.bucket_mb, (int, float)):
            raise TypeError(f"bucket_mb must be a number of MiB, got {self.bucket_mb!r}")
        if not (self.bucket_mb > 0 and math.isfinite(self.bucket_mb)):
            raise ValueError(f"bucket_mb must be positive, got {self.bucket_mb!r}")
        if self.sync_check_every is not None and (
            isinstance(self.sync_check_every, bool)
            or not isinstance(self.sync_check_every, int)
            or self.sync_check_every < 1
        ):
            raise ValueError(f"sync_check_every must be a positive integer or None, got {self.sync_check_every!r}")
        if not isinstance(self.timing, bool):
            raise TypeError(f"timing must be True or False, got {self.timing!r}")


def as_distributed(spec) -> Distributed | None:
    """``None``/``False`` -> ``None``; ``True`` -> ``Distributed()``; a :class:`Distributed` -> itself."""
    if spec is None or spec is False:
        return None
    if spec is True:
        return Distributed()
    if isinstance(spec, Distributed):
        return spec
    raise TypeError(f"distributed must be True, False, None or structmc.distributed.Distributed(...), got {spec!r}")


def init(backend: str | None = None, *, timeout: timedelta | float = 300.0) -> tuple[int, int]:
    """Initialise the default process group from torchrun's environment (``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; ``LOCAL_RANK`` picks the GPU) unless one
    is initialised already; return ``(rank, world_size)``. ``backend``: ``"nccl"`` when CUDA is
    available, else ``"gloo"``. ``timeout`` (seconds or a timedelta): how long a collective
    waits for a rank that hangs before the run fails with :class:`DistributedError`."""
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("this PyTorch build has no torch.distributed")
    if not dist.is_initialized():
        missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
        if missing:
            raise RuntimeError(
                f"no process group and no torchrun environment ({', '.join(missing)} unset): start the script "
                "with `torchrun --nproc-per-node N script.py`, or call torch.distributed.init_process_group yourself"
            )
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl" and "LOCAL_RANK" in os.environ:
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        if not isinstance(timeout, timedelta):
            timeout = timedelta(seconds=float(timeout))
        dist.init_process_group(backend, timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def share_bounds(size: int, world_size: int, rank: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous share ``[lo, hi)`` of ``size`` rows: ``size // W`` each, the
    first ``size mod W`` ranks one more."""
    base, extra = divmod(size, world_size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


class Context:
    """One run's view of its process group: rank, world size, the communication itself."""

    def __init__(self, options: Distributed):
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise ValueError(
                "distributed=True needs an initialised torch.distributed process group: run the script under "
                "`torchrun --nproc-per-node N` and call structmc.distributed.init() (or "
                "torch.distributed.init_process_group) before sample()"
            )
        self.dist = dist
        self.options = options
        self.group = options.group
        self.rank = dist.get_rank(self.group)
        self.world_size = dist.get_world_size(self.group)
        self.backend = str(dist.get_backend(self.group))
        self.iteration = 0  # the iteration in progress (set by the run), for messages
        self.comm_seconds = 0.0
        self.comm_calls = 0
        self._buffer: Tensor | None = None  # reduce_weighted's flat buffer, reused

    # -- collectives, each failure named -------------------------------------------------------
    def _failed(self, what: str, err: BaseException) -> DistributedError:
        return DistributedError(
            f"rank {self.rank} of {self.world_size}: {what} of iteration {self.iteration} failed "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}): another rank stopped or "
            "hung past the process group's timeout. The run folder's last checkpoint is valid: start the job "
            "again with resume=True",
            self.iteration,
        )

    def all_reduce_(self, tensors: Sequence[Tensor], what: str = "the gradient all-reduce") -> None:
        """Sum each tensor (contiguous) over the ranks in place: buckets of ``bucket_mb`` launched
        asynchronously, then waited for."""
        dist = self.dist
        timing = self.options.timing
        if timing:
            _sync(tensors[0])
            t0 = time.perf_counter()
        try:
            buckets: list[Tensor] = []
            for t in tensors:
                flat = t.view(-1)
                per = max(1, int(self.options.bucket_mb * 2**20) // max(1, flat.element_size()))
                buckets.extend(flat[lo : lo + per] for lo in range(0, flat.numel(), per))
            if len(buckets) <= len(tensors):  # one bucket per tensor: blocking calls (an async
                # launch and wait costs ~1 ms more per call on gloo, measured with bench_distributed.py)
                for b in buckets:
                    dist.all_reduce(b, group=self.group)
            else:  # launched together, waited for once: bucket k travels while k+1 is queued
                works = [dist.all_reduce(b, group=self.group, async_op=True) for b in buckets]
                for w in works:
                    w.wait()
        except (RuntimeError, ValueError) as err:  # DistBackendError and gloo's errors are RuntimeErrors
            raise self._failed(what, err) from err
        if timing:
            _sync(tensors[0])
            self.comm_seconds += time.perf_counter() - t0
        self.comm_calls += 1

    def reduce_weighted(self, weight: float, *tensors: Tensor) -> tuple[Tensor, ...]:
        """``Σ_r weight_r · t_r`` on every rank (the global estimate from the ranks' shares). The
        tensors travel together in one flat buffer (value and gradient in one all-reduce: each
        collective call costs a fixed latency, ~0.5 ms on gloo between busy CPU processes), reused
        from call to call: the results are views into it, valid until the next reduction (as an
        energy's own gradient buffer is until its next evaluation); the smaller ones are copies."""
        first = tensors[0]
        if len(tensors) == 1 or any(t.dtype != first.dtype or t.device != first.device for t in tensors):
            out = tuple(
                t.contiguous().mul_(weight) if t.is_contiguous() else t.contiguous().mul(weight) for t in tensors
            )
            self.all_reduce_(out)
            return out
        sizes = [t.numel() for t in tensors]
        total = sum(sizes)
        buf = self._buffer
        if buf is None or buf.numel() != total or buf.dtype != first.dtype or buf.device != first.device:
            buf = self._buffer = torch.empty(total, dtype=first.dtype, device=first.device)
        parts = buf.split(sizes)
        for part, t in zip(parts, tensors):
            torch.mul(t.reshape(-1), weight, out=part)
        self.all_reduce_((buf,))
        # the largest (the gradient) stays a view; the small ones (the energy [C], which the run
        # keeps in its records and divergence checks) are copied out of the reused buffer
        largest = max(range(len(tensors)), key=lambda i: sizes[i])
        return tuple(
            part.view(t.shape) if i == largest else part.view(t.shape).clone()
            for i, (part, t) in enumerate(zip(parts, tensors))
        )

    def check_in_sync(self, theta: Tensor, iteration: int) -> None:
        """Raise :class:`DistributedError` unless every rank holds bit-identical positions (a
        checksum of θ's bits, max and min over the ranks in one 2-element all-reduce)."""
        flat = theta.detach().contiguous().view(-1)
        if flat.element_size() % 4 == 0:
            bits = flat.view(torch.int32)
        else:  # 16-bit floats
            bits = flat.view(torch.int16)
        total = bits.sum(dtype=torch.int64)
        pair = torch.stack([total, -total])
        self.iteration = iteration
        try:
            self.dist.all_reduce(pair, op=self.dist.ReduceOp.MAX, group=self.group)
        except (RuntimeError, ValueError) as err:
            raise self._failed("the positions' checksum", err) from err
        high, low = int(pair[0]), -int(pair[1])
        if high != low:
            raise DistributedError(
                f"rank {self.rank} of {self.world_size}: the ranks' positions differ after iteration {iteration} "
                f"(checksums from {low} to {high}; this rank's {int(total)}): every rank must run the same script "
                "with the same seed, data and sampler, and nothing may change one rank's state alone (a callback "
                "that edits the state, a non-deterministic kernel on one device)",
                iteration,
            )

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        box = [obj if self.rank == src else None]
        try:
            self.dist.broadcast_object_list(box, src=src, group=self.group, device=self._object_device())
        except (RuntimeError, ValueError) as err:
            raise self._failed("a broadcast from rank 0", err) from err
        return box[0]

    def gather_objects(self, obj: Any) -> list:
        out: list = [None] * self.world_size
        try:
            self.dist.all_gather_object(out, obj, group=self.group)
        except (RuntimeError, ValueError) as err:
            raise self._failed("the set-up's comparison of the ranks", err) from err
        return out

    def _object_device(self):
        return torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else None

    # -- set-up checks --------------------------------------------------------------------------
    def check_same_setup(self, description: dict) -> None:
        """Refuse (``ValueError`` on every rank) ranks whose run descriptions differ."""
        everyone = self.gather_objects(description)
        first = everyone[0]
        for r, d in enumerate(everyone):
            if d != first:
                keys = sorted(k for k in set(first) | set(d) if first.get(k) != d.get(k))
                raise ValueError(
                    f"distributed run: rank {r}'s {', '.join(keys)} differ from rank 0's ({d.get(keys[0])!r} vs "
                    f"{first.get(keys[0])!r}): every rank must run the same chains on the same data from the same "
                    "start (build the module after the same torch.manual_seed on every rank, or pass init)"
                )


def _sync(t: Tensor) -> None:
    if t.device.type == "cuda":
        torch.cuda.synchronize(t.device)


def digest(t: Tensor) -> str:
    """A digest of a tensor's dtype, shape and bytes (set-up comparisons of data and positions)."""
    import hashlib

    flat = t.detach().contiguous().cpu().view(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    h = hashlib.blake2b(f"{t.dtype}{tuple(t.shape)}".encode(), digest_size=16)
    h.update(flat.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _check_global_batch(batch_size: int, world_size: int) -> None:
    if batch_size < world_size:
        raise ValueError(
            f"distributed run: the global batch ({batch_size} rows) is smaller than the world size "
            f"({world_size}): every rank needs at least one row; raise batch_size or use fewer processes"
        )


class ShareStream(MinibatchStream):
    """The run's minibatch law over the whole data set — the same global index draws ``[C, B]``
    on every rank, from the same generator — gathering only this rank's contiguous share of
    each batch's rows (a full batch: its share of the data's rows)."""

    def __init__(self, data, batch_size, num_chains, generator, mode, world_size: int, rank: int):
        self.data = tuple(data)
        self._init_law(int(self.data[0].shape[0]), batch_size, num_chains, generator, mode, self.data[0].device)
        _check_global_batch(self.batch_size, world_size)
        self.share = share_bounds(self.batch_size, world_size, rank)
        self.weight = (self.share[1] - self.share[0]) / self.batch_size
        n = self.share[1] - self.share[0]
        self._buffers = tuple(t.new_empty((num_chains * n, *t.shape[1:])) for t in self.data)
        self._views = tuple(buf.view(num_chains, n, *buf.shape[1:]) for buf in self._buffers)
        if self.full:
            lo, hi = self.share
            self._full_batch = tuple(t[lo:hi].unsqueeze(0).expand(num_chains, *t[lo:hi].shape) for t in self.data)
        if mode == "stratified":
            from .batching import _strata

            self._strata = _strata(self.data[-1], self.batch_size)

    def next(self) -> tuple[Tensor, ...]:
        if self.full:
            return self._full_batch
        lo, hi = self.share
        return self._gather(self._next_indices()[:, lo:hi])


class DatasetShareStream(DatasetStream):
    """:class:`ShareStream` over a map-style Dataset (:class:`~structmc.batching.DataSource`):
    the same global index draws ``[C, B]`` on every rank, from the same generator, and this
    rank reads from the Dataset only the items of its contiguous share ``[lo, hi)`` of each
    batch's columns (``dataset[i]`` per index, or one ``__getitems__`` call), collated as the
    one-process :class:`~structmc.batching.DatasetStream` collates them. No rank holds more
    than ``C·b_r`` items of a batch; a full batch (``batch_size=None``) is its share of the
    Dataset's items, read once. The next share is prefetched as the one-process stream
    prefetches the next batch (``batching="epoch"`` inside an epoch)."""

    def __init__(self, source, batch_size, num_chains, generator, mode, device, world_size: int, rank: int):
        self.source = source
        self._init_law(len(source), batch_size, num_chains, generator, mode, device)
        _check_global_batch(self.batch_size, world_size)
        self.share = share_bounds(self.batch_size, world_size, rank)
        self.weight = (self.share[1] - self.share[0]) / self.batch_size
        self._pin = self.device.type == "cuda"
        self._pool = None
        self._pending = None
        if self.full:
            mine = self._fetch(torch.arange(*self.share).unsqueeze(0))
            self._full_batch = tuple(t.expand(num_chains, *t.shape[1:]) for t in mine)
        if mode == "stratified":
            self._stratify()

    def _selected(self, idx: Tensor) -> Tensor:
        lo, hi = self.share
        return idx[:, lo:hi]


class DistributedOracle(Oracle):
    """The oracle of a distributed run: each evaluation on this rank's share of the minibatch,
    then the weighted sum over the ranks (:meth:`Context.reduce_weighted`), so the sampler sees
    the global estimate. Counts as the plain oracle does (per chain, global evaluations)."""

    def __init__(self, energy: Energy, estimator, stream: ShareStream, generator, context: Context):
        super().__init__(energy, estimator, stream, generator)
        self.context = context
        self.weight = stream.weight

    @property
    def comm_seconds(self) -> float:
        return self.context.comm_seconds

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        value, grad = super().value_and_grad(theta)
        value, grad = self.context.reduce_weighted(self.weight, value, grad)
        return value, grad

    def value(self, theta: Tensor) -> Tensor:
        (value,) = self.context.reduce_weighted(self.weight, super().value(theta))
        return value

    def hessian_diag(self, theta: Tensor, num_probes: int = 1) -> Tensor:
        (h,) = self.context.reduce_weighted(self.weight, super().hessian_diag(theta, num_probes))
        return h


def full_data_grad(context: Context, energy: Energy, centre: Tensor, data: Sequence[Tensor], chunk_size: int) -> Tensor:
    """∇U(θ̂) over the whole data set, each rank on its contiguous share of the rows, reduced:
    the control variate's centre gradient computed once, in parallel."""
    N = int(data[0].shape[0])
    lo, hi = share_bounds(N, context.world_size, context.rank)
    if hi <= lo:
        grad = torch.zeros_like(centre)
    else:
        _, grad = full_data_value_and_grad(energy, centre, tuple(t[lo:hi] for t in data), chunk_size)
    (grad,) = context.reduce_weighted((hi - lo) / N, grad)
    return grad


__all__ = [
    "DatasetShareStream",
    "Distributed",
    "DistributedError",
    "DistributedOracle",
    "ShareStream",
    "init",
    "share_bounds",
]


def _distributed_context(options: Distributed, sampler, energy, source, data) -> Context:
    """The run's process-group context, after refusing what cannot run data-parallel
    (:mod:`structmc.distributed`), before any compute."""
    from .gibbs import MetropolisWithinGibbs
    from .samplers.sampler import Sampler

    full_data_step = isinstance(sampler, MetropolisWithinGibbs) and sampler.full_data_step
    if not isinstance(sampler, Sampler) and not full_data_step:
        raise ValueError(
            f"distributed=True runs gradient samplers (SGLD, pSGLD, SGHMC, SGNHT, ...) and the one-block MALA step "
            f"(MetropolisWithinGibbs(fully_joint(P), mala=True)), not {type(sampler).__name__} with several blocks: "
            "the blocked Gibbs sweep stays single-process (its per-block accept/reject would need one latency-bound "
            "reduction per block); run independent chains on several processes with structmc.run_chains instead"
        )
    if source is not None and source.transform is not None:
        raise ValueError(
            "distributed=True with a per-batch transform (DataSource(transform=...)): the transform draws its "
            "random numbers for the batch it is given, so each rank's share would get other numbers than the "
            "one-process batch (and ranks with shares of different sizes would draw different amounts from "
            "the shared generator); apply the transform in the Dataset's __getitem__ with a per-index seed, "
            "or run without distributed=True"
        )
    if data is None and (source is None or source.dataset is None):
        raise ValueError("distributed=True splits the minibatch across ranks and needs data=(inputs..., targets)")
    if energy.has_buffers:  # a declared capability: BatchNorm's batch statistics are per share
        raise ValueError(
            f"distributed=True: {type(energy).__name__} has module buffers (BatchNorm statistics), which "
            "would be computed on each rank's share of the batch, not the global batch: use a model without "
            "batch statistics (GroupNorm, LayerNorm, none)"
        )
    from .structured import StructuredEnergy

    if isinstance(energy, StructuredEnergy) and energy.split_batch:
        raise ValueError(
            "distributed=True with a split_batch=True structured energy: the copies' slices would be cut from "
            "each rank's share, not the global batch; use split_batch=False"
        )
    return Context(options)


def _dataset_description(source) -> dict:
    """What the ranks compare of a Dataset before any compute: its class, length and first
    items (each rank reads only those few: the whole Dataset is never read for the comparison)."""
    ds = source.dataset
    return {
        "dataset": f"{type(ds).__module__}.{type(ds).__qualname__}",
        "len": len(source),
        "first items": [digest(t) for t in source.probe()],
    }


def _distributed_setup(
    context: Context, energy, sampler, estimator, theta0, data, seed, batch_size, batching, source=None
) -> None:
    """Refuse ranks that would not run the same chains (settings, data, start), then compute a
    control variate's centre gradient once, each rank on its rows, reduced. ``data`` is
    ``None`` for a Dataset (``source``): the ranks compare its class, length and first items."""
    from .checkpointing import json_like

    if context.backend == "nccl" and theta0.device.type != "cuda":
        raise ValueError(
            f"distributed=True: the chains are on {theta0.device} but the process group's backend is NCCL, which "
            "reduces GPU tensors only: put the model on this rank's GPU (energy.to('cuda'), or the module before "
            "building the energy) and pass init there; or use the gloo backend for a CPU run"
        )

    context.check_same_setup(
        {
            "sampler": json_like(sampler.config()),
            "gradient": json_like(estimator.config()),
            "seed": seed,
            "num_chains": int(theta0.shape[0]),
            "batch_size": batch_size,
            "batching": batching,
            "initial positions": digest(theta0),
            "data": [digest(t) for t in data] if data is not None else _dataset_description(source),
        }
    )
    if isinstance(estimator, ControlVariate) and estimator.centre_grad is None and data is not None:
        centre = estimator.centre.unsqueeze(0) if estimator.centre.dim() == 1 else estimator.centre
        if centre.shape[-1] == theta0.shape[-1]:  # else prepare() refuses the centre's shape
            centre = centre.to(theta0)
            context.check_same_setup({"control-variate centre": digest(centre)})
            estimator.centre_grad = full_data_grad(context, energy.cv_base, centre, data, estimator.chunk_size)


class DistributedExecution(Execution):
    """The data-parallel strategy (``distributed=True``): refuses before any compute what
    cannot run on several ranks, draws the global minibatch and hands each rank its share
    (:class:`ShareStream`), reduces every estimate (:class:`DistributedOracle`) and checks
    every ``sync_check_every`` iterations that the ranks hold the same positions."""

    name = "distributed"

    def __init__(self, options: Distributed):
        self.options = options
        self.context: Context | None = None
        self._source = None  # a Dataset's DataSource (the data is not in memory)
        self._sync_every = 0

    def check(self, sampler, energy, source, data) -> None:
        self.context = _distributed_context(self.options, sampler, energy, source, data)
        self._source = source if data is None else None  # a Dataset: read by shares (DatasetShareStream)

    def stream(self, data, batch_size, num_chains, generator, batching):
        context = self.context
        assert context is not None  # set by check()
        if data is None:
            assert self._source is not None  # check() refused a run without data
            return DatasetShareStream(
                self._source, batch_size, num_chains, generator, batching, generator.device, context.world_size,
                context.rank,
            )  # fmt: skip
        return ShareStream(data, batch_size, num_chains, generator, batching, context.world_size, context.rank)

    def setup(self, energy, sampler, estimator, theta0, data, seed, batch_size, batching) -> None:
        assert self.context is not None  # set by check()
        if energy.num_data is None:  # the ranks' shares are averaged: N/n scaling
            raise ValueError(
                "distributed=True averages the ranks' N/n-scaled estimates of the energy, but this sampler asks for "
                "the unscaled minibatch energy (MetropolisWithinGibbs(scaling='none')): use scaling='N/n' (with the "
                "full data, batch_size=None, the two are the same target)"
            )
        _distributed_setup(
            self.context, energy, sampler, estimator, theta0, data, seed, batch_size, batching, self._source
        )

    def oracle(self, energy, estimator, stream, generator) -> Oracle:
        assert self.context is not None
        return DistributedOracle(energy, estimator, stream, generator, self.context)

    def bind(self, run) -> None:
        assert self.context is not None
        self._sync_every = self.context.options.sync_check_every or run.check_every

    def step(self, run, lr):
        context = self.context
        assert context is not None
        context.iteration = run.iteration + 1  # named by a failing collective
        out = run.sampler.step(run.state, run.oracle, lr, run.generator)
        if (run.iteration + 1) % self._sync_every == 0:
            context.check_in_sync(out[0].theta, run.iteration + 1)
        return out

    def settings(self) -> dict:
        assert self.context is not None
        return {"world_size": self.context.world_size}  # absent on one process: older folders still resume
