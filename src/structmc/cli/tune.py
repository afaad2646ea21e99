"""``structmc tune``: tune a sampler's hyperparameters (MAMBA, grid search or the heuristic)
on a built-in model / data set; its flags' parsers (``--lr`` lists, ``--log10-h`` ranges,
``--budget``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from .common import _load_dataset, _model_energy, _out_folder
from .settings import _FLAGS, SAMPLE_DEFAULTS, _check_settings


def _values(text: str, cast=float) -> list:
    """``"1e-5,1e-4"`` -> [1e-05, 0.0001]."""
    try:
        return [cast(v) for v in str(text).split(",") if v.strip()]
    except ValueError as err:
        raise ValueError(f"expected a comma-separated list, got {text!r}") from err


def _log10_range(text: str) -> list[float]:
    """``"-7.5:-1:0.5"`` -> 10^-7.5, 10^-7, ..., 10^-1 (both ends included)."""
    try:
        lo, hi, step = (float(v) for v in text.split(":"))
    except ValueError as err:
        raise ValueError(f"--log10-h takes LOW:HIGH:STEP, e.g. -7.5:-1:0.5, got {text!r}") from err
    if step <= 0 or hi < lo:
        raise ValueError(f"--log10-h needs LOW <= HIGH and STEP > 0, got {text!r}")
    n = int(round((hi - lo) / step)) + 1
    return [10.0 ** (lo + i * step) for i in range(n)]


def _budget(text: str):
    """``"30s"`` (seconds of sampling), ``"3000it"`` (iterations), ``"1e5grad"`` (gradient evaluations)."""
    from .. import Budget

    t = str(text).strip().lower()
    for suffix, key, cast in (
        ("grad", "grad_evals", lambda v: int(float(v))),
        ("it", "iterations", lambda v: int(float(v))),
        ("s", "seconds", float),
    ):
        if t.endswith(suffix):
            try:
                value: Any = cast(t[: -len(suffix)])
            except ValueError:
                break
            try:
                return Budget(**{key: value})
            except ValueError as err:
                raise ValueError(f"bad --budget {text!r}: {err}") from err
    raise ValueError(f"--budget takes e.g. 30s, 3000it or 1e5grad, got {text!r}")


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune a sampler's hyperparameters on a built-in model / data set (MAMBA, grid search or
    the heuristic) and write the trace, the plot and a report with the chosen arm.

    The MAP fit that starts every arm (the paper's choice; ``--no-map`` skips it) is bounded
    and reported: with a seconds budget T it gets at most ``--map-share`` of T (default 20%)
    and the tuning the rest, T·(1 − share), so the whole run stays within T plus set-up; its
    time is printed on stderr before and after (terminal or not) and written in report.md."""
    from .. import Budget, find_map
    from ..tuning import grid, grid_search, heuristic, lr_from_paper, mamba
    from ..tuning.arms import edge_of_grid
    from ..tuning.mamba import _check_eta, check_scorable, num_rounds, round_budget

    s = dict(SAMPLE_DEFAULTS)
    for key in ("dataset", "model", "hidden", "activation", "prior_std", "noise_std", "seed", "data_dir", "sampler"):
        if getattr(args, key, None) is not None:
            s[key] = getattr(args, key)
    s = _check_settings(s, _FLAGS)
    budget = _budget(args.budget)
    if args.lr and args.log10_h:
        raise ValueError("give --lr or --log10-h, not both")
    for flag, value in (("--thin", args.thin), ("--min-samples", args.min_samples), ("--map-steps", args.map_steps)):
        if value < 1:
            raise ValueError(f"{flag} must be an integer >= 1, got {value}")
    if not 0 < args.map_share < 1:
        raise ValueError(
            f"--map-share must lie in (0, 1) (the MAP fit's share of a seconds --budget), got {args.map_share}"
        )
    lrs = (
        _values(args.lr)
        if args.lr
        else [lr_from_paper(s["sampler"], h) for h in _log10_range(args.log10_h or "-7:-3:0.5")]
    )
    hyper: dict[str, Any] = {"lr": lrs}
    for flag, cast in (("num_leapfrog", int), ("friction", float), ("a", float)):
        if getattr(args, flag):
            hyper[flag] = _values(getattr(args, flag), cast)
    batches = [
        int(b) if float(b) >= 1 and float(b) == int(float(b)) and "." not in b else float(b)
        for b in (args.batch_size or "1.0,0.1,0.01").split(",")
    ]
    gradients = (args.gradient or "minibatch").split(",")
    arms = grid(s["sampler"], batch_size=batches, gradient=gradients, **hyper)
    map_cap = None
    if not args.no_map and budget.seconds is not None:  # the MAP fit's share of T, the rest for tuning
        map_cap = budget.seconds * args.map_share
        budget = Budget(seconds=budget.seconds - map_cap)
    scored = min(args.min_samples, 256)  # mamba() / grid_search() score at most max_samples = 256
    try:  # the check mamba() / grid_search() make, here before the data, the model and the MAP fit
        if args.method == "mamba":
            _check_eta(args.eta)
            R = num_rounds(len(arms), args.eta)
            check_scorable(
                round_budget(budget, len(arms), R), args.thin, scored, arms=len(arms), rounds=R, total=budget
            )
        else:
            check_scorable(
                budget, args.thin, scored, arms=len(arms) if args.method == "grid" else 1, rounds=1, total=budget
            )
    except ValueError as err:
        raise ValueError(_tune_flag_words(str(err))) from None
    out = _out_folder(args.out or f"runs/tune-{time.strftime('%Y%m%d-%H%M%S')}")
    data = _load_dataset(s)
    energy = _model_energy(s, data)
    train = (data.x_train, data.y_train)
    N = len(data.x_train)
    t0 = time.perf_counter()
    init = energy.initial_position()
    map_line = "MAP fit: skipped (--no-map); every arm starts from the model's initial weights"
    if not args.no_map:  # the paper starts every arm from the MAP (also the control-variate centre)
        rows = max(1, N // 100)
        bound = (
            f", at most {map_cap:.1f} s (--map-share {args.map_share:g} of --budget {args.budget})" if map_cap else ""
        )
        _note(args, f"MAP fit: up to {args.map_steps} Adam steps on batches of {rows} rows{bound} ...")
        info: dict = {}
        init = find_map(
            energy,
            init,
            data=train,
            batch_size=rows,
            num_steps=args.map_steps,
            seed=s["seed"],
            max_seconds=map_cap,
            info=info,
        )
        map_line = (
            f"MAP fit: {info['steps']} of {args.map_steps} Adam steps in {info['seconds']:.1f} s"
            + (
                f" (stopped at its {map_cap:.1f} s share of the budget: raise --map-share or --budget, or "
                f"lower --map-steps)"
                if info["stopped_early"]
                else ""
            )
            + (f"; tuning gets {budget.seconds:.1f} s" if map_cap else "")
        )
        _note(args, map_line)
    common = dict(
        data=train,
        metric=args.metric,
        executor=args.executor,
        seed=s["seed"],
        num_chains=args.chains,
        centre=init,
        out_dir=out,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=None if not args.quiet else False,
        thin=args.thin,
        min_samples=args.min_samples,
    )
    try:
        if args.method == "mamba":
            result = mamba(energy, init, arms, budget, eta=args.eta, **common)
        elif args.method == "grid":
            result = grid_search(energy, init, arms, budget, **common)
        else:
            extra = {k: v[0] for k, v in hyper.items() if k != "lr"}
            arm = heuristic(N, s["sampler"], gradient=gradients[0], **extra)
            result = grid_search(energy, init, [arm], budget, batch_size=None, **common)
    except ValueError as err:  # the tuner's folder messages name its keyword arguments: name the flags
        text = str(err)
        for word, flag in (("resume=True", "--resume"), ("overwrite=True", "--overwrite"), ("out_dir", "--out")):
            text = text.replace(word, flag)
        if text == str(err):
            raise
        raise ValueError(text) from None
    seconds = time.perf_counter() - t0
    best = result.best
    assert best is not None  # mamba() / grid_search() raise when every arm fails
    for warning in edge_of_grid(result.arms, best):
        print(f"structmc: warning: {warning}", file=sys.stderr)
    md = [
        f"# structmc tune: {args.method} for {s['sampler']} on {s['dataset']} ({s['model']})",
        "",
        "```",
        result.summary(),
        "```",
        "",
        f"chosen arm: `{best.label}` (batch {best.batch_count(N) or N} of {N} rows: structmc sample --batch-size "
        f"{best.batch_count(N) or N})",
        "",
        "```json",
        json.dumps(best.to_dict(), indent=1),
        "```",
        "",
        map_line,
        "",
        f"wall time {seconds:.1f} s (MAP included); trace: {out / 'trace.json'}",
    ]
    (out / "report.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


def _note(args: argparse.Namespace, line: str) -> None:
    """A progress line on stderr (terminal or not; ``--quiet`` silences it)."""
    if not args.quiet:
        print(line, file=sys.stderr, flush=True)


def _tune_flag_words(text: str) -> str:
    """The tuning library's budget message, in ``structmc tune``'s flags."""
    import re

    text = text.replace("lower thin / min_samples", "lower --thin / --min-samples")
    text = re.sub(r"budget iterations=(\d+)", r"budget --budget \1it", text)
    text = re.sub(r"budget grad_evals=(\d+)", r"budget --budget \1grad", text)
    text = re.sub(r"(?<![\w-])min_samples=", "--min-samples ", text)
    text = re.sub(r"(?<![\w-])thin=", "--thin ", text)
    text = re.sub(r"\bat least iterations=(\d+)", r"at least --budget \1it", text)
    text = re.sub(r"\bat least grad_evals=(\d+)", r"at least --budget \1grad", text)
    return text
