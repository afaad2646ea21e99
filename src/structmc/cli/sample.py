"""``structmc sample``: run a sampler on a built-in model / data set and write the report,
the trace plot and the draws."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from . import many_chains as many
from .common import UsageError, _load_dataset, _model_energy, _out_folder
from .settings import _check_lengths, _refuse_unused, _sample_settings, sampler_config


def cmd_sample(args: argparse.Namespace) -> int:
    """``structmc sample``: with ``--threads N`` torch runs on N intra-op threads, restored after."""
    import torch

    threads = getattr(args, "threads", None)
    if threads is None:
        return _cmd_sample(args)
    if isinstance(threads, int) and threads >= 1:  # else the settings refuse it, naming --threads
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return _cmd_sample(args)
        finally:
            torch.set_num_threads(before)
    return _cmd_sample(args)


def _cmd_sample(args: argparse.Namespace) -> int:
    from .. import ControlVariate, find_map, predictive, sample
    from ..diagnostics import classification_metrics, regression_metrics
    from ..run import DivergenceError
    from ..samplers import sampler_from_config

    explicit: dict = {}
    s = _sample_settings(args, explicit)
    if s["gradient"] not in ("minibatch", "cv", "control_variate"):
        raise UsageError(f"unknown gradient {s['gradient']!r}; choose minibatch or cv")
    _refuse_unused(s, explicit)
    _check_lengths(s, explicit)
    many.check_executor(s, explicit)
    if args.resume and args.overwrite:
        raise UsageError("--resume and --overwrite contradict each other: choose one")
    if args.out is not None and not args.out.strip():
        raise UsageError("--out is empty: pass the run folder (or leave --out out for runs/sample-<time>)")
    out = _out_folder(args.out if args.out is not None else f"runs/sample-{time.strftime('%Y%m%d-%H%M%S')}", "run")
    from ..storage import RunFolder

    executor = many.parallel_executor(s)  # None: the chains as one batched run, as before --executor
    rank = _distributed_rank(args, executor)  # 0 without --distributed
    if rank == 0:  # rank 0 checks and writes --out (the others would race it on a shared file system)
        if executor is not None:  # OUT/chains/chain_I, merged into OUT/run
            _out_folder(out, many.CHAINS)
            many.check_out(out, s, resume=args.resume, overwrite=args.overwrite)
        else:
            many.check_batched_out(out, resume=args.resume, overwrite=args.overwrite)
    if rank == 0 and executor is None and args.resume and RunFolder(out / "run").checkpoint_file() is None:
        run_dir = out / "run"
        if _holds_run(run_dir):
            raise UsageError(
                f"--resume: nothing to resume in {run_dir}: the run there stopped before its first "
                f"checkpoint (no checkpoint); pass --overwrite instead of --resume to start it again "
                f"(--checkpoint-every N writes checkpoints sooner)"
            )
        raise UsageError(
            f"--resume: nothing to resume in {out / 'run'} (no checkpoint); "
            + (
                "pass the --out folder of the run to continue"
                if args.out
                else "pass --out with the folder of the run to continue"
            )
            + ", or drop --resume"
        )
    if (
        rank == 0
        and executor is None
        and not args.resume
        and not args.overwrite
        and RunFolder(out / "run").checkpoint_file() is None
        and _holds_run(out / "run")
    ):
        raise UsageError(
            f"--out {out} holds a run that stopped before its first checkpoint (in {out / 'run'}, no "
            f"checkpoint to resume from): pass --overwrite to replace it, or another --out"
        )
    data = _load_dataset(s)
    energy = _model_energy(s, data)
    sampler = sampler_from_config(sampler_config(s))
    train = (data.x_train, data.y_train)
    from ..tuning.arms import batch_rows

    batch_size = batch_rows(s["batch_size"], len(data.x_train))  # a fraction of N -> rows, as structmc tune
    init = energy.initial_position()
    gradient: str | ControlVariate = "minibatch"
    if s["gradient"] in ("cv", "control_variate"):
        init = find_map(energy, init, data=train, batch_size=min(len(data.x_train), 128), num_steps=2000)
        gradient = ControlVariate(init)
    t0 = time.perf_counter()
    try:
        if executor is not None:
            chain = many.run(
                energy,
                init,
                sampler,
                s,
                out=out,
                data=train,
                batch_size=batch_size,
                gradient=gradient,
                resume=args.resume,
                overwrite=args.overwrite,
                quiet=args.quiet,
                execution="compiled" if args.compile else None,
            )
        else:
            if args.overwrite and rank == 0:
                many.clear_chains(out)  # the chains of an earlier run with --executor go with it
            chain = sample(
                energy,
                init,
                sampler,
                s["num_steps"],
                data=train,
                batch_size=batch_size,
                burn_in=s["burn_in"],
                thin=s["thin"],
                seed=s["seed"],
                num_chains=s["num_chains"],
                gradient=gradient,
                out_dir=out / "run",
                checkpoint_every=s["checkpoint_every"],
                resume=args.resume,
                overwrite=args.overwrite,
                progress=None if not args.quiet and rank == 0 else False,
                distributed=args.distributed or None,
                execution="compiled" if args.compile else None,
            )
    except DivergenceError as err:  # the chain went to NaN/Inf (or blew up): one line, exit 2
        raise UsageError(_diverged_message(err, out, executor is not None)) from err
    except ValueError as err:  # sample()'s messages name its keyword arguments: name the flags
        text = _flag_words(str(err))
        if text == str(err):
            raise
        try:
            new = type(err)(text)
        except Exception:  # noqa: BLE001  (an exception class with another signature)
            new = ValueError(text)
        raise new from err
    seconds = time.perf_counter() - t0
    if args.distributed:
        import torch.distributed as dist

        dist.destroy_process_group()
        if rank != 0:  # every rank holds rank 0's chain; rank 0 writes the report
            return 0
    pred = predictive(energy, chain, data.x_test)
    metrics = {"seconds": seconds, "num_draws": chain.num_draws * chain.num_chains}
    if data.task == "regression":
        reg = regression_metrics(pred["mean"].double(), pred["var"].double(), data.y_test.double())
        metrics.update(test_rmse=reg["rmse"] * _y_scale(data), test_nll=reg["nll"])
    else:
        cls = classification_metrics(pred["probs"].double(), data.y_test.long())
        metrics.update({f"test_{k}": v for k, v in cls.items()})
    report = {
        "settings": s,
        "batch_rows": batch_size or len(data.x_train),
        "sampler": sampler.config(),
        "metrics": metrics,
        "run_dir": str(out / "run"),
    }
    if executor is not None:  # OUT/run merged from the chains' own folders
        report.update(executor=executor, chains_dir=str(out / many.CHAINS), chain_seeds=chain.config["chain_seeds"])
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    md = [
        f"# structmc sample: {s['sampler']} on {s['dataset']} ({s['model']})",
        "",
        "| metric | value |",
        "|---|---|",
    ] + [f"| {k} | {v:.4g} |" for k, v in metrics.items()]
    if executor is not None:
        md[1:1] = [
            "",
            f"{chain.num_chains} independent chains (structmc.executors.run_chains on --executor {executor}; "
            f"chain I in {out / many.CHAINS}/chain_I), merged into {out / 'run'}",
        ]
    (out / "report.md").write_text("\n".join(md) + "\n")
    _trace_plot(out / "trace.png", chain)
    print("\n".join(md))
    print(f"\nwrote {out}/report.json, report.md, trace.png and the draws in {out}/run")
    return 0


#: sample()'s keyword arguments in its run-folder messages -> the flags of `structmc sample`
_FLAG_WORDS = (
    ("resume=True", "--resume"),
    ("overwrite=True", "--overwrite"),
    ("out_dir", "--out"),
    ("checkpoint_every", "--checkpoint-every"),
    ("num_steps", "--steps"),
    ("burn_in", "--burn-in"),
    ("num_chains", "--chains"),
    ("batch_size", "--batch-size"),
)


def _flag_words(text: str) -> str:
    """``"... pass resume=True ..., or overwrite=True ..."`` -> ``"... pass --resume ..., or
    --overwrite ..."``: library messages shown by the command line name its flags."""
    import re

    text = re.sub(r"(?<![\w-])out_dir (?=[/.~\w])", "the run folder ", text)  # "out_dir <path>": --out/run
    for word, flag in _FLAG_WORDS:
        text = re.sub(rf"(?<![\w-]){re.escape(word)}(?![\w=])", flag, text)
    return text


