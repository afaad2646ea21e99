"""``structmc`` command line: ``demo``, ``sample``, ``experiment``, ``diagnose``."""

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


def build_sampler(s: dict):
    from .samplers import PSGLD, SGHMC, SGLD, SGNHT
    from .schedules import schedule_from_config

    lr = s["lr"]
    if s["schedule"]:  # e.g. {kind = "step_decay", every = 2000}; lr comes from --lr unless given
        sched = dict(s["schedule"])
        if sched.get("kind") != "polynomial":
            sched.setdefault("lr", lr)
        lr = schedule_from_config(sched)
    name = s["sampler"]
    if name == "sgld":
        return SGLD(lr, temperature=s["temperature"])
    if name == "psgld":
        return PSGLD(lr, alpha=s["alpha"], temperature=s["temperature"])
    if name == "sghmc":
        return SGHMC(lr, friction=s["friction"], num_leapfrog=s["num_leapfrog"], temperature=s["temperature"])
    if name == "sgnht":
        return SGNHT(lr, a=s["a"], num_leapfrog=s["num_leapfrog"], temperature=s["temperature"])
    raise SystemExit(f"unknown sampler {name!r}; choose sgld, psgld, sghmc or sgnht")


def build_model(s: dict, data):
    import torch
    from torch import nn

    out_dim = 1 if data.task in ("regression", "binary") else data.num_classes
    widths = [data.num_features] + (list(s["hidden"]) if s["model"] == "mlp" else []) + [out_dim]
    if s["model"] not in ("linear", "mlp"):
        raise SystemExit(f"unknown model {s['model']!r}; choose linear or mlp")
    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[s["activation"]]
    layers: list[nn.Module] = [nn.Flatten()] if data.x_train.dim() > 2 else []
    for k, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(a, b))
        if k < len(widths) - 2:
            layers.append(act())
    torch.manual_seed(s["seed"])
    return nn.Sequential(*layers)


def cmd_sample(args: argparse.Namespace) -> int:
    import torch

    from . import ControlVariate, ModuleEnergy, find_map, predictive, sample
    from .diagnostics import classification_metrics, regression_metrics

    s = _sample_settings(args)
    out = Path(args.out or f"runs/sample-{time.strftime('%Y%m%d-%H%M%S')}")
    data = _load_dataset(s)
    model = build_model(s, data)
    likelihood = {"regression": "gaussian", "binary": "bernoulli", "multiclass": "categorical"}[data.task]
    noise_std = s["noise_std"] if s["noise_std"] is not None else (0.7 if likelihood == "gaussian" else None)
    energy = ModuleEnergy(model, likelihood, prior_std=s["prior_std"], noise_std=noise_std)
    sampler = build_sampler(s)
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


def _load_dataset(s: dict):
    """A scikit-learn set (structmc.builtin) or a paper data set (structmc.data, real files)."""
    from .builtin import DATASETS, load_builtin

    if s["dataset"] in DATASETS:
        return load_builtin(s["dataset"], seed=s["seed"])
    from . import data as datasets

    ds = datasets.load(s["dataset"], **({"data_dir": s["data_dir"]} if s["data_dir"] else {}))
    if ds.task not in ("regression", "binary", "multiclass") or ds.x_test is None:
        raise ValueError(f"structmc sample needs a classification or regression set with a test split; "
                         f"{s['dataset']!r} is {ds.task!r}")
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
    from .experiments import get

    module = get(name or args.name)
    preset = args.preset
    if preset not in module.PRESETS:
        raise SystemExit(f"unknown preset {preset!r}; choose from {sorted(module.PRESETS)}")
    out = Path(args.out or f"runs/{name or args.name}")
    t0 = time.perf_counter()
    report = module.run(preset, out, progress=None if not args.quiet else False)
    print((out / "report.md").read_text())
    print(f"wrote {out} in {time.perf_counter() - t0:.1f} s")
    return 0 if report else 1


def cmd_diagnose(args: argparse.Namespace) -> int:
    try:
        from .diagnostics.report import diagnose_run
    except ImportError as err:  # pragma: no cover
        raise SystemExit(f"diagnostics are unavailable: {err}") from err
    print(diagnose_run(args.run_dir, args.out))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="structmc", description="Scalable approximate MCMC for Bayesian neural networks.")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="Bayesian linear regression with exact posterior, five samplers (~1 min)")
    p.add_argument("--preset", default="quick", help="tiny | quick (default) | full")
    p.add_argument("--out", help="run folder (default runs/demo)")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("experiment", help="run a registered experiment")
    p.add_argument("name")
    p.add_argument("--preset", default="quick")
    p.add_argument("--out")
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("sample", help="run a sampler on a built-in model / data set")
    p.add_argument("--config", help="TOML, YAML or JSON file with any of the flags below (flags win)")
    p.add_argument("--dataset", help="scikit-learn: diabetes, breast_cancer, digits, wine, iris; paper sets: "
                   "mnist, fashion-mnist, cifar10, svhn, adult, boston, concrete, ... (see structmc.data)")
    p.add_argument("--data-dir", dest="data_dir", help="local folder with the data files (else $STRUCTMC_DATA, cache, download)")
    p.add_argument("--model", choices=["linear", "mlp"])
    p.add_argument("--hidden", type=lambda s: [int(x) for x in s.split(",")], help="MLP widths, e.g. 50,50")
    p.add_argument("--activation", choices=["relu", "tanh", "sigmoid"])
    p.add_argument("--sampler", choices=["sgld", "psgld", "sghmc", "sgnht"])
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
        return cmd_diagnose(args)
    except ValueError as err:  # configuration errors: one clear line, no traceback
        print(f"structmc: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
