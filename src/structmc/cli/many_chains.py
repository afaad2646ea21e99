"""``structmc sample --executor``: the ``--chains`` as independent tasks of
:func:`structmc.executors.run_chains` (a process pool, a Dask or a Ray cluster), merged into
one run folder that ``structmc diagnose`` and the report read as a batched run's.

Chain ``i`` is ``structmc.sample(..., num_chains=1, seed=chain_seeds(seed, N)[i])`` (its own
random stream, so not the chain ``i`` of the batched run without ``--executor``), the same
whatever the executor and however many workers. Layout of ``--out OUT``::

    OUT/chains/chains.json  the chains' number, --seed and seeds (written before any chain starts)
    OUT/chains/chain_I/     chain I's run folder: its draws, and a checkpoint every
                            --checkpoint-every of its own iterations (and at its end)
    OUT/run/                the N chains merged (samples [N, D, P]; energy [N, S], and the time
                            records per chain): a run folder without a checkpoint, whose config
                            says ``merged_from``; written again from the chains by every run

``--resume`` resumes every chain from its own checkpoint (a chain not started yet starts; a
finished one is read back), with any executor (they give the same chains), then merges them
again; it needs the same ``--chains`` and ``--seed``. ``--overwrite`` removes OUT/chains and
OUT/run first. Chains of a Dask or Ray cluster write their folders from the workers, so
``--out`` must be on a file system the workers share.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from .common import UsageError

CHAINS = "chains"  # OUT/chains: one run folder per chain
RECORD = "chains.json"  # OUT/chains/chains.json: what the chains are
#: draws per sample chunk of the merged folder (sample()'s default chunk_draws)
MERGED_CHUNK_DRAWS = 1000
EXECUTORS = "process, dask, ray, tcp://host:port (a running Dask scheduler) or ray://host:port (a Ray cluster)"


def parallel_executor(s: dict) -> str | None:
    """``--executor`` when the chains run as tasks; ``None`` for the one batched run (no
    ``--executor``, or ``serial``)."""
    spec = s["executor"]
    return None if spec in (None, "serial") else spec


def check_executor(s: dict, explicit: dict) -> None:
    """``--executor`` / ``--workers`` (or their config keys), refused before any compute when
    unknown, malformed, needing a package that is not installed, or contradicting each other."""
    spec, workers = s["executor"], s["workers"]
    where = explicit.get("executor", "--executor")
    if spec in (None, "serial"):
        if workers is not None:
            raise UsageError(
                f"{explicit['workers']} sets the workers of --executor process, dask or ray (a new local "
                f"pool or cluster); without --executor the chains run batched in this process: drop it, "
                f"or pass --executor"
            )
        return
    if spec in ("process", "processes"):
        return
    if spec == "dask" or spec.startswith(("tcp://", "dask://")):
        module, pip, extra = "distributed", "dask[distributed]", "dask"
    elif spec == "ray" or spec.startswith("ray://"):
        module, pip, extra = "ray", "ray", "ray"
    else:
        raise UsageError(f"{where}: unknown executor {spec!r}; choose serial (the default), {EXECUTORS}")
    if "://" in spec:
        try:
            parts = urlsplit(spec)
            port = parts.port
        except ValueError:
            parts, port = None, None
        needs_port = not spec.startswith("ray://")  # Ray's client port has a default (10001)
        if parts is None or not parts.hostname or (needs_port and port is None) or parts.path not in ("", "/"):
            form = "ray://host[:port]" if spec.startswith("ray://") else "tcp://host:port"
            raise UsageError(
                f"{where} {spec!r} is not a cluster address: expected {form} (the address the "
                f"scheduler or head node prints when it starts)"
            )
        if workers is not None:
            raise UsageError(
                f"{explicit['workers']} is not used with the running cluster {spec}: its workers run "
                f"the chains; drop it (it sizes a new local pool: --executor process, dask or ray)"
            )
    if _missing(module):
        raise UsageError(f'{where} {spec} needs {pip}, which is not installed: pip install "structmc[{extra}]"')


def _missing(module: str) -> bool:
    """``module`` cannot be imported (found without importing it: Ray takes seconds)."""
    if module in sys.modules:
        return sys.modules[module] is None
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def read_record(chains_dir: Path) -> dict | None:
    """``OUT/chains/chains.json``, or ``None`` when there is none."""
    path = chains_dir / RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        int(record["num_chains"]), int(record["seed"])
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise UsageError(f"{path} is unreadable ({err}): pass --overwrite to start the chains again") from err
    return record


def _holds(path: Path) -> bool:
    return path.is_dir() and any(p.name != ".structmc.lock" for p in path.iterdir())


def _is_merged(run_dir: Path) -> bool:
    """``run_dir`` holds a folder merged from independent chains (written by :func:`write_merged`)."""
    try:
        return "merged_from" in json.loads((run_dir / "run.json").read_text()).get("config", {})
    except (OSError, ValueError, AttributeError):
        return False


def check_out(out: Path, s: dict, *, resume: bool, overwrite: bool) -> None:
    """The ``--out`` folder of a run with ``--executor``, before any compute: a new run needs it
    free (or ``--overwrite``); ``--resume`` needs the chains of a run with ``--executor`` there,
    as many as ``--chains`` and of the same ``--seed``."""
    from ..storage import RunFolder

    run_dir, chains_dir = out / "run", out / CHAINS
    record = read_record(chains_dir)
    batched = record is None and _holds(run_dir) and not _is_merged(run_dir)
    if resume:
        if record is None:
            if batched and RunFolder(run_dir).checkpoint_file() is not None:
                raise UsageError(
                    f"--resume: {run_dir} holds a batched run (made without --executor): resume it without "
                    f"--executor; with --executor the chains are others (each has its seed from chain_seeds), "
                    f"run in {chains_dir}"
                )
            raise UsageError(
                f"--resume: nothing to resume in {out} (no {chains_dir / RECORD}: no run with --executor "
                f"started there); pass the --out folder of the run to continue, or drop --resume"
            )
        n, seed = int(record["num_chains"]), int(record["seed"])
        if n != s["num_chains"]:
            raise UsageError(
                f"--resume: the run in {out} has {n} chains (in {chains_dir}), but --chains is "
                f"{s['num_chains']}: pass --chains {n} to continue it (more chains: a new run in another "
                f"--out, or --overwrite to start again)"
            )
        if seed != s["seed"]:
            raise UsageError(
                f"--resume: the chains in {chains_dir} were started with --seed {seed}, not {s['seed']}: "
                f"pass --seed {seed} to continue them"
            )
        if _holds(run_dir) and not _is_merged(run_dir):
            raise UsageError(
                f"--resume: {run_dir} holds something other than the chains of {chains_dir} merged: move "
                f"it away, or pass --overwrite"
            )
        return
    if overwrite:
        foreign = sorted(
            p.name
            for p in (chains_dir.iterdir() if chains_dir.is_dir() else ())
            if not (p.name == RECORD or (p.is_dir() and p.name.startswith("chain_") and p.name[6:].isdigit()))
        )
        if foreign:
            raise UsageError(
                f"--overwrite refuses to clear {chains_dir}: it holds {foreign[:5]}, which are not chains "
                f"of structmc; move them away, or pass another --out"
            )
        return
    if record is not None or _holds(chains_dir) or _holds(run_dir):
        what = (
            f"the chains in {chains_dir}"
            if record is not None or _holds(chains_dir)
            else f"a batched run in {run_dir}"
            if batched
            else f"the files of {run_dir}"
        )
        raise UsageError(
            f"--out {out} holds a previous run ({what}): pass --resume to continue it, --overwrite to "
            f"replace it, or another --out"
        )


def check_batched_out(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Without ``--executor``: ``--out`` may not hold the chains of a run with ``--executor``
    (unless ``--overwrite``, which removes them with the run: :func:`clear_chains`)."""
    record = read_record(out / CHAINS)
    if record is None or overwrite:
        return
    n = int(record["num_chains"])
    raise UsageError(
        f"--out {out} holds {n} independent chains run with --executor (in {out / CHAINS}, merged into "
        f"{out / 'run'}): "
        + (
            "pass --executor (process, dask, ...; each gives the same chains) to resume them"
            if resume
            else "pass --resume --executor ... to continue them, --overwrite to replace them"
        )
        + ", or another --out"
    )


