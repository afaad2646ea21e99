"""Run independent tasks — "run arm s for budget r", "run chain i" — on existing engines.

structmc does not schedule anything itself: an :class:`Executor` is a thin adapter over an
engine that already does (the running process, :mod:`concurrent.futures`, Dask, Ray). The
protocol is four members and the context manager:

``slots``
    how many tasks run at once (one per CPU slot); a caller keeps about that many in flight.
``share(obj)``
    ship a large input (the target, the data) once and get back a handle to pass as a task
    argument; inside the task, :func:`resolve` turns the handle back into the object.
``submit(fn, *args)``
    run ``fn(*args)`` as a task and return a future whose ``.result()`` gives the value or
    raises the task's exception (a :class:`~structmc.DivergenceError` arrives as one, with its
    ``step`` and ``chain``). ``fn`` must be a picklable top-level function, importable by the
    workers (not a lambda, a closure or a function defined in a ``__main__`` script), and its
    arguments, result and exceptions must pickle.
``close()``
    release what the adapter started (also via ``with``).

The adapters:

* :class:`SerialExecutor` — in this process, one task at a time, no dependency; ``submit``
  runs the task at once and returns a finished future. ``share`` is the identity.
* :class:`ProcessPoolExecutor` — :class:`concurrent.futures.ProcessPoolExecutor` with the
  ``spawn`` start method (fork after torch has started its thread pools can deadlock).
  ``share`` writes the object once to a temporary file (``torch.save``, with cloudpickle when
  it is installed so closures and lambdas inside it travel too); each worker loads it on
  first use (memory-mapped, so the tensors' pages are shared between workers through the page
  cache) and keeps it for later tasks. The files are deleted on ``close()``.
* :class:`DaskExecutor` — a :class:`dask.distributed.Client`: a new ``LocalCluster`` on
  127.0.0.1 owned by the adapter, a running scheduler (``tcp://host:port``) or a client of the
  caller's. ``share`` scatters the object to every worker (``broadcast=True``).
* :class:`RayExecutor` — Ray tasks; ``share`` puts the object in Ray's object store once and
  each worker gets it from there on first use (and keeps it).
* :class:`FuturesExecutor` — any other :class:`concurrent.futures.Executor` of the caller's
  (``share`` is the identity, so the object travels with every task).

:func:`as_executor` builds one from a short spec. Every adapter runs each task through
:func:`_pinned`, which sets ``torch.set_num_threads(threads_per_task)`` first: the process,
Dask and Ray adapters default to one thread per task, so that ``slots`` tasks share the CPUs
fairly (a tuner comparing arms by time needs that) instead of oversubscribing them.

:func:`run_chains` runs independent single-chain :func:`structmc.sample` calls as tasks and
:func:`merge_chains` joins their results into one :class:`~structmc.Chain`.

Task arguments and results are pickled (by ``pickle``/``cloudpickle``) when the executor is
not serial; shared objects must not be mutated by tasks (serially it is the caller's own
object, and a Dask worker hands the same object to all its tasks).
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import importlib
import multiprocessing
import os
import pickle
import shutil
import sys
import tempfile
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from .chain import Chain
from .run import DivergenceError, _check_int, sample

__all__ = [
    "Executor", "SerialExecutor", "ProcessPoolExecutor", "DaskExecutor", "RayExecutor", "FuturesExecutor",
    "SharedFile", "SharedRayObject", "as_executor", "resolve", "run_chains", "merge_chains", "chain_seeds",
]


@runtime_checkable
class Executor(Protocol):
    """What the tuner and :func:`run_chains` need from an engine (see the module docstring)."""

    slots: int

    def share(self, obj) -> Any: ...

    def submit(self, fn: Callable, *args) -> Any: ...  # a future with .result()

    def close(self) -> None: ...

    def __enter__(self): ...

    def __exit__(self, *exc) -> None: ...


# ---------------------------------------------------------------------------------------
# what runs inside a task
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SharedFile:
    """Handle of an object shared by :meth:`ProcessPoolExecutor.share`: a key and a file."""

    key: str
    path: str

    def load(self):
        return torch.load(self.path, weights_only=False, mmap=True)


@dataclass(frozen=True)
class SharedRayObject:
    """Handle of an object shared by :meth:`RayExecutor.share`. The reference is wrapped so
    that Ray does not resolve it before the call (it would unpickle the object for every
    task); :func:`resolve` gets it once per worker instead."""

    ref: Any

    @property
    def key(self) -> str:
        return self.ref.hex()

    def load(self):
        import ray

        return ray.get(self.ref)


# The one piece of worker state: shared objects already loaded in this process, by key.
_RESOLVED: dict[str, Any] = {}


def resolve(x):
    """Inside a task: the object behind a handle from ``share``, loaded once per worker
    process and then cached; anything else is returned unchanged (serially the handle is the
    object itself, and Dask hands the object to the task in place of its future)."""
    if isinstance(x, (SharedFile, SharedRayObject)):
        if x.key not in _RESOLVED:
            _RESOLVED[x.key] = x.load()
        return _RESOLVED[x.key]
    return x


def _pinned(threads: int | None, fn: Callable, *args):
    """Run ``fn(*args)`` with ``threads`` torch intra-op threads (``None``: as they are),
    restoring the previous count afterwards."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return fn(*args)
    finally:
        if threads is not None:
            torch.set_num_threads(before)


