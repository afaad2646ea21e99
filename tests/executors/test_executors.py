"""Executors: serial, process pool, Dask (a LocalCluster on 127.0.0.1) and Ray adapters run
top-level tasks with shared inputs shipped once, pin torch threads, and surface task errors at
``.result()``; ``run_chains`` gives bitwise the same chains on every executor.

One process pool and one Dask cluster (two workers each) serve the whole module."""

from __future__ import annotations

import concurrent.futures as cf
import os
import pickle
import sys

import pytest
import torch
from support.runs import gaussian_log_prob, mlp_energy

import structmc as sm
from structmc.executors import (
    DaskExecutor,
    FuturesExecutor,
    ProcessPoolExecutor,
    SerialExecutor,
    as_executor,
    chain_seeds,
    merge_chains,
    resolve,
    run_chains,
)


# ---------------------------------------------------------------------------------------
# tasks (top level, so that workers can import them)
# ---------------------------------------------------------------------------------------
class Counted:
    """A shared object that counts how often this process has unpickled one."""

    loads = 0

    def __init__(self, value):
        self.value = value

    def __setstate__(self, state):
        type(self).loads += 1
        self.__dict__.update(state)


def offset_by_shared(handle, x):
    return resolve(handle).value + x


def loads_in_this_worker(handle):
    resolve(handle)
    return os.getpid(), Counted.loads


def fail(message):
    raise ValueError(message)


def diverge():
    raise sm.DivergenceError("sgld: non-finite energy at iteration 3", 3)


def torch_threads():
    return torch.get_num_threads()


# ---------------------------------------------------------------------------------------
# engines shared by the module
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pool():
    with ProcessPoolExecutor(2) as executor:
        yield executor


@pytest.fixture(scope="module")
def dask_executor():
    pytest.importorskip("distributed", reason="the Dask tests need dask[distributed] (structmc[dask])")
    with as_executor("dask", workers=2) as executor:
        yield executor


@pytest.fixture(scope="module")
def ray_executor():
    ray = pytest.importorskip("ray", reason="the Ray tests need ray (structmc[ray])")
    # Ray's workers do not get this process's sys.path but do inherit its environment: let
    # them import this module (its task functions) and tests/support
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (tests_dir, saved) if p)
    try:
        executor = as_executor("ray", workers=2)
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    with executor:
        yield executor
    assert not ray.is_initialized()  # the adapter started Ray, so closing it stopped Ray


PARALLEL = {"process": "pool", "dask": "dask_executor", "ray": "ray_executor"}  # name: module fixture


@pytest.fixture(params=["serial", *PARALLEL])
def executor(request):
    if request.param == "serial":
        return SerialExecutor()
    return request.getfixturevalue(PARALLEL[request.param])


# ---------------------------------------------------------------------------------------
# the protocol on each adapter
# ---------------------------------------------------------------------------------------
def test_tasks_see_the_shared_object(executor):
    handle = executor.share(Counted(10.0))
    futures = [executor.submit(offset_by_shared, handle, x) for x in range(6)]
    assert [f.result() for f in futures] == [10.0 + x for x in range(6)]


@pytest.mark.parametrize("name", PARALLEL)
def test_a_shared_object_is_loaded_at_most_once_per_worker(request, name):
    executor = request.getfixturevalue(PARALLEL[name])
    assert executor.slots == 2
    handle = executor.share(Counted(1.0))
    seen = [f.result() for f in [executor.submit(loads_in_this_worker, handle) for _ in range(8)]]
    counts = {}
    for pid, loads in seen:
        counts.setdefault(pid, set()).add(loads)
    # an earlier test's object may already be loaded there, but this one is loaded only once:
    # the count a worker reports never changes across its tasks
    assert all(len(c) == 1 and min(c) >= 1 for c in counts.values()), counts


def test_the_process_pool_writes_a_shared_object_once(pool):
    before = set(os.listdir(pool._dir)) if pool._dir else set()
    handle = pool.share({"big": torch.zeros(1000)})
    assert set(os.listdir(pool._dir)) - before == {os.path.basename(handle.path)}
    assert len(pickle.dumps(handle)) < 300  # the task argument is the small handle


def test_the_process_pool_removes_its_files_on_close():
    executor = ProcessPoolExecutor(1)
    handle = executor.share(torch.ones(3))
    assert os.path.exists(handle.path)
    executor.close()
    assert not os.path.exists(os.path.dirname(handle.path))


def test_task_errors_surface_at_result(executor):
    future = executor.submit(fail, "boom")  # no raise at submit
    with pytest.raises(ValueError, match="boom"):
        future.result()
    assert executor.submit(offset_by_shared, executor.share(Counted(1.0)), 1).result() == 2.0  # still usable


