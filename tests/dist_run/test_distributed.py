"""One chain over several processes (torch.distributed, gloo, 2 ranks spawned here): the 2-rank
chain equals the 1-process chain with the same global batch for every sampler family, an exact
discretised law, resume after kill -9 of the whole job, a dead rank and drifting ranks end the
run with a clear error, and what cannot run data-parallel is refused before any compute."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import structmc
from structmc.distributed import share_bounds

from . import workers

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="this PyTorch build has no torch.distributed")


def spawn(tmp_path, task: str, world_size: int = 2, timeout_s: float = 20.0, join_s: float = 120.0, hung_ok=(), **args):
    """Run ``task`` on ``world_size`` gloo ranks; return each rank's saved result (a dict with
    ``ok`` or ``error``; ``None`` for a rank that saved nothing, e.g. killed)."""
    out = tmp_path / f"ranks-{task}-{time.monotonic_ns()}"
    out.mkdir()
    init_file = out / "init"
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(
            target=workers.launch, args=(r, world_size, str(init_file), task, args, str(out), timeout_s), daemon=True
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + join_s
    for r, p in enumerate(procs):  # the ranks that must end first; a rank allowed to hang is then killed
        p.join(max(1.0, deadline - time.monotonic()) if r not in hung_ok else 0.1)
    hung = [r for r, p in enumerate(procs) if p.is_alive() and r not in hung_ok]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert not hung, f"ranks {hung} still running after {join_s} s: a hang, not a clear error"
    results = []
    for r in range(world_size):
        f = out / f"rank{r}.pt"
        res = torch.load(f, weights_only=False) if f.exists() else None
        if res is not None:
            res["saved_at"] = f.stat().st_mtime  # when the rank ended (a hung one is killed later)
        results.append(res)
    return results, [p.exitcode for p in procs]


def ok(results):
    for r, res in enumerate(results):
        assert res is not None and "ok" in res, f"rank {r}: {res and res.get('trace')}"
    return [res["ok"] for res in results]


FAMILIES = list(workers.configurations())
STEPS = 25
LAW = {"chains": 400, "draws": 1500, "seed": 7}


DATASET_RUNS = list(workers.DATASET_RUNS)
DATASET_STEPS = 25
DATASET_REFUSALS = {
    "dataset shorter than the world": "the global batch (1 rows) is smaller than the world size (2)",
    "dataset transform": "per-batch transform",
    "dataset control variate": "a control variate needs the full-data gradient",
    "other dataset": "rank 1's data differ from rank 0's",
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """One 2-rank job running most of the checks below (a spawn costs seconds)."""
    from samplers.test_statistical import BATCH, MODEL, burn_in_for
    from support.exact import sgld_recursion

    tmp = tmp_path_factory.mktemp("suite")
    burn = burn_in_for(sgld_recursion(MODEL, 0.1, BATCH))
    jobs = {
        "families": ("every_family", {"names": FAMILIES, "num_steps": STEPS}),
        "law": ("gaussian_law", {"num_chains": LAW["chains"], "num_steps": burn + LAW["draws"], "seed": LAW["seed"]}),
        "mala law": ("mala_law", {"num_chains": 400, "num_steps": 600, "seed": 8}),
        "drifting": ("drifting", {"at": 11}),
        "different start": ("different_start", {}),
        "gibbs": ("refused", {"what": "gibbs"}),
        "batch too small": ("refused", {"what": "batch-too-small"}),
        "unscaled": ("refused", {"what": "unscaled"}),
        "full run": ("folder_run", {"out_dir": str(tmp / "full"), "num_steps": 30}),
        "dataset runs": ("dataset_runs", {"names": DATASET_RUNS, "num_steps": DATASET_STEPS}),
        "dataset folder": (
            "dataset_folder_run",
            {"name": DATASET_RUNS[0], "out_dir": str(tmp / "dataset"), "first_steps": 12, "num_steps": DATASET_STEPS},
        ),
        **{what: ("refused_dataset", {"what": what}) for what in DATASET_REFUSALS},
    }
    results = ok(spawn(tmp, "many", jobs=jobs)[0])
    return {"ranks": results, "burn_in": burn, "tmp": tmp}


def test_two_ranks_give_the_one_process_chain_for_every_sampler_family(suite):
    results = [r["families"]["ok"] for r in suite["ranks"]]
    for name in FAMILIES:
        reference = workers.run_configuration(name, STEPS, distributed=None)
        single = reference.samples
        for r, res in enumerate(results):
            got = res[name]
            assert got.shape == single.shape, name
            # the recorded energies too: every iteration's, not the last reduction's buffer
            torch.testing.assert_close(res[name + "/energy"], reference.info["energy"], rtol=1e-9, atol=1e-9)
            # the same chain to float rounding (the global sum is split differently); a rank that
            # used only its share, or unsynchronised noise, is far outside it (next test)
            torch.testing.assert_close(got, single, rtol=1e-9, atol=1e-11, msg=f"{name}, rank {r}")
        torch.testing.assert_close(results[0][name], results[1][name], rtol=0, atol=0)  # identical on every rank
        assert not torch.equal(single[:, 0], single[:, -1]), f"{name}: the chain did not move"


def test_the_comparison_can_fail():
    """A one-process chain with half the batch, or another seed, is far outside the tolerance
    above: the equality test detects a rank that used only its share, or unsynchronised noise."""
    single = workers.run_configuration("sgld", STEPS, distributed=None).samples
    _, make_sampler, options = workers.configurations()["sgld"]
    half = structmc.sample(workers.mlp_energy(), None, make_sampler(), STEPS, **{**options, "batch_size": 5}).samples
    other_seed = structmc.sample(workers.mlp_energy(), None, make_sampler(), STEPS, **{**options, "seed": 4}).samples
    for wrong in (half, other_seed):
        assert (wrong - single).abs().max() > 1e-4


def test_two_ranks_sample_the_exact_discretised_law(suite):
    """SGLD (lr 0.1, batch 2 of N = 8, one row per rank) on the linear regression whose
    stationary law, minibatch noise included, is known exactly (tests/samplers/test_statistical.py)."""
    from samplers.test_statistical import BATCH, MODEL, POST_COV, POST_MEAN, chain_estimates
    from support.exact import sgld_recursion

    R = sgld_recursion(MODEL, 0.1, BATCH)
    mu, cov = R.moments()
    samples = suite["ranks"][0]["law"]["ok"]
    assert samples.shape == (LAW["chains"], suite["burn_in"] + LAW["draws"], 2)
    s = samples[:, suite["burn_in"] :].numpy()
    m, m_se, second, s_se = chain_estimates(s, mu)
    iu = np.triu_indices(2)
    assert np.abs((m - mu) / m_se).max() < 4.5, (m, mu)
    assert np.abs(((second - cov) / s_se)[iu]).max() < 4.5, (second, cov)
    # the test can fail: the law without minibatch noise (what a rank using the full data, or a
    # double-counted batch, would give) and the target posterior are far away
    for alt_mu, alt_cov in (R.without_batch_noise().moments(), (POST_MEAN, POST_COV)):
        alt_second = alt_cov + np.outer(alt_mu - mu, alt_mu - mu)
        assert np.abs(((second - alt_second) / s_se)[iu]).max() > 10


def test_two_ranks_full_batch_mala_keeps_the_posterior(suite):
    """The one-block MALA step (a Metropolis-adjusted full-data step) over 2 ranks: every
    evaluation reduced, the accept decision the same on both; its stationary law is the
    posterior itself (Metropolis invariance), within 4.5 SE, and the same law at half the
    temperature (what a doubled likelihood from a wrong reduction would give) is far."""
    from samplers.test_statistical import POST_COV, POST_MEAN, chain_estimates

    samples = suite["ranks"][0]["mala law"]["ok"]
    torch.testing.assert_close(samples, suite["ranks"][1]["mala law"]["ok"], rtol=0, atol=0)
    s = samples[:, 100:].numpy()
    m, m_se, second, s_se = chain_estimates(s, POST_MEAN)
    iu = np.triu_indices(2)
    assert np.abs((m - POST_MEAN) / m_se).max() < 4.5, (m, POST_MEAN)
    assert np.abs(((second - POST_COV) / s_se)[iu]).max() < 4.5, (second, POST_COV)
    assert np.abs(((second - POST_COV / 2) / s_se)[iu]).max() > 10


def test_ranks_that_drift_apart_are_caught_naming_the_iteration(suite):
    for ranks in suite["ranks"]:
        res = ranks["drifting"]
        assert res.get("type") == "DistributedError" and "after iteration 16" in res["message"], res


def test_ranks_with_different_starts_are_refused_before_any_compute(suite):
    for ranks in suite["ranks"]:
        res = ranks["different start"]
        assert res.get("type") == "ValueError" and "initial positions" in res["message"], res


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("gibbs", "stays single-process"),
        ("batch too small", "smaller than the world size"),
        ("unscaled", "scaling='N/n'"),
    ],
)
def test_what_cannot_run_data_parallel_is_refused(suite, what, message):
    for ranks in suite["ranks"]:
        res = ranks[what]
        assert res.get("type") == "ValueError" and message in res["message"], res


@pytest.fixture(scope="module")
def interrupted(suite):
    """Two jobs stopped mid-run (kill -9 of every rank at iteration 17; rank 1 alone exiting at
    12) and one job resuming both."""
    tmp = suite["tmp"]
    killed = spawn(tmp, "folder_run", out_dir=str(tmp / "killed"), num_steps=30, kill_at=17)
    t0 = time.monotonic()
    died = spawn(tmp, "folder_run", out_dir=str(tmp / "died"), num_steps=400, die_rank=1, die_at=12, timeout_s=15)
    died_seconds = time.monotonic() - t0
    t0 = time.time()  # rank 1 stops answering at iteration 12: the process group's timeout (6 s) ends it
    hung = spawn(
        tmp, "folder_run", out_dir=str(tmp / "hung"), num_steps=400, hang_rank=1, hang_at=12, timeout_s=6,
        join_s=60, hung_ok=(1,),
    )  # fmt: skip
    hung_seconds = hung[0][0]["saved_at"] - t0 if hung[0][0] is not None else float("inf")
    jobs = {k: ("folder_run", {"out_dir": str(tmp / k), "num_steps": 30, "resume": True}) for k in ("killed", "died")}
    resumed = ok(spawn(tmp, "many", jobs=jobs)[0])
    return {
        "killed": killed, "died": died, "died_seconds": died_seconds, "hung": hung, "hung_seconds": hung_seconds,
        "resumed": resumed,
    }  # fmt: skip


def test_resume_after_kill_9_of_the_whole_job_gives_the_uninterrupted_chain(suite, interrupted):
    results, codes = interrupted["killed"]
    assert results == [None, None] and codes[0] == -9, codes  # rank 0 killed; rank 1 killed or failed
    full = [r["full run"]["ok"] for r in suite["ranks"]]
    for r, res in enumerate(interrupted["resumed"]):
        # every rank returns rank 0's chain, the uninterrupted one
        torch.testing.assert_close(res["killed"]["ok"], full[0], rtol=0, atol=0, msg=f"rank {r}")
    folder = suite["tmp"] / "killed"
    assert structmc.load_chain(folder).samples.shape == full[0].shape
    assert not any("rank" in p.name for p in folder.rglob("*"))  # only rank 0 wrote


def test_a_rank_that_dies_ends_the_run_with_a_clear_error(suite, interrupted):
    results, codes = interrupted["died"]
    assert codes[1] == 3 and results[1] is None
    err = results[0]
    assert err is not None and err.get("type") == "DistributedError", err
    assert "rank 0 of 2" in err["message"] and "iteration 13" in err["message"] and "resume=True" in err["message"]
    assert interrupted["died_seconds"] < 60
    # the checkpoint written before is valid: the job resumes and ends with the uninterrupted chain
    full = suite["ranks"][0]["full run"]["ok"]
    torch.testing.assert_close(interrupted["resumed"][0]["died"]["ok"], full, rtol=0, atol=0)


def test_resume_with_another_world_size_is_refused(suite, tmp_path):
    """A 2-rank folder resumed by one process, with and without a (1-rank) process group."""
    folder = suite["tmp"] / "full"
    _, make_sampler, options = workers.configurations()["sgld"]
    with pytest.raises(ValueError, match="world size") as err:
        structmc.sample(workers.mlp_energy(), None, make_sampler(), 40, **options, out_dir=folder, resume=True)
    assert "--nproc-per-node 2" in str(err.value)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="world size"):
            structmc.sample(
                workers.mlp_energy(), None, make_sampler(), 40, **options, out_dir=folder, resume=True,
                distributed=True,
            )  # fmt: skip
    finally:
        dist.destroy_process_group()


def test_distributed_without_a_process_group_is_refused():
    x, y = workers.classification_data()
    with pytest.raises(ValueError, match="initialised torch.distributed process group"):
        structmc.sample(workers.mlp_energy(), None, structmc.SGLD(1e-3), 5, data=(x, y), batch_size=4, distributed=True)
    with pytest.raises(TypeError, match="distributed must be"):
        structmc.sample(workers.mlp_energy(), None, structmc.SGLD(1e-3), 5, data=(x, y), distributed="yes")
    with pytest.raises(ValueError, match="bucket_mb"):
        structmc.distributed.Distributed(bucket_mb=0)


def test_the_benchmark_runs_and_splits_out_the_communication(tmp_path):
    """bench/bench_distributed.py in a tiny setting: a one-process row and a 2-rank row, the
    all-reduce timed on its own."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "bench" / "bench_distributed.py"
    out = tmp_path / "rows.json"
    cmd = [sys.executable, str(bench), "--model", "mlp-small", "--world-sizes", "2", "--steps", "2", "--rounds", "1"]
    cmd += ["--warmup", "1", "--num-data", "500", "--batch", "50", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"one process", "2 ranks"}
    two = rows["2 ranks"]
    assert 0 < two["comm_per_step"] < two["seconds_per_step"] and two["allreduce_alone"] > 0
    assert rows["one process"]["comm_per_step"] == 0
    assert "| 2 ranks |" in done.stdout


