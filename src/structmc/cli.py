"""``structmc`` command line: ``demo``, ``sample``, ``tune``, ``experiment``, ``diagnose``.

Names come from the library's registries (:mod:`structmc.registry`): ``--sampler`` from
``structmc.samplers.SAMPLERS`` (built by ``sampler_from_config``), ``--model`` from
``structmc.models.MODELS`` (the models sized from a data set), ``--dataset`` from
``structmc.data.DATASETS`` and ``experiment NAME`` from ``structmc.experiments.REGISTRY``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SAMPLE_DEFAULTS = {
    "dataset": "breast_cancer", "model": "linear", "hidden": [50], "activation": "relu",
    "sampler": "sgld", "lr": 1e-4, "friction": 0.05, "a": 0.05, "alpha": 0.99, "num_leapfrog": 1,
    "temperature": 1.0, "schedule": None, "gradient": "minibatch", "prior_std": 1.0, "noise_std": None,
    "num_steps": 5000, "burn_in": 1000, "thin": 5, "num_chains": 2, "batch_size": 32, "seed": 0,
    "checkpoint_every": None, "data_dir": None,
}


def _load_config(path: str) -> dict:
    p = Path(path)
    if not p.exists():
        raise SystemExit(f"config file not found: {path}")
    text = p.read_text()
    if p.suffix == ".toml":
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib
        return tomllib.loads(text)
    if p.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as err:
            raise SystemExit("YAML configs need pyyaml: pip install 'structmc[yaml]'") from err
        return yaml.safe_load(text) or {}
    if p.suffix == ".json":
        return json.loads(text)
    raise SystemExit(f"config must be .toml, .yaml/.yml or .json, got {path}")


def _sample_settings(args: argparse.Namespace) -> dict:
    settings = dict(SAMPLE_DEFAULTS)
    if args.config:
        cfg = _load_config(args.config)
        unknown = set(cfg) - set(SAMPLE_DEFAULTS)
        if unknown:
            raise SystemExit(f"unknown keys in {args.config}: {sorted(unknown)}; allowed: {sorted(SAMPLE_DEFAULTS)}")
        settings.update(cfg)
    for key in SAMPLE_DEFAULTS:
        value = getattr(args, key, None)
        if value is not None:
            settings[key] = value
    return settings


SAMPLER_FLAGS = ("friction", "a", "alpha", "num_leapfrog", "temperature")  # each goes to the samplers that take it
MODEL_FLAGS = ("hidden", "activation")


def sampler_config(s: dict) -> dict:
    """The sampler settings as one :func:`structmc.samplers.sampler_from_config` dict: name,
    ``lr`` (a number, or the ``schedule`` table with ``lr`` from ``--lr`` unless it gives its
    own) and those of the hyperparameter flags (``SAMPLER_FLAGS``) the sampler accepts."""
    import dataclasses

    from .samplers import sampler_keys
    from .schedules import SCHEDULES

    lr = s["lr"]
    if s["schedule"]:  # e.g. {kind = "step_decay", every = 2000}
        sched = dict(s["schedule"])
        kind = sched.get("kind", "constant")
        cls = SCHEDULES.get(kind) or {c.__name__: c for c in SCHEDULES.values()}.get(kind)
        if cls is not None and "lr" in {f.name for f in dataclasses.fields(cls)}:
            sched.setdefault("lr", lr)
        lr = sched
    accepted = set(sampler_keys(s["sampler"]))
    return {"name": s["sampler"], "lr": lr, **{k: s[k] for k in SAMPLER_FLAGS if k in accepted}}


def _model_energy(s: dict, data):
    """The ``--model`` of :data:`structmc.models.MODELS` sized from ``data``, as an energy with
    the likelihood of the data's task, ``--prior-std`` and ``--noise-std`` (Gaussian: 0.7
    unless given)."""
    import inspect

    import torch

    from .models import MODELS
    from .models.zoo import likelihood_for_task
    from .zoo import energy_for

    spec = MODELS.get(s["model"])
    if spec.from_data is None:
        raise ValueError(f"model {s['model']!r} is not sized from a data set; structmc sample takes "
                         f"{', '.join(_sample_models())}")
    params = inspect.signature(spec.build).parameters
    open_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs = {k: s[k] for k in MODEL_FLAGS if k in params or open_kw}
    likelihood = spec.likelihood or likelihood_for_task(data.task)
    noise_std = s["noise_std"] if s["noise_std"] is not None else (0.7 if likelihood == "gaussian" else None)
    # --seed draws the initial weights (as torch.manual_seed(seed) just before building would)
    # and then seeds the global random state for everything that follows.
    energy = energy_for(s["model"], data=data, likelihood=likelihood, prior_std=s["prior_std"],
                        noise_std=noise_std, seed=s["seed"], **kwargs)
    torch.manual_seed(s["seed"])
    return energy


def _sample_models() -> list[str]:
    from .models import MODELS

    return [name for name, spec in MODELS.items() if spec.from_data is not None]


def cmd_sample(args: argparse.Namespace) -> int:
    import torch

    from . import ControlVariate, find_map, predictive, sample
    from .diagnostics import classification_metrics, regression_metrics
    from .samplers import sampler_from_config

    s = _sample_settings(args)
    out = Path(args.out or f"runs/sample-{time.strftime('%Y%m%d-%H%M%S')}")
    data = _load_dataset(s)
    energy = _model_energy(s, data)
    sampler = sampler_from_config(sampler_config(s))
    train = (data.x_train, data.y_train)
    init = energy.initial_position()
    gradient = "minibatch"
    if s["gradient"] in ("cv", "control_variate"):
        init = find_map(energy, init, data=train, batch_size=min(len(data.x_train), 128), num_steps=2000)
        gradient = ControlVariate(init)
    elif s["gradient"] != "minibatch":
        raise SystemExit(f"unknown gradient {s['gradient']!r}; choose minibatch or cv")
    t0 = time.perf_counter()
    chain = sample(energy, init, sampler, s["num_steps"], data=train, batch_size=s["batch_size"],
                   burn_in=s["burn_in"], thin=s["thin"], seed=s["seed"], num_chains=s["num_chains"],
                   gradient=gradient, out_dir=out / "run", checkpoint_every=s["checkpoint_every"],
                   resume=args.resume, progress=None if not args.quiet else False)
    seconds = time.perf_counter() - t0
    pred = predictive(energy, chain, data.x_test)
    metrics = {"seconds": seconds, "num_draws": chain.num_draws * chain.num_chains}
    if data.task == "regression":
        reg = regression_metrics(pred["mean"].double(), pred["var"].double(), data.y_test.double())
        metrics.update(test_rmse=reg["rmse"] * _y_scale(data), test_nll=reg["nll"])
    else:
        cls = classification_metrics(pred["probs"].double(), data.y_test.long())
        metrics.update({f"test_{k}": v for k, v in cls.items()})
    report = {"settings": s, "sampler": sampler.config(), "metrics": metrics, "run_dir": str(out / "run")}
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    md = [f"# structmc sample: {s['sampler']} on {s['dataset']} ({s['model']})", "",
          "| metric | value |", "|---|---|"] + [f"| {k} | {v:.4g} |" for k, v in metrics.items()]
    (out / "report.md").write_text("\n".join(md) + "\n")
    _trace_plot(out / "trace.png", chain)
    print("\n".join(md))
    print(f"\nwrote {out}/report.json, report.md, trace.png and the draws in {out}/run")
    return 0


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
    from . import Budget

    t = str(text).strip().lower()
    for suffix, key, cast in (("grad", "grad_evals", lambda v: int(float(v))), ("it", "iterations", lambda v: int(float(v))),
                              ("s", "seconds", float)):
        if t.endswith(suffix):
            try:
                value = cast(t[: -len(suffix)])
            except ValueError:
                break
            try:
                return Budget(**{key: value})
            except ValueError as err:
                raise ValueError(f"bad --budget {text!r}: {err}") from err
    raise ValueError(f"--budget takes e.g. 30s, 3000it or 1e5grad, got {text!r}")


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune a sampler's hyperparameters on a built-in model / data set (MAMBA, grid search or
    the heuristic) and write the trace, the plot and a report with the chosen arm."""
    import torch

    from . import find_map
    from .tuning import grid, grid_search, heuristic, lr_from_paper, mamba

    s = dict(SAMPLE_DEFAULTS)
    for key in ("dataset", "model", "hidden", "activation", "prior_std", "noise_std", "seed", "data_dir", "sampler"):
        if getattr(args, key, None) is not None:
            s[key] = getattr(args, key)
    budget = _budget(args.budget)
    if args.lr and args.log10_h:
        raise ValueError("give --lr or --log10-h, not both")
    out = Path(args.out or f"runs/tune-{time.strftime('%Y%m%d-%H%M%S')}")
    data = _load_dataset(s)
    energy = _model_energy(s, data)
    train = (data.x_train, data.y_train)
    N = len(data.x_train)
    lrs = _values(args.lr) if args.lr else [lr_from_paper(s["sampler"], h) for h in _log10_range(args.log10_h or "-7:-3:0.5")]
    hyper = {"lr": lrs}
    for flag, cast in (("num_leapfrog", int), ("friction", float), ("a", float)):
        if getattr(args, flag):
            hyper[flag] = _values(getattr(args, flag), cast)
    batches = [int(b) if float(b) >= 1 and float(b) == int(float(b)) and "." not in b else float(b)
               for b in (args.batch_size or "1.0,0.1,0.01").split(",")]
    gradients = (args.gradient or "minibatch").split(",")
    arms = grid(s["sampler"], batch_size=batches, gradient=gradients, **hyper)
    t0 = time.perf_counter()
    init = energy.initial_position()
    if not args.no_map:  # the paper starts every arm from the MAP (also the control-variate centre)
        init = find_map(energy, init, data=train, batch_size=max(1, N // 100), num_steps=args.map_steps, seed=s["seed"])
    common = dict(data=train, metric=args.metric, executor=args.executor, seed=s["seed"], num_chains=args.chains,
                  centre=init, out_dir=out, resume=args.resume, progress=None if not args.quiet else False)
    if args.method == "mamba":
        result = mamba(energy, init, arms, budget, eta=args.eta, **common)
    elif args.method == "grid":
        result = grid_search(energy, init, arms, budget, **common)
    else:
        extra = {k: v[0] for k, v in hyper.items() if k != "lr"}
        arm = heuristic(N, s["sampler"], gradient=gradients[0], **extra)
        result = grid_search(energy, init, [arm], budget, batch_size=None, **common)
    seconds = time.perf_counter() - t0
    best = result.best
    md = [f"# structmc tune: {args.method} for {s['sampler']} on {s['dataset']} ({s['model']})", "",
          "```", result.summary(), "```", "",
          f"chosen arm: `{best.label}`", "", "```json", json.dumps(best.to_dict(), indent=1), "```", "",
          f"wall time {seconds:.1f} s (MAP included); trace: {out / 'trace.json'}"]
    (out / "report.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


def _load_dataset(s: dict):
    """A data set of :data:`structmc.data.DATASETS`: scikit-learn and synthetic sets are split
    with ``--seed``; the papers' sets come from their files (``--data-dir``)."""
    from .data import DATASETS

    spec = DATASETS.get(s["dataset"])
    if spec.source == "files":
        ds = spec.load(**({"data_dir": s["data_dir"]} if s["data_dir"] else {}))
    else:
        ds = spec.load(seed=s["seed"])
    if ds.task not in ("regression", "binary", "multiclass") or ds.x_test is None:
        raise ValueError(f"structmc sample needs a classification or regression set with a test split; "
                         f"{s['dataset']!r} is {ds.task!r}" + ("" if ds.x_test is not None else " without one"))
    return ds


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


def cmd_experiment(args: argparse.Namespace, name: str | None = None) -> int:
    from .experiments import REGISTRY

    if getattr(args, "list", False):
        print(experiment_table())
        return 0
    name = name or args.name
    if not name:
        raise ValueError(f"name an experiment ({', '.join(REGISTRY.choices())}) or pass --list")
    exp = REGISTRY.get(name)
    module = exp.load()
    preset = args.preset
    if preset not in module.PRESETS:
        raise SystemExit(f"unknown preset {preset!r}; choose from {sorted(module.PRESETS)}")
    out = Path(args.out or f"runs/{name}")
    t0 = time.perf_counter()
    report = module.run(preset, out, progress=None if not args.quiet else False)
    print((out / "report.md").read_text())
    print(f"wrote {out} in {time.perf_counter() - t0:.1f} s")
    return 0 if report else 1


def experiment_table() -> str:
    """One line per registered experiment: name, paper, table/figure, presets, data sets."""
    from .experiments import REGISTRY

    rows = [("name", "paper", "figure", "presets", "data sets")]
    for name, exp in REGISTRY.items():
        paper = f"{exp.paper.citation} {exp.paper.title}" if exp.paper else "- (structmc)"
        rows.append((name, paper, exp.figure or "-", ", ".join(exp.presets), ", ".join(exp.datasets) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows)


def cmd_diagnose(args: argparse.Namespace) -> int:
    try:
        from .diagnostics.report import diagnose_run
    except ImportError as err:  # pragma: no cover
        raise SystemExit(f"diagnostics are unavailable: {err}") from err
    print(diagnose_run(args.run_dir, args.out))
    return 0


def _dataset_names(source: str) -> list[str]:
    from .data import DATASETS

    return [name for name, spec in DATASETS.items() if spec.source == source]


def main(argv: list[str] | None = None) -> int:
    from .models.mlp import ACTIVATIONS
    from .samplers import SAMPLERS

    ap = argparse.ArgumentParser(prog="structmc", description="Scalable approximate MCMC for Bayesian neural networks.")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="Bayesian linear regression with exact posterior, five samplers (~1 min)")
    p.add_argument("--preset", default="quick", help="tiny | quick (default) | full")
    p.add_argument("--out", help="run folder (default runs/demo)")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("experiment", help="run a registered experiment (--list shows them)")
    p.add_argument("name", nargs="?")
    p.add_argument("--list", action="store_true", help="list the experiments: paper, figure, presets, data sets")
    p.add_argument("--preset", default="quick")
    p.add_argument("--out")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("sample", help="run a sampler on a built-in model / data set")
    p.add_argument("--config", help="TOML, YAML or JSON file with any of the flags below (flags win)")
    p.add_argument("--dataset", help=f"scikit-learn: {', '.join(_dataset_names('scikit-learn'))}; paper sets: "
                   f"{', '.join(_dataset_names('files'))} (see structmc.data.DATASETS)")
    p.add_argument("--data-dir", dest="data_dir", help="local folder with the data files (else $STRUCTMC_DATA, cache, download)")
    p.add_argument("--model", choices=_sample_models())
    p.add_argument("--hidden", type=lambda s: [int(x) for x in s.split(",")], help="MLP widths, e.g. 50,50")
    p.add_argument("--activation", choices=sorted(ACTIVATIONS))
    p.add_argument("--sampler", choices=SAMPLERS.names())
    p.add_argument("--lr", type=float)
    p.add_argument("--friction", type=float)
    p.add_argument("--a", type=float, help="SGNHT diffusion parameter")
    p.add_argument("--alpha", type=float, help="pSGLD RMS decay")
    p.add_argument("--num-leapfrog", dest="num_leapfrog", type=int)
    p.add_argument("--temperature", type=float)
    p.add_argument("--gradient", choices=["minibatch", "cv"])
    p.add_argument("--prior-std", dest="prior_std", type=float)
    p.add_argument("--noise-std", dest="noise_std", type=float)
    p.add_argument("--steps", dest="num_steps", type=int)
    p.add_argument("--burn-in", dest="burn_in", type=int)
    p.add_argument("--thin", type=int)
    p.add_argument("--chains", dest="num_chains", type=int)
    p.add_argument("--batch-size", dest="batch_size", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--checkpoint-every", dest="checkpoint_every", type=int)
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    p.add_argument("--out")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("tune", help="tune a sampler's step size, batch size, ... by MAMBA, grid search or the heuristic")
    p.add_argument("--method", choices=["mamba", "grid", "heuristic"], default="mamba")
    p.add_argument("--budget", default="10s", help="total budget T: 30s (sampling seconds), 3000it or 1e5grad")
    p.add_argument("--dataset", help="as for structmc sample")
    p.add_argument("--data-dir", dest="data_dir")
    p.add_argument("--model", choices=_sample_models())
    p.add_argument("--hidden", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--activation", choices=sorted(ACTIVATIONS))
    p.add_argument("--prior-std", dest="prior_std", type=float)
    p.add_argument("--noise-std", dest="noise_std", type=float)
    p.add_argument("--sampler", choices=SAMPLERS.names())
    p.add_argument("--lr", help="step sizes in our convention, comma-separated")
    p.add_argument("--log10-h", dest="log10_h", help="the paper's step sizes h as LOW:HIGH:STEP in log10 "
                   "(default -7:-3:0.5; converted with lr_from_paper)")
    p.add_argument("--batch-size", dest="batch_size", help="comma-separated: fractions (0.1) or counts (128); "
                   "default 1.0,0.1,0.01")
    p.add_argument("--num-leapfrog", dest="num_leapfrog", help="comma-separated")
    p.add_argument("--friction", help="comma-separated")
    p.add_argument("--a", help="SGNHT a, comma-separated")
    p.add_argument("--gradient", help="minibatch, cv or minibatch,cv")
    p.add_argument("--metric", choices=["ksd", "fssd"], default="ksd")
    p.add_argument("--eta", type=int, default=3)
    p.add_argument("--executor", help="serial (default), process, dask, ray, or a Dask scheduler tcp://host:port")
    p.add_argument("--chains", type=int, default=1)
    p.add_argument("--seed", type=int)
    p.add_argument("--no-map", dest="no_map", action="store_true", help="start from the model's initial weights")
    p.add_argument("--map-steps", dest="map_steps", type=int, default=2000)
    p.add_argument("--resume", action="store_true", help="continue an interrupted tuning run in --out")
    p.add_argument("--out")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("diagnose", help="summary table and plots for a saved run folder")
    p.add_argument("run_dir")
    p.add_argument("--out", help="where to write plots (default: RUN_DIR/diagnostics)")

    args = ap.parse_args(argv)
    try:
        if args.command == "demo":
            return cmd_experiment(args, "demo")
        if args.command == "experiment":
            return cmd_experiment(args)
        if args.command == "sample":
            return cmd_sample(args)
        if args.command == "tune":
            return cmd_tune(args)
        return cmd_diagnose(args)
    except ValueError as err:  # configuration errors: one clear line, no traceback
        print(f"structmc: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