def test_a_divergence_error_travels_with_its_step(executor):
    with pytest.raises(sm.DivergenceError, match="iteration 3") as info:
        executor.submit(diverge).result()
    assert info.value.step == 3


def test_tasks_run_with_threads_per_task(executor):
    expected = 1 if executor.threads_per_task is None else executor.threads_per_task
    assert executor.submit(torch_threads).result() == expected  # the conftest's 1 when serial


def test_serial_threads_apply_to_the_task_only():
    before = torch.get_num_threads()
    assert SerialExecutor(threads_per_task=2).submit(torch_threads).result() == 2
    assert torch.get_num_threads() == before
    assert SerialExecutor().submit(torch_threads).result() == before


def test_a_wrapped_concurrent_futures_executor():
    with cf.ThreadPoolExecutor(2) as threads:
        executor = as_executor(threads)
        assert isinstance(executor, FuturesExecutor) and executor.slots == 2
        handle = executor.share(Counted(3.0))
        assert executor.submit(offset_by_shared, handle, 1).result() == 4.0
        with pytest.raises(ValueError, match="boom"):
            executor.submit(fail, "boom").result()


# ---------------------------------------------------------------------------------------
# as_executor
# ---------------------------------------------------------------------------------------
def test_as_executor_specs(pool, dask_executor):
    assert isinstance(as_executor(), SerialExecutor) and isinstance(as_executor("serial"), SerialExecutor)
    assert as_executor(pool) is pool
    wrapped = as_executor(dask_executor.client)  # the caller's client: used, not closed
    assert isinstance(wrapped, DaskExecutor) and wrapped.client is dask_executor.client
    wrapped.close()
    assert dask_executor.submit(torch_threads).result() == 1
    address = dask_executor.client.scheduler.address
    for spec in (address, address.replace("tcp://", "dask://")):
        with as_executor(spec) as connected:
            assert connected.slots == 2
            assert connected.submit(offset_by_shared, connected.share(Counted(1.0)), 2).result() == 3.0


@pytest.mark.parametrize("spec", ["mpi", "Process", 42, object()])
def test_as_executor_refuses_unknown_specs(spec):
    with pytest.raises(ValueError, match="unknown executor .*'serial', 'process', 'dask'"):
        as_executor(spec)