def _diverged_message(err, out: Path, independent: bool) -> str:
    """The one line for a run that stopped on NaN/Inf or a blow-up: what happened, where
    ``diverged.json`` and the draws kept before it are, and what to change."""
    records = sorted(out.glob("chains/chain_*/diverged.json")) if independent else []
    if not records and (out / "run" / "diverged.json").is_file():
        records = [out / "run" / "diverged.json"]
    where = f"recorded in {', '.join(map(str, records))}" if records else f"nothing recorded in {out / 'run'}"
    kept = getattr(err, "chain", None)
    draws = f"; the {kept.num_draws} draw(s) kept before it are in {out / 'run'}" if kept is not None else ""
    text = " ".join(str(err).split())
    return f"the run diverged: {_flag_words(text)} ({where}{draws}): pass a smaller --lr"


def _distributed_rank(args: argparse.Namespace, executor) -> int:
    """``--distributed``: join torchrun's process group (``structmc.distributed.init``) and
    return this process's rank; refused, naming what to do, outside torchrun or with
    ``--executor`` (independent chains as tasks, the other way past one process)."""
    if not args.distributed:
        return 0
    import os

    if executor is not None:
        raise UsageError(
            "--distributed computes one set of chains over torchrun's processes; --executor runs the chains as "
            "independent tasks: choose one"
        )
    if "RANK" not in os.environ:
        raise UsageError(
            "--distributed: start the command under torchrun, e.g. `torchrun --nproc-per-node 2 --no-python "
            "structmc sample ... --distributed` (every process runs the same command)"
        )
    from ..distributed import init

    rank, _world = init()
    return rank


def _holds_run(run_dir: Path) -> bool:
    """``run_dir`` is a folder holding files of a run (its lock file aside)."""
    return run_dir.is_dir() and any(p.name != ".structmc.lock" for p in run_dir.iterdir())


def _y_scale(data) -> float:
    return float(getattr(data, "y_scale", None) or data.meta.get("y_std", 1.0))


def _trace_plot(path: Path, chain) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for c in range(chain.num_chains):
        axes[0].plot(chain.info["energy"][c].numpy(), lw=0.5, label=f"chain {c}")
        axes[1].plot(chain.draw_steps.numpy(), chain.samples[c, :, 0].numpy(), lw=0.6)
    axes[0].set(xlabel="iteration", ylabel="minibatch energy", yscale="symlog")
    axes[1].set(xlabel="iteration", ylabel=f"{chain.space.names[0]}[0]")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
