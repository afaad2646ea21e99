"""What the spawned ranks of the torch.distributed tests run (gloo on CPU; importable by the
spawned interpreters as ``dist_run.workers``)."""

from __future__ import annotations

import os
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import structmc
from structmc.gibbs import MetropolisWithinGibbs
from structmc.partitions import fully_joint
from structmc.structured import BernoulliMask, StructuredEnergy, by_neuron

DTYPE = torch.float64


def launch(rank: int, world_size: int, init_file: str, task: str, args: dict, out_dir: str, timeout_s: float):
    """Entry point of one rank: join the gloo group, run ``task``, save its result (or error)."""
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )  # fmt: skip
    try:
        result = {"ok": TASKS[task](rank, world_size, **args)}
    except BaseException as err:  # noqa: BLE001  (the parent asserts on it)
        result = {"error": err, "type": type(err).__name__, "message": str(err), "trace": traceback.format_exc()}
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass


# -- problems -----------------------------------------------------------------------------------
def classification_data(n: int = 37, d: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=DTYPE)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    return x, y


def mlp_energy(seed: int = 0):
    torch.manual_seed(seed)
    module = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2)).to(DTYPE)
    return structmc.ModuleEnergy(module, "categorical", prior_std=1.0)


def configurations():
    """name -> (energy factory, sampler factory, sample() options): every sampler family."""
    x, y = classification_data()
    base = {"data": (x, y), "batch_size": 9, "seed": 3}
    centre = mlp_energy().initial_position().detach() * 0.5
    return {
        "sgld": (mlp_energy, lambda: structmc.SGLD(1e-3), base),
        "sgld-3-chains-full-batch": (
            mlp_energy,
            lambda: structmc.SGLD(1e-3),
            {**base, "batch_size": None, "num_chains": 3},
        ),
        "psgld-gamma": (mlp_energy, lambda: structmc.PSGLD(1e-3, include_gamma=True), base),
        "sghmc": (mlp_energy, lambda: structmc.SGHMC(1e-3, friction=0.3, num_leapfrog=2), {**base, "num_chains": 2}),
        "scale-adapted-sghmc": (mlp_energy, lambda: structmc.ScaleAdaptedSGHMC(1e-3), base),
        "sgnht": (mlp_energy, lambda: structmc.SGNHT(1e-3), {**base, "batching": "with_replacement"}),
        "sgld-cv": (
            mlp_energy,
            lambda: structmc.SGLD(1e-3),
            {**base, "gradient": structmc.ControlVariate(centre, chunk_size=8)},
        ),
        "sgld-stratified": (mlp_energy, lambda: structmc.SGLD(1e-3), {**base, "batching": "stratified"}),
        "sd-structured": (
            lambda: StructuredEnergy(
                mlp_energy(), by_neuron(mlp_energy().space), 20, mask=BernoulliMask(0.5), num_copies=2, seed=1
            ),
            lambda: structmc.SGLD(1e-3),
            {**base, "num_chains": 2},
        ),
        "mala-full-batch": (
            mlp_energy,
            lambda: MetropolisWithinGibbs(fully_joint(mlp_energy().space.dim), 1e-4, mala=True, scaling="N/n"),
            {**base, "batch_size": None, "num_chains": 2},
        ),
        "s-structured": (
            lambda: StructuredEnergy(mlp_energy(), by_neuron(mlp_energy().space), 20, seed=2),
            lambda: structmc.SGLD(1e-3),
            base,
        ),
    }


class RecordingItems(torch.utils.data.Dataset):
    """The items ``(x_i, y_i)`` of :func:`classification_data` as a map-style Dataset (not a
    TensorDataset, which structmc reads as tensors) that records every read: ``fetched`` is one
    list of indices per read (one ``__getitems__`` call, or one ``dataset[i]``). ``targets``:
    the labels stratified batching reads."""

    def __init__(self, n: int = 37, batched: bool = False):
        self.x, self.y = classification_data(n)
        self.targets = self.y
        self.fetched: list[list[int]] = []
        if batched:  # the batched read torch's DataLoader also uses
            self.__getitems__ = self._getitems

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        self.fetched.append([int(i)])
        return self.x[i], self.y[i]

    def _getitems(self, indices):
        self.fetched.append([int(i) for i in indices])
        return [(self.x[i], self.y[i]) for i in indices]