def _default_workers(threads_per_task: int | None) -> int:
    """One task per ``threads_per_task`` CPUs."""
    return max(1, (os.cpu_count() or 1) // max(1, threads_per_task or 1))


def _import_optional(module: str, extra: str, user: str):
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f'{user} needs the optional dependency {module!r}: pip install "structmc[{extra}]"') from err


# ---------------------------------------------------------------------------------------
# adapters
# ---------------------------------------------------------------------------------------
class _Adapter:
    slots: int = 1
    threads_per_task: int | None = None

    def share(self, obj):
        return obj

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(slots={self.slots}, threads_per_task={self.threads_per_task})"


class SerialExecutor(_Adapter):
    """Runs each task in this process when it is submitted; the returned future is already
    done (a task's exception is kept in it and raised by ``.result()``). ``threads_per_task``
    (default ``None``: leave torch's thread count alone) applies to the task only."""

    def __init__(self, threads_per_task: int | None = None):
        self.threads_per_task = threads_per_task
        self.slots = 1

    def submit(self, fn: Callable, *args) -> cf.Future:
        future = cf.Future()
        try:
            future.set_result(_pinned(self.threads_per_task, fn, *args))
        except Exception as err:  # noqa: BLE001  (kept for .result(), as a pool would)
            future.set_exception(err)
        return future