def clear_chains(out: Path) -> None:
    """Remove ``OUT/chains`` (each chain's run folder, cleared under its lock) and the record."""
    chains_dir = out / CHAINS
    if not chains_dir.is_dir():
        return
    (chains_dir / RECORD).unlink(missing_ok=True)  # first: a clear cut short is no run to resume
    for d in sorted(chains_dir.glob("chain_*")):
        if d.is_dir():
            _clear_folder(d)
            d.rmdir()
    chains_dir.rmdir()


def _clear_folder(path: Path) -> None:
    """Remove a run folder's files under its lock (a running writer gets RunFolderBusy)."""
    from ..storage import RunFolder

    folder = RunFolder(path)
    folder.lock()
    try:
        folder.clear()
    finally:
        folder.unlock()


def run(
    energy,
    init,
    sampler,
    s: dict,
    *,
    out: Path,
    data,
    batch_size,
    gradient,
    resume: bool,
    overwrite: bool,
    quiet: bool,
    execution: str | None = None,
):
    """Run the ``--chains`` on ``--executor`` (:func:`structmc.executors.run_chains`, chain ``i``
    in ``OUT/chains/chain_i``) and write them merged to ``OUT/run``; return the merged chain."""
    from ..executors import as_executor, chain_seeds, run_chains
    from ..storage.atomic import _atomic_write_bytes

    spec, n, seed = s["executor"], s["num_chains"], s["seed"]
    chains_dir, run_dir = out / CHAINS, out / "run"
    if overwrite:
        clear_chains(out)
        _clear_folder(run_dir)
    seeds = chain_seeds(seed, n)
    if read_record(chains_dir) is None:
        chains_dir.mkdir(parents=True, exist_ok=True)
        record = {"num_chains": n, "seed": seed, "chain_seeds": seeds}
        _atomic_write_bytes(json.dumps(record, indent=2).encode(), chains_dir / RECORD)
    workers = s["workers"]
    if workers is None and "://" not in spec:  # a new local pool: one worker per chain, at most one per CPU
        workers = min(n, os.cpu_count() or 1)
    try:
        engine = as_executor(spec, workers=workers)  # one torch thread per task (the adapters' default)
    except OSError as err:  # a cluster that does not answer
        raise UsageError(f"--executor {spec}: cannot connect ({err}); is the scheduler running there?") from err
    with engine:
        if not quiet:
            print(
                f"structmc: {n} chains on {spec} ({engine.slots} at a time, one torch thread each); "
                f"chain I in {chains_dir}/chain_I",
                file=sys.stderr,
            )
        chain = run_chains(
            energy,
            init,
            sampler,
            s["num_steps"],
            num_chains=n,
            executor=engine,
            seed=seed,
            data=data,
            batch_size=batch_size,
            burn_in=s["burn_in"],
            thin=s["thin"],
            gradient=gradient,
            out_dir=chains_dir,
            checkpoint_every=s["checkpoint_every"],
            resume=resume,
            execution=execution,
        )
    write_merged(run_dir, chain, chains_dir, seed)
    return chain