DATASET_RUNS = {
    # name -> (Dataset options, sample() options); the sampler is SGLD(1e-3) on mlp_energy()
    "epoch, dataset[i], prefetch": ({}, {"batch_size": 9, "seed": 3, "num_chains": 2}),
    "without replacement, __getitems__, DataSource": (
        {"batched": True, "source": True},
        {"batch_size": 9, "seed": 5, "batching": "without_replacement"},
    ),
    "stratified": ({"batched": True}, {"batch_size": 10, "seed": 6, "batching": "stratified", "num_chains": 2}),
    "full batch": ({"batched": True}, {"batch_size": None, "seed": 7, "num_chains": 3}),
}


def dataset_run(name: str, num_steps: int, distributed=True, data: str = "dataset", **extra):
    """``DATASET_RUNS[name]`` on a fresh :class:`RecordingItems` (``data="tensors"``: its tensors
    in memory): ``{"samples", "energy", "fetched"}``."""
    ds_options, options = DATASET_RUNS[name]
    ds = RecordingItems(batched=ds_options.get("batched", False))
    given = (ds.x, ds.y) if data == "tensors" else structmc.DataSource(ds) if ds_options.get("source") else ds
    chain = structmc.sample(
        mlp_energy(), None, structmc.SGLD(1e-3), num_steps, data=given, distributed=distributed, **options, **extra
    )
    return {"samples": chain.samples, "energy": chain.info["energy"], "fetched": ds.fetched}


def run_configuration(name: str, num_steps: int = 25, distributed=True, **extra):
    make_energy, make_sampler, options = configurations()[name]
    chain = structmc.sample(make_energy(), None, make_sampler(), num_steps, distributed=distributed, **options, **extra)
    return chain


# -- tasks ----------------------------------------------------------------------------------------
def every_family(rank, world_size, names, num_steps):
    out = {}
    for name in names:
        chain = run_configuration(name, num_steps)
        out[name] = chain.samples
        out[name + "/energy"] = chain.info["energy"]  # the reduced minibatch energy of every iteration
    return out


def gaussian_law(rank, world_size, num_chains, num_steps, seed):
    """SGLD on the exact-law linear regression of tests/samplers/test_statistical.py."""
    from samplers.test_statistical import DATA, log_prob

    init = torch.zeros(num_chains, 2, dtype=DTYPE)
    chain = structmc.sample(
        log_prob, init, structmc.SGLD(0.1), num_steps, data=DATA, batch_size=2, batching="without_replacement",
        num_chains=num_chains, seed=seed, distributed=True, on_blowup="ignore",
    )  # fmt: skip
    return chain.samples


def mala_law(rank, world_size, num_chains, num_steps, seed):
    """Full-batch MALA (one block) on the exact-law linear regression: its stationary law is
    the posterior itself (Metropolis-adjusted)."""
    from samplers.test_statistical import DATA, linear_module_energy

    energy = linear_module_energy()
    sampler = MetropolisWithinGibbs(fully_joint(2), 0.05, mala=True, scaling="N/n")
    chain = structmc.sample(
        energy, torch.zeros(num_chains, 2, dtype=DTYPE), sampler, num_steps, data=DATA, num_chains=num_chains,
        seed=seed, distributed=True,
    )  # fmt: skip
    return chain.samples


def folder_run(
    rank, world_size, out_dir, num_steps, resume=False, kill_at=None, die_rank=None, die_at=None, hang_rank=None,
    hang_at=None,
):  # fmt: skip
    """A run with a run folder; ``kill_at``: SIGKILL the whole job (every rank) at that
    iteration; ``die_rank``/``die_at``: that rank alone exits at once (a crashed rank);
    ``hang_rank``/``hang_at``: that rank stops answering (sleeps)."""
    import signal
    import time

    def callback(t, state):
        if kill_at is not None and t == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if die_rank == rank and t == die_at:
            os._exit(3)
        if hang_rank == rank and t == hang_at:
            time.sleep(600)

    chain = run_configuration(
        "sgld", num_steps, out_dir=out_dir, checkpoint_every=5, resume=resume, callback=callback, progress=False
    )
    return chain.samples