@pytest.mark.parametrize(
    "spec, module, extra",
    [("dask", "distributed", "dask"), ("tcp://127.0.0.1:1", "distributed", "dask"), ("ray", "ray", "ray")],
)
def test_a_missing_engine_names_the_extra(monkeypatch, spec, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(ImportError, match=rf'pip install "structmc\[{extra}\]"'):
        as_executor(spec)


def test_as_executor_checks_threads_and_workers():
    with pytest.raises(ValueError, match="threads_per_task"):
        as_executor("process", threads_per_task=0)
    with pytest.raises(ValueError, match="workers"):
        as_executor("process", workers=0)


# ---------------------------------------------------------------------------------------
# run_chains and merge_chains
# ---------------------------------------------------------------------------------------
STEPS = dict(num_steps=20, burn_in=4, thin=2, batch_size=30)


def mlp_chains(executor, num_chains=3, **kwargs):
    # N given: sample() uses the energy as shipped (no rebinding copy), and each task runs
    # one chain through the bound module, the path a pickled ModuleEnergy used to break
    energy, data = mlp_energy(num_data=90)
    return run_chains(
        energy, None, sm.SGLD(1e-3), num_chains=num_chains, data=data, seed=5, executor=executor, **STEPS, **kwargs
    )


@pytest.fixture(scope="module")
def serial_chains():
    return mlp_chains(None)


def test_serial_chains_are_the_single_chain_runs(serial_chains):
    energy, data = mlp_energy(num_data=90)
    seeds = chain_seeds(5, 3)
    assert len(set(seeds)) == 3 and serial_chains.config["chain_seeds"] == seeds
    assert serial_chains.samples.shape == (3, 8, energy.space.dim)
    for i, seed in enumerate(seeds):
        alone = sm.sample(energy, None, sm.SGLD(1e-3), data=data, seed=seed, num_chains=1, progress=False, **STEPS)
        assert torch.equal(serial_chains.samples[i], alone.samples[0])
        assert torch.equal(serial_chains.info["energy"][i], alone.info["energy"][0])
        assert torch.equal(serial_chains.draw_steps, alone.draw_steps)
    info = serial_chains.info
    assert info["energy"].shape == (3, 20)
    assert info["lr"].shape == (20,) and info["grad_evals"].shape == (20,)  # the same in every chain: kept
    assert info["time"].shape == (3, 20)  # differs: per chain


@pytest.mark.parametrize("name", PARALLEL)
def test_parallel_chains_equal_the_serial_ones(request, serial_chains, name):
    chains = mlp_chains(request.getfixturevalue(PARALLEL[name]))
    assert torch.equal(chains.samples, serial_chains.samples)
    assert torch.equal(chains.draw_steps, serial_chains.draw_steps)
    for key in ("energy", "lr", "grad_evals"):
        assert torch.equal(chains.info[key], serial_chains.info[key])
    assert chains.config == serial_chains.config


def test_an_executor_made_from_a_spec_is_closed_after_the_run(serial_chains):
    made = []
    original = SerialExecutor.close

    def close(self):
        made.append(self)
        original(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SerialExecutor, "close", close)
        chains = mlp_chains("serial", num_chains=2)
        assert len(made) == 1
        assert torch.equal(chains.samples, serial_chains.samples[:2])
        mlp_chains(made[0], num_chains=2)  # the caller's executor: left open
        assert len(made) == 1


def test_init_rows_go_to_their_chains():
    init = torch.tensor([[0.0, 0.0], [5.0, 5.0]])
    chains = run_chains(gaussian_log_prob, init, sm.SGLD(1e-4), 3, num_chains=2)
    assert torch.allclose(chains.samples[:, 0], init, atol=0.1)
    with pytest.raises(ValueError, match=r"init must have shape \[P\] or \[num_chains=3, P\]"):
        run_chains(gaussian_log_prob, init, sm.SGLD(1e-4), 3, num_chains=3)


def test_out_dir_gets_one_folder_per_chain(tmp_path, pool):
    energy, data = mlp_energy()
    chains = run_chains(energy, None, sm.SGLD(1e-3), 6, num_chains=2, data=data, out_dir=tmp_path, executor=pool)
    for i in range(2):
        assert torch.equal(sm.load_chain(tmp_path / f"chain_{i}").samples[0], chains.samples[i])


@pytest.mark.parametrize("executor_name", ["serial", "process"])
def test_a_diverging_chain_is_named(request, executor_name):
    executor = None if executor_name == "serial" else request.getfixturevalue("pool")
    init = torch.tensor([[0.0, 0.0], [1e30, 1e30]])  # chain 1's energy overflows at once
    with pytest.raises(sm.DivergenceError, match="chain 1: sgld: .*NaN/Inf at the initial point") as info:
        run_chains(gaussian_log_prob, init, sm.SGLD(0.1), 5, num_chains=2, executor=executor)
    assert info.value.step == 1 and info.value.chain.samples.shape == (1, 0, 2)


def test_merge_chains_checks_what_it_joins(serial_chains):
    one = merge_chains([serial_chains])
    assert torch.equal(one.samples, serial_chains.samples) and one.info.keys() == serial_chains.info.keys()
    twice = merge_chains([serial_chains, serial_chains])
    assert twice.samples.shape[0] == 6 and twice.info["energy"].shape == (6, 20)
    assert twice.info["time"].shape == (6, 20)  # per chain in both: concatenated
    with pytest.raises(ValueError, match="at least one"):
        merge_chains([])
    dim = serial_chains.dim
    flat = sm.sample(gaussian_log_prob, torch.zeros(dim), sm.SGLD(0.1), 20, burn_in=4, thin=2, progress=False)
    with pytest.raises(ValueError, match="different parameter space"):
        merge_chains([serial_chains, flat])
    shorter = sm.sample(gaussian_log_prob, torch.zeros(dim), sm.SGLD(0.1), 10, progress=False)
    with pytest.raises(ValueError, match="draws at other iterations"):
        merge_chains([flat, shorter])


def test_merge_chains_keeps_equal_records_and_spreads_different_ones():
    a = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 5, num_chains=2, progress=False)
    b = sm.sample(gaussian_log_prob, torch.zeros(2), sm.SGLD(0.1), 5, num_chains=1, seed=1, progress=False)
    merged = merge_chains([a, b])
    assert merged.samples.shape == (3, 5, 2) and merged.info["energy"].shape == (3, 5)
    assert torch.equal(merged.info["lr"], a.info["lr"])  # [S], the same in both runs
    time = merged.info["time"]  # [S] per run, different: one row per chain
    assert time.shape == (3, 5)
    assert torch.equal(time[0], a.info["time"]) and torch.equal(time[1], a.info["time"])
    assert torch.equal(time[2], b.info["time"])
    b.info.pop("lr")
    with pytest.raises(ValueError, match="info records"):
        merge_chains([a, b])
