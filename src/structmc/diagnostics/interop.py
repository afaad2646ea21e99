"""Conversion to ArviZ (optional extra ``arviz``; imported inside the function)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def to_arviz(chain, var_names: Sequence[str] | None = None, *, sample_stats: bool = True):
    """ArviZ data with one posterior variable per named parameter: an ``InferenceData`` with
    ArviZ 0.x, a ``DataTree`` with ArviZ 1.x (arviz-base's ``from_dict``).

    Each variable has dims ``(chain, draw, <name>_dim_0, ...)`` (ArviZ's default dim names),
    coordinate ``draw`` = ``chain.draw_steps`` (the sampler iteration of each kept draw).
    ``var_names`` selects parameters (exact names or shell patterns such as ``"fc1.*"``);
    default all. With ``sample_stats=True`` and the run's per-iteration ``info``, the group
    ``sample_stats`` holds ``minibatch_energy`` (Û at the kept iterations, ``[C, D]``) and
    ``lr``. Memory: copies the selected draws into numpy (float64 stays float64).
    """
    try:
        import arviz as az
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("to_arviz needs arviz: pip install 'structmc[arviz]'") from err
    space = chain.space
    if var_names is None:
        names = space.names
    else:
        names = []
        for p in [var_names] if isinstance(var_names, str) else var_names:
            hits = [p] if p in space.names else [i.name for i in space.match(p)]
            if not hits:
                raise KeyError(f"no parameter matches {p!r}; names: {space.names}")
            names.extend(h for h in hits if h not in names)
    named = chain.named()
    posterior = {n: named[n].detach().cpu().numpy() for n in names}
    D = chain.num_draws
    steps = (
        chain.draw_steps.detach().cpu().numpy()
        if chain.draw_steps is not None and len(chain.draw_steps) == D
        else list(range(D))
    )
    stats = None
    info = chain.info or {}
    if sample_stats and len(steps) and "energy" in info and D > 0:
        idx = torch.as_tensor(chain.draw_steps, dtype=torch.long) - 1  # draw_steps are 1-based
        S = info["energy"].shape[-1]
        if int(idx.max()) < S:
            stats = {}
            for key, value in info.items():  # every per-iteration record, at the kept iterations
                if not isinstance(value, torch.Tensor) or value.shape[-1] != S:
                    continue
                v = value[..., idx].cpu()
                if v.dim() == 1:  # [D]: the same for every chain
                    v = v.unsqueeze(0).expand(chain.num_chains, -1)
                elif v.shape[0] != chain.num_chains:
                    continue
                stats["minibatch_energy" if key == "energy" else key] = v.movedim(-1, 1).numpy()
    coords = {"draw": steps}
    if _major(getattr(az, "__version__", "0")) >= 1:
        # ArviZ 1.x (arviz-base): one mapping {group: {variable: array}}, returns a DataTree
        groups = {"posterior": posterior} | ({"sample_stats": stats} if stats else {})
        return az.from_dict(groups, coords=coords)
    return az.from_dict(posterior=posterior, sample_stats=stats, coords=coords)


def _major(version: str) -> int:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return 0
