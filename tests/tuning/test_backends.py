"""The same seed and iteration budget give the same choice and trace on every backend: in
process, a process pool and a Dask LocalCluster (and Ray where it is installed)."""

import pytest
import torch
from support.tuning import linreg

from structmc import Budget
from structmc.executors import DaskExecutor, ProcessPoolExecutor, SerialExecutor
from structmc.tuning import grid, mamba

ARMS = grid("sgld", lr=[0.02, 0.1, 500.0], batch_size=[None, 6, 3]) + grid(
    "sghmc", lr=[1e-3], num_leapfrog=[2], batch_size=[6], gradient="cv"
)  # 10 arms: rounds of 10, 3


def _tune(executor, num_chains=4):
    energy, data, model = linreg(N=12, d=2)
    if num_chains == 1:
        # the path a pickled ModuleEnergy used to break: N given (sample() does not rebind the
        # energy) and one chain (the bound module's forward, not vmap)
        energy = energy.with_num_data(12)
    mean, _ = model.posterior()
    return mamba(
        energy,
        torch.zeros(2, dtype=torch.float64),
        ARMS,
        Budget(iterations=1200),
        data=data,
        num_chains=num_chains,
        centre=torch.as_tensor(mean),
        seed=7,
        thin=2,
        executor=executor,
        progress=False,
    )


def _trace(res):
    """Everything but wall-clock seconds."""
    timeless = [
        [
            {k: v for k, v in r.items() if not k.endswith("_s") and k not in ("seconds", "traceback")}
            for r in rnd["results"]
        ]
        for rnd in res.rounds
    ]
    return res.best_index, timeless, [r["kept"] for r in res.rounds], [r["pruned"] for r in res.rounds]


@pytest.fixture(scope="module")
def serial():
    return _trace(_tune(SerialExecutor()))


@pytest.fixture(scope="module")
def serial_one_chain():
    return _trace(_tune(SerialExecutor(), num_chains=1))


def test_serial_trace_is_complete(serial):
    best, results, kept, pruned = serial
    assert [len(r) for r in results] == [10, 3] and len(kept[-1]) == 1
    assert sum(1 for r in results[0] if r["error"]) == 3  # the lr = 500 arms overflow at once


def test_process_pool_gives_the_same_choice_and_trace(serial):
    with ProcessPoolExecutor(2) as ex:
        assert _trace(_tune(ex)) == serial


def test_dask_gives_the_same_choice_and_trace(serial, serial_one_chain):
    pytest.importorskip("distributed", reason="Dask backend: pip install 'structmc[dask]'")
    with DaskExecutor(workers=2) as ex:
        assert _trace(_tune(ex)) == serial
        assert _trace(_tune(ex, num_chains=1)) == serial_one_chain


def test_one_module_chain_tunes_the_same_in_a_process_pool(serial_one_chain):
    """A ModuleEnergy with one chain crosses the process boundary pickled: the workers must
    sample the posterior, not the prior (they did before the energy re-bound itself)."""
    with ProcessPoolExecutor(2) as ex:
        assert _trace(_tune(ex, num_chains=1)) == serial_one_chain


def test_ray_gives_the_same_choice_and_trace(serial):
    pytest.importorskip("ray", reason="Ray backend not installed here: pip install 'structmc[ray]'")
    from structmc.executors import RayExecutor

    with RayExecutor(workers=2) as ex:
        assert _trace(_tune(ex)) == serial
