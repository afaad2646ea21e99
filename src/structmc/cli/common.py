"""What the ``structmc`` commands share: :class:`UsageError`, the ``--out`` folder check, the
flags that go to samplers and models, and the data set and model (as an energy) built from
the ``sample`` / ``tune`` settings."""

from __future__ import annotations

from pathlib import Path


class UsageError(SystemExit):
    """A mistake in the command line or a config file: exits with status 2 (argparse's code
    for usage errors) after :func:`main` prints ``structmc: error: <message>`` on stderr.
    A ``SystemExit`` so that it ends the program like argparse's own errors; ``str()`` is
    the message."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


SAMPLER_FLAGS = ("friction", "a", "alpha", "num_leapfrog", "temperature")  # each goes to the samplers that take it
MODEL_FLAGS = ("hidden", "activation")


def _out_folder(path: str | Path, *inside: str) -> Path:
    """``--out`` as a folder: refuse (before any compute) a path that is a file, or lies under
    one, and the sub-folders ``inside`` it that the command writes to when they are files."""
    out = Path(path)
    p = out
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.exists() and not p.is_dir():
        where = "is a file" if p == out else f"lies inside {p}, which is a file"
        raise UsageError(f"--out {out} {where}: pass a folder (a new one, or the folder of an earlier run)")
    for name in inside:
        if (out / name).exists() and not (out / name).is_dir():
            raise UsageError(
                f"--out {out}: {out / name} is a file, but the run writes its draws into a folder "
                f"there: pass another --out, or move the file"
            )
    return out


def _load_dataset(s: dict):
    """A data set of :data:`structmc.data.DATASETS`: scikit-learn and synthetic sets are split
    with ``--seed``; the papers' sets come from their files (``--data-dir``)."""
    from ..data import DATASETS

    spec = DATASETS.get(s["dataset"])
    if spec.source == "files":
        ds = spec.load(**({"data_dir": s["data_dir"]} if s["data_dir"] else {}))
    else:
        ds = spec.load(seed=s["seed"])
    if ds.task not in ("regression", "binary", "multiclass") or ds.x_test is None:
        raise ValueError(
            f"structmc sample needs a classification or regression set with a test split; "
            f"{s['dataset']!r} is {ds.task!r}" + ("" if ds.x_test is not None else " without one")
        )
    return ds


def _model_energy(s: dict, data):
    """The ``--model`` of :data:`structmc.models.MODELS` sized from ``data``, as an energy with
    the likelihood of the data's task, ``--prior-std`` and ``--noise-std`` (Gaussian: 0.7
    unless given)."""
    import inspect

    import torch

    from ..models import MODELS
    from ..models.catalogue import likelihood_for_task
    from ..zoo import energy_for

    spec = MODELS.get(s["model"])
    if spec.from_data is None:
        raise ValueError(
            f"model {s['model']!r} is not sized from a data set; structmc sample takes {', '.join(_sample_models())}"
        )
    params = inspect.signature(spec.build).parameters
    open_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs = {k: s[k] for k in MODEL_FLAGS if k in params or open_kw}
    likelihood = spec.likelihood or likelihood_for_task(data.task)
    if s["noise_std"] is not None and likelihood != "gaussian":
        raise UsageError(
            f"--noise-std (noise_std) is the observation noise of a regression model, but "
            f"{s['dataset']!r} is a {data.task} data set ({likelihood} likelihood, which has no noise "
            f"scale): drop it"
        )
    noise_std = s["noise_std"] if s["noise_std"] is not None else (0.7 if likelihood == "gaussian" else None)
    # --seed draws the initial weights (as torch.manual_seed(seed) just before building would)
    # and then seeds the global random state for everything that follows.
    energy = energy_for(
        s["model"],
        data=data,
        likelihood=likelihood,
        prior_std=s["prior_std"],
        noise_std=noise_std,
        seed=s["seed"],
        **kwargs,
    )
    torch.manual_seed(s["seed"])
    return energy


def _sample_models() -> list[str]:
    from ..models import MODELS

    return [name for name, spec in MODELS.items() if spec.from_data is not None]