class ProcessPoolExecutor(_Adapter):
    """Worker processes on this machine (``spawn``), ``workers`` of them (default: one per
    ``threads_per_task`` CPUs). ``share`` writes the object once to a temporary file and
    returns a small :class:`SharedFile` handle; :func:`resolve` loads it in each worker on
    first use. The files are removed by ``close()`` (or when the adapter is collected).
    As with any spawned pool, a script that makes one needs ``if __name__ == "__main__":``."""

    def __init__(self, workers: int | None = None, *, threads_per_task: int | None = 1):
        self.threads_per_task = threads_per_task
        self.slots = _check_int("workers", workers, 1) if workers is not None else _default_workers(threads_per_task)
        self._pool = cf.ProcessPoolExecutor(max_workers=self.slots, mp_context=multiprocessing.get_context("spawn"))
        self._dir: str | None = None
        self._remove_dir = None

    def share(self, obj) -> SharedFile:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="structmc-shared-")
            self._remove_dir = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        key = uuid.uuid4().hex
        path = os.path.join(self._dir, f"{key}.pt")
        # torch.save keeps tensor storages (and views of them) as raw data a worker can
        # memory-map; cloudpickle, when present, also carries closures and lambdas.
        torch.save(obj, path, pickle_module=_pickle_module(), pickle_protocol=pickle.HIGHEST_PROTOCOL)
        return SharedFile(key, path)

    def submit(self, fn: Callable, *args) -> cf.Future:
        return self._pool.submit(_pinned, self.threads_per_task, fn, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._remove_dir is not None:
            self._remove_dir()  # after the workers exit: nothing has the files open any more


def _pickle_module():
    try:
        import cloudpickle
    except ImportError:
        return pickle
    return cloudpickle


class DaskExecutor(_Adapter):
    """Tasks on Dask workers (``pip install "structmc[dask]"``).

    With ``client`` the caller's :class:`dask.distributed.Client` is used (and left open);
    with ``address`` (``"tcp://host:port"``) a client of that scheduler is opened; with
    neither, a ``LocalCluster`` of ``workers`` single-threaded worker processes is started
    on 127.0.0.1 (no dashboard). What the adapter opened, ``close()`` closes. ``slots`` is
    the number of worker threads when the adapter was made.
    """

    def __init__(self, client=None, *, address: str | None = None, workers: int | None = None,
                 threads_per_task: int | None = 1):
        distributed = _import_optional("distributed", "dask", "DaskExecutor")
        self.threads_per_task = threads_per_task
        self._cluster = None
        self._owns_client = client is None
        if client is None:
            if address is None:
                n = _check_int("workers", workers, 1) if workers is not None else _default_workers(threads_per_task)
                self._cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                         host="127.0.0.1", dashboard_address=None)
                address = self._cluster
            client = distributed.Client(address)
        self.client = client
        self.slots = max(1, sum(client.nthreads().values()))

    def share(self, obj):
        # a list of one, so that a list or dict is shipped as one object (not element-wise);
        # hash=False: no tokenizing of large data just to name it
        [future] = self.client.scatter([obj], broadcast=True, hash=False)
        return future  # a future passed as a task argument arrives as the object

    def submit(self, fn: Callable, *args):
        return self.client.submit(_pinned, self.threads_per_task, fn, *args, pure=False)

    def close(self) -> None:
        if self._owns_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()


