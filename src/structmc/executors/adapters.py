"""The adapters of :mod:`structmc.executors` (serial, process pool, Dask, Ray, any
``concurrent.futures`` executor), the :class:`Executor` protocol they follow, and
:func:`as_executor`, which builds one from a short spec."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import pickle
import shutil
import sys
import tempfile
import uuid
import weakref
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

from ..run_inputs import check_int as _check_int
from .tasks import SharedFile, SharedRayObject, _default_workers, _import_optional, _pinned


@runtime_checkable
class Executor(Protocol):
    """What the tuner and :func:`run_chains` need from an engine (see :mod:`structmc.executors`)."""

    slots: int

    def share(self, obj) -> Any: ...

    def submit(self, fn: Callable, *args) -> Any: ...  # a future with .result()

    def close(self) -> None: ...

    def __enter__(self): ...

    def __exit__(self, *exc) -> None: ...


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
        future: cf.Future = cf.Future()
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
        self._remove_dir: weakref.finalize | None = None

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

    def __init__(
        self, client=None, *, address: str | None = None, workers: int | None = None, threads_per_task: int | None = 1
    ):
        distributed = _import_optional("distributed", "dask", "DaskExecutor")
        self.threads_per_task = threads_per_task
        self._cluster = None
        self._owns_client = client is None
        if client is None:
            if address is None:
                n = _check_int("workers", workers, 1) if workers is not None else _default_workers(threads_per_task)
                self._cluster = distributed.LocalCluster(
                    n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
                )
                address = self._cluster
            client = distributed.Client(address)
            if self._cluster is not None:
                # every worker up before the first share(): broadcast reaches them all, so no worker
                # fetches the problem from another, which may be serialising it mid-evaluation
                client.wait_for_workers(n)
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
            options: dict[str, Any] = {"address": address, "include_dashboard": False}
            if address is None:
                options["num_cpus"] = _check_int("workers", workers, 1) if workers is not None else os.cpu_count() or 1
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
    future: cf.Future = cf.Future()

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
    raise ValueError(
        f"unknown executor {spec!r}: use None or 'serial', 'process', 'dask', 'tcp://host:port' "
        "(a Dask scheduler), 'ray', 'ray://host:port', a dask.distributed.Client, a structmc "
        "Executor or a concurrent.futures.Executor"
    )


def _is_dask_client(obj) -> bool:
    distributed = sys.modules.get("distributed")  # no import: a Client means it is loaded already
    return distributed is not None and isinstance(obj, distributed.Client)