def write_merged(run_dir: Path, chain, chains_dir: Path, seed: int) -> None:
    """``run_dir`` as the run folder of the merged ``chain`` (through
    :class:`~structmc.storage.RunFolder`: ``run.json``, the manifest with digests, sample chunks
    of :data:`MERGED_CHUNK_DRAWS` draws and one info chunk; no checkpoint). ``run.json`` is chain
    0's with ``num_chains`` and ``seed`` of the whole run, and ``config`` the merged chain's
    (``chain_seeds``) plus ``merged_from``: the number of chains and their folder."""
    from ..storage import RunFolder

    settings = {k: v for k, v in RunFolder(chains_dir / "chain_0").settings().items() if k != "folder_format"}
    config = dict(chain.config)
    config["merged_from"] = {
        "num_chains": chain.num_chains,
        "chains": os.path.relpath(chains_dir, run_dir),
        "seed": seed,
        "how": "structmc.executors.run_chains",
    }
    settings.update(num_chains=chain.num_chains, seed=seed, config=config)
    folder = RunFolder(run_dir)
    folder.lock()
    try:
        folder.clear()  # the previous merge (or nothing)
        folder.create(settings)
        for k, start in enumerate(range(0, chain.num_draws, MERGED_CHUNK_DRAWS)):
            stop = start + MERGED_CHUNK_DRAWS
            folder.write_chunk(k, chain.samples[:, start:stop], chain.draw_steps[start:stop])
        folder.write_info_chunk(0, chain.info)
    finally:
        folder.unlock()