def drifting(rank, world_size, at):
    """Rank 1 changes its own positions at iteration ``at``: the checksum must catch it."""

    def callback(t, state):
        if rank == 1 and t == at:
            state.theta.add_(1e-9)

    return run_configuration("sgld", 40, callback=callback, check_every=8).samples


def different_start(rank, world_size):
    """Each rank builds its module from another seed: refused before any compute."""
    x, y = classification_data()
    return structmc.sample(
        mlp_energy(seed=rank), None, structmc.SGLD(1e-3), 5, data=(x, y), batch_size=4, distributed=True
    )


def refused(rank, world_size, what):
    x, y = classification_data()
    if what == "gibbs":
        from structmc.partitions import by_layer

        energy = mlp_energy()
        sampler = MetropolisWithinGibbs(by_layer(energy.space), 0.1)
        return structmc.sample(energy, None, sampler, 5, data=(x, y), batch_size=4, distributed=True)
    if what == "unscaled":
        sampler = MetropolisWithinGibbs(fully_joint(mlp_energy().space.dim), 1e-4, mala=True)  # scaling="none"
        return structmc.sample(mlp_energy(), None, sampler, 5, data=(x, y), distributed=True)
    if what == "batch-too-small":
        return structmc.sample(mlp_energy(), None, structmc.SGLD(1e-3), 5, data=(x, y), batch_size=1, distributed=True)
    raise ValueError(what)


def dataset_runs(rank, world_size, names, num_steps):
    """Every :data:`DATASET_RUNS` run on the Dataset and on its tensors, over the process group."""
    return {
        name: {"dataset": dataset_run(name, num_steps), "tensors": dataset_run(name, num_steps, data="tensors")}
        for name in names
    }


def dataset_folder_run(rank, world_size, name, out_dir, first_steps, num_steps):
    """``DATASET_RUNS[name]`` with a run folder: ``first_steps``, then extended to ``num_steps``
    by a resume (rank 0 reads the checkpoint, the stream's epoch order included)."""
    dataset_run(name, first_steps, out_dir=out_dir, checkpoint_every=5, progress=False)
    return dataset_run(name, num_steps, out_dir=out_dir, checkpoint_every=5, progress=False, resume=True)["samples"]


def refused_dataset(rank, world_size, what):
    if what == "dataset shorter than the world":  # one item for two ranks: the full batch is one row
        return structmc.sample(mlp_energy(), None, structmc.SGLD(1e-3), 5, data=RecordingItems(1), distributed=True)
    if what == "dataset transform":
        source = structmc.DataSource(RecordingItems(), transform=lambda batch, generator: batch)
        return structmc.sample(mlp_energy(), None, structmc.SGLD(1e-3), 5, data=source, batch_size=4, distributed=True)
    if what == "dataset control variate":
        centre = mlp_energy().initial_position().detach()
        return structmc.sample(
            mlp_energy(), None, structmc.SGLD(1e-3), 5, data=RecordingItems(), batch_size=4, distributed=True,
            gradient=structmc.ControlVariate(centre),
        )  # fmt: skip
    if what == "other dataset":  # rank 1's Dataset has other items
        ds = RecordingItems()
        if rank == 1:
            ds.x = ds.x + 1
        return structmc.sample(mlp_energy(), None, structmc.SGLD(1e-3), 5, data=ds, batch_size=4, distributed=True)
    raise ValueError(what)


def many(rank, world_size, jobs):
    """Several tasks in one job (one spawn, one process-group set-up): ``{key: (task, args)}`` ->
    ``{key: {"ok": result} or {"type", "message"}}``. Each task fails the same way on every rank,
    so the group stays in step."""
    out = {}
    for key, (task, args) in jobs.items():
        try:
            out[key] = {"ok": TASKS[task](rank, world_size, **args)}
        except Exception as err:  # noqa: BLE001  (the parent asserts on it)
            out[key] = {"type": type(err).__name__, "message": str(err), "trace": traceback.format_exc()}
    return out


TASKS = {
    "many": many,
    "every_family": every_family,
    "gaussian_law": gaussian_law,
    "mala_law": mala_law,
    "folder_run": folder_run,
    "drifting": drifting,
    "different_start": different_start,
    "refused": refused,
    "dataset_runs": dataset_runs,
    "dataset_folder_run": dataset_folder_run,
    "refused_dataset": refused_dataset,
}