class RayExecutor(_Adapter):
    """Ray tasks (``pip install "structmc[ray]"``), each reserving ``threads_per_task`` CPUs.

    If Ray is not initialised yet the adapter calls ``ray.init(address=address, num_cpus=
    workers, include_dashboard=False)`` (``num_cpus`` only for a new local instance) and
    shuts Ray down on ``close()``; a Ray session started by the caller is left running.
    """

    def __init__(self, address: str | None = None, *, workers: int | None = None, threads_per_task: int | None = 1):
        ray = _import_optional("ray", "ray", "RayExecutor")
        self.threads_per_task = threads_per_task
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            options = {"address": address, "include_dashboard": False}
            if address is None:
                options["num_cpus"] = (_check_int("workers", workers, 1) if workers is not None
                                       else os.cpu_count() or 1)
            ray.init(**options)
        cpus_per_task = max(1, threads_per_task or 1)
        # one remote function for every task: the task's own function travels as an argument
        self._remote = ray.remote(_pinned).options(num_cpus=cpus_per_task)
        self.slots = max(1, int(ray.cluster_resources().get("CPU", 1)) // cpus_per_task)

    def share(self, obj) -> SharedRayObject:
        return SharedRayObject(self._ray.put(obj))

    def submit(self, fn: Callable, *args) -> cf.Future:
        return _unwrap_ray_error(self._remote.remote(self.threads_per_task, fn, *args).future())

    def close(self) -> None:
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()


def _unwrap_ray_error(ray_future: cf.Future) -> cf.Future:
    """A future that raises the task's own exception, as the other adapters do, instead of
    Ray's RayTaskError wrapper (the original is its ``.cause``)."""
    future = cf.Future()

    def settle(done: cf.Future) -> None:
        err = done.exception()
        if err is None:
            future.set_result(done.result())
        else:
            cause = getattr(err, "cause", None)
            future.set_exception(cause if isinstance(cause, BaseException) else err)

    ray_future.add_done_callback(settle)
    return future


class FuturesExecutor(_Adapter):
    """Any :class:`concurrent.futures.Executor` of the caller's (left open by ``close()``).
    ``share`` is the identity, so the object is sent with every task. ``threads_per_task``
    defaults to ``None`` (torch's thread count is per process: threads of a thread pool
    would fight over it)."""

    def __init__(self, executor: cf.Executor, *, threads_per_task: int | None = None):
        self.executor = executor
        self.threads_per_task = threads_per_task
        self.slots = getattr(executor, "_max_workers", None) or os.cpu_count() or 1

    def submit(self, fn: Callable, *args) -> cf.Future:
        return self.executor.submit(_pinned, self.threads_per_task, fn, *args)


def as_executor(spec=None, *, workers: int | None = None, threads_per_task: int | None = None) -> Executor:
    """An :class:`Executor` from ``spec``:

    * ``None`` or ``"serial"``: :class:`SerialExecutor`;
    * ``"process"`` / ``"processes"``: :class:`ProcessPoolExecutor` with ``workers`` processes;
    * ``"dask"``: :class:`DaskExecutor` on a new ``LocalCluster`` of ``workers`` processes;
      ``"tcp://host:port"`` or ``"dask://host:port"``: a Dask scheduler already running;
      a ``dask.distributed.Client``: that client;
    * ``"ray"`` or ``"ray://..."``: :class:`RayExecutor` (a local Ray with ``workers`` CPUs,
      or that cluster);
    * an :class:`Executor` (any adapter above): itself;
    * a :class:`concurrent.futures.Executor`: :class:`FuturesExecutor` around it.

    ``workers`` defaults to one per ``threads_per_task`` CPUs and is ignored when connecting
    to an existing cluster. ``threads_per_task=None`` means 1 for the process, Dask and Ray
    adapters (one task per CPU, fair timings) and "leave torch's setting alone" for the
    serial and wrapped ``concurrent.futures`` executors.
    """
    if threads_per_task is not None:
        threads_per_task = _check_int("threads_per_task", threads_per_task, 1)
    per_task = 1 if threads_per_task is None else threads_per_task
    if spec is None or (isinstance(spec, str) and spec == "serial"):
        return SerialExecutor(threads_per_task)
    if isinstance(spec, str):
        if spec in ("process", "processes"):
            return ProcessPoolExecutor(workers, threads_per_task=per_task)
        if spec == "dask":
            return DaskExecutor(workers=workers, threads_per_task=per_task)
        if spec.startswith(("tcp://", "dask://")):
            return DaskExecutor(address="tcp://" + spec.split("://", 1)[1], threads_per_task=per_task)
        if spec == "ray" or spec.startswith("ray://"):
            return RayExecutor(None if spec == "ray" else spec, workers=workers, threads_per_task=per_task)
    elif _is_dask_client(spec):
        return DaskExecutor(spec, threads_per_task=per_task)
    elif isinstance(spec, Executor):
        return spec
    elif isinstance(spec, cf.Executor):
        return FuturesExecutor(spec, threads_per_task=threads_per_task)
    raise ValueError(f"unknown executor {spec!r}: use None or 'serial', 'process', 'dask', 'tcp://host:port' "
                     "(a Dask scheduler), 'ray', 'ray://host:port', a dask.distributed.Client, a structmc "
                     "Executor or a concurrent.futures.Executor")


def _is_dask_client(obj) -> bool:
    distributed = sys.modules.get("distributed")  # no import: a Client means it is loaded already
    return distributed is not None and isinstance(obj, distributed.Client)


# ---------------------------------------------------------------------------------------
# independent chains
# ---------------------------------------------------------------------------------------
def chain_seeds(seed: int, num_chains: int) -> list[int]:
    """The seeds :func:`run_chains` gives its chains: ``numpy.random.SeedSequence(seed)
    .spawn(num_chains)``, each child's first 64-bit word."""
    return [int(child.generate_state(1, dtype=np.uint64)[0])
            for child in np.random.SeedSequence(seed).spawn(num_chains)]


def run_chains(target, init, sampler, num_steps: int, *, num_chains: int, executor=None, seed: int = 0,
               **sample_kwargs) -> Chain:
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
            futures.append(engine.submit(_sample_one_chain, problem, inits[i], sampler, num_steps, seeds[i],
                                         {**options, "out_dir": chain_dir}))
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
    if init is None:
        return [None] * num_chains
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
        for later in futures[i + 1:]:
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