def test_a_rank_that_hangs_ends_the_run_within_the_timeout(interrupted):
    results, _ = interrupted["hung"]
    err = results[0]
    assert err is not None and err.get("type") == "DistributedError", err
    assert "rank 0 of 2" in err["message"] and "iteration 13" in err["message"]
    assert interrupted["hung_seconds"] < 25  # the 6 s timeout (plus start-up), not the hung rank's 600 s


def test_the_command_line_under_torchrun_gives_the_one_process_chain(tmp_path):
    """`torchrun --nproc-per-node 2 --no-python structmc sample ... --distributed`: rank 0 writes
    the run folder and the report; the draws are the one-process command's to float32 rounding."""
    import os
    import shutil
    import subprocess
    import sys

    exe = shutil.which("structmc") or os.path.join(os.path.dirname(sys.executable), "structmc")
    args = ["sample", "--dataset", "digits", "--model", "mlp", "--hidden", "20", "--sampler", "sgld"]
    args += ["--lr", "1e-5", "--steps", "60", "--burn-in", "30", "--chains", "2", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--no-python", exe]
    done = subprocess.run(
        [*cmd, *args, "--out", str(tmp_path / "two"), "--distributed"], capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    one = subprocess.run([exe, *args, "--out", str(tmp_path / "one")], capture_output=True, text=True, env=env)
    assert one.returncode == 0, one.stderr[-3000:]
    a, b = structmc.load_chain(tmp_path / "two" / "run"), structmc.load_chain(tmp_path / "one" / "run")
    torch.testing.assert_close(a.samples, b.samples, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "two" / "report.json").exists() and done.stdout.count("wrote ") == 1  # rank 0 alone


def test_the_command_line_refuses_distributed_outside_torchrun_and_with_an_executor(tmp_path, monkeypatch, capsys):
    from structmc.cli import main

    monkeypatch.delenv("RANK", raising=False)
    base = ["sample", "--dataset", "digits", "--model", "mlp", "--hidden", "4", "--steps", "5", "--burn-in", "1"]
    base += ["--thin", "1", "--out", str(tmp_path)]
    for extra, phrase in (
        (["--distributed"], "under torchrun"),
        (["--distributed", "--executor", "process"], "choose one"),
    ):
        with pytest.raises(SystemExit) as err:
            main([*base, *extra])
        assert err.value.code == 2 and phrase in capsys.readouterr().err
    out = tmp_path.glob("**/run.json")
    assert not list(out)  # refused before any compute


# -- a map-style Dataset: every rank reads only its share -------------------------------------
PROBE = 8  # the first items the set-up checks read (the energy's checks; the ranks' comparison)


@pytest.fixture(scope="module")
def dataset_one_process():
    return {name: workers.dataset_run(name, DATASET_STEPS, distributed=None) for name in DATASET_RUNS}


@pytest.mark.parametrize("name", DATASET_RUNS)
def test_two_ranks_on_a_dataset_give_the_one_process_chain(suite, dataset_one_process, name):
    """The 2-rank chain reading a Dataset is the one-process chain on the same Dataset, to the
    tolerance of the tensor path above, and the 2-rank chain on its tensors bit for bit."""
    reference = dataset_one_process[name]
    runs = [ranks["dataset runs"]["ok"][name] for ranks in suite["ranks"]]
    for r, got in enumerate(runs):
        torch.testing.assert_close(got["dataset"]["samples"], reference["samples"], rtol=1e-9, atol=1e-11)
        torch.testing.assert_close(got["dataset"]["energy"], reference["energy"], rtol=1e-9, atol=1e-9)
        assert torch.equal(got["dataset"]["samples"], got["tensors"]["samples"]), f"rank {r}"
    assert torch.equal(runs[0]["dataset"]["samples"], runs[1]["dataset"]["samples"])
    assert not torch.equal(reference["samples"][:, 0], reference["samples"][:, -1]), "the chain did not move"


def test_a_dataset_run_with_a_folder_resumes_to_the_uninterrupted_chain(suite, dataset_one_process):
    """12 iterations written by rank 0, then extended to 25 by a resume: every rank returns the
    one-process chain on the Dataset (the epoch order and the prefetch restart from the checkpoint)."""
    reference = dataset_one_process[DATASET_RUNS[0]]["samples"]
    for r, ranks in enumerate(suite["ranks"]):
        torch.testing.assert_close(ranks["dataset folder"]["ok"], reference, rtol=1e-9, atol=1e-11, msg=f"rank {r}")
    assert structmc.load_chain(suite["tmp"] / "dataset").samples.shape == reference.shape


def _batches(reads: list[list[int]], size: int, skip: int) -> list[list[int]]:
    """The items read after the first ``skip``, cut into batches of ``size`` (a Dataset without
    ``__getitems__`` is read one item per call)."""
    flat = [i for read in reads for i in read][skip:]
    assert len(flat) % size == 0, (len(flat), size)
    return [flat[k : k + size] for k in range(0, len(flat), size)]


@pytest.mark.parametrize("name", DATASET_RUNS)
def test_each_rank_reads_only_its_share_of_every_batch(suite, dataset_one_process, name):
    """Set-up reads the first items (the checks: once in one process, twice on a rank, which
    also compares them with rank 0's) and, for a full batch, the rank's share of the items,
    nothing else; then each batch is read as this rank's share of the one-process run's global
    batch (C·b_r items), in the same order, in one call where the Dataset has ``__getitems__``.
    Per step the ranks' reads side by side are the global batch: their union is the batch and
    no item of it is read by two ranks."""
    ds_options, options = workers.DATASET_RUNS[name]
    C = options.get("num_chains", 1)
    N = len(workers.RecordingItems())
    full = options["batch_size"] is None
    B = N if full else options["batch_size"]
    reference = dataset_one_process[name]["fetched"]
    if full:  # the one-process run reads the whole Dataset once
        assert [i for read in reference for i in read] == [*range(PROBE), *range(N)]
        global_batches = [list(range(N))]
    else:
        assert [i for read in reference for i in read][:PROBE] == list(range(PROBE))
        global_batches = _batches(reference, C * B, PROBE)
        assert len(global_batches) >= DATASET_STEPS
    per_rank = []
    for r, ranks in enumerate(suite["ranks"]):
        reads = ranks["dataset runs"]["ok"][name]["dataset"]["fetched"]
        lo, hi = share_bounds(B, 2, r)
        rows = 1 if full else C
        mine = [torch.tensor(g).view(rows, B)[:, lo:hi].reshape(-1).tolist() for g in global_batches]
        flat = [i for read in reads for i in read]
        if full:  # probe, its share of the items (the stream), probe (the ranks' comparison)
            assert flat == [*range(PROBE), *mine[0], *range(PROBE)], f"rank {r}"
            assert hi - lo < N
            continue
        assert flat[: 2 * PROBE] == [*range(PROBE)] * 2, f"rank {r}"
        got = _batches(reads, C * (hi - lo), 2 * PROBE)
        assert got == mine, f"rank {r}: not exactly its share of each global batch"
        if ds_options.get("batched"):  # one __getitems__ call per batch, each of this rank's C·b_r items
            assert [len(read) for read in reads[2:]] == [C * (hi - lo)] * len(got), f"rank {r}"
        per_rank.append(got)
    for k, g in enumerate(global_batches if not full else []):
        side_by_side = torch.cat([torch.tensor(p[k]).view(C, -1) for p in per_rank], 1)
        assert torch.equal(side_by_side, torch.tensor(g).view(C, B)), f"batch {k}"


@pytest.mark.parametrize("what", list(DATASET_REFUSALS))
def test_what_cannot_run_on_a_dataset_is_refused_before_any_compute(suite, what):
    for ranks in suite["ranks"]:
        got = ranks[what]
        assert got.get("type") == "ValueError" and DATASET_REFUSALS[what] in got["message"], got
