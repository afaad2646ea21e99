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

from .adapters import (
    DaskExecutor,
    Executor,
    FuturesExecutor,
    ProcessPoolExecutor,
    RayExecutor,  # noqa: F401
    SerialExecutor,
    _Adapter,
    _is_dask_client,
    _pickle_module,
    _unwrap_ray_error,
    as_executor,
)
from .independent_chains import (
    _chain_inits,
    _chain_result,
    _failed,
    _merge_record,
    _sample_one_chain,  # noqa: F401
    chain_seeds,
    merge_chains,
    run_chains,
)
from .tasks import (
    _RESOLVED,
    SharedFile,
    SharedRayObject,
    _default_workers,
    _import_optional,
    _pinned,  # noqa: F401
    resolve,
)

# one home for the names of this package, whichever file defines them (tasks: what runs in a
# worker; adapters: the executors; independent_chains: run_chains and merge_chains), as when it
# was one module: the functions and handles a task carries are pickled by this name, and a
# worker finds them here
for _obj in (
    Executor,
    SharedFile,
    SharedRayObject,
    resolve,
    _pinned,
    _Adapter,
    SerialExecutor,
    ProcessPoolExecutor,
    DaskExecutor,
    RayExecutor,
    FuturesExecutor,
    as_executor,
    chain_seeds,
    run_chains,
    merge_chains,
    _sample_one_chain,
):
    _obj.__module__ = __name__
del _obj

__all__ = [
    "Executor",
    "SerialExecutor",
    "ProcessPoolExecutor",
    "DaskExecutor",
    "RayExecutor",
    "FuturesExecutor",
    "SharedFile",
    "SharedRayObject",
    "as_executor",
    "resolve",
    "run_chains",
    "merge_chains",
    "chain_seeds",
]
