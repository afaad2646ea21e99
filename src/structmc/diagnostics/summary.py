"""Posterior summary table for selected parameters or function-space quantities, and helpers
to choose a parameter subset when P is too large to tabulate."""

from __future__ import annotations

import fnmatch
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..schedules import check_int
from ._utils import (
    as_draws,
    check_min_draws,
    map_params,
    quantile_select,
    quantile_sorted,
    split_chains,
    z_scale,
)
from ._utils import (
    quantiles as _quantiles,
)
from .autocorr import _iat_sokal
from .ess import _geyer_ess
from .rhat import _rhat_rank_from


def _mixing_chunk(t: Tensor) -> Tensor:
    p, C, D = t.shape
    s = split_chains(t)
    z, srt = z_scale(s, return_sorted=True)
    bulk = _geyer_ess(z)
    r = _rhat_rank_from(s, z, srt)
    # tail quantiles are taken over all draws; the split pool is the same set when D is even
    qs = [quantile_sorted(srt, q) if D % 2 == 0 else quantile_select(t.reshape(p, -1), q) for q in (0.05, 0.95)]
    ind = torch.stack([t <= q.view(p, 1, 1) for q in qs]).to(t.dtype)
    tail = _geyer_ess(split_chains(ind.reshape(2 * p, C, D))).view(2, p).amin(dim=0)
    return torch.stack([bulk, tail, r, _iat_sokal(t, 5.0)], dim=-1)


def mixing(x, chunk: int | None = None) -> dict[str, Tensor]:
    """``{"ess_bulk", "ess_tail", "rhat", "iac"}`` per parameter in one pass.

    Same values as :func:`ess_bulk`, :func:`ess_tail`, :func:`rhat` (rank) and
    :func:`integrated_time` (Sokal, c = 5), sharing the sort of the split chains between the
    bulk ESS, the bulk R-hat, the median for folding and the tail quantiles.
    """
    x = as_draws(x)
    check_min_draws(x)
    out = map_params(_mixing_chunk, x, chunk)
    return {k: out[..., i] for i, k in enumerate(("ess_bulk", "ess_tail", "rhat", "iac"))}


def _is_chain(obj) -> bool:
    return hasattr(obj, "samples") and hasattr(obj, "space")


def _multi_index(i: int, shape: tuple[int, ...]) -> str:
    idx = []
    for s in reversed(shape):
        idx.append(i % s)
        i //= s
    return ",".join(str(v) for v in reversed(idx))


def param_labels(space, indices) -> list[str]:
    """Readable labels ``name[i,j]`` (``name`` for scalars) of flat indices of a ParamSpace."""
    out = []
    for i in torch.as_tensor(indices).reshape(-1).tolist():
        for info in space.params:
            if info.offset <= i < info.offset + info.numel:
                out.append(
                    info.name if info.shape == () else f"{info.name}[{_multi_index(i - info.offset, info.shape)}]"
                )
                break
        else:
            raise IndexError(f"flat index {i} outside the parameter space of dimension {space.dim}")
    return out


def _element_index(space, label: str) -> int | None:
    """The flat index of a label ``name[i,j]`` as :func:`param_labels` writes it, where ``name``
    is a parameter tensor of ``space``; ``None`` when ``label`` is not of that form (a name or a
    shell pattern). An index outside the tensor's shape is a ``KeyError`` naming it."""
    match = _LABEL.fullmatch(label)
    if match is None or match.group(1) not in space.names:
        return None
    info = space[match.group(1)]
    index = [int(v) for v in match.group(2).split(",")]
    shape = tuple(info.shape)
    if len(index) != len(shape) or any(not 0 <= i < n for i, n in zip(index, shape)):
        raise KeyError(
            f"{label!r}: index {','.join(map(str, index))} is outside {info.name}'s shape {list(shape)} "
            f"(labels are name[i,j] with 0 <= i < shape, as summary prints them)"
        )
    flat = 0
    for i, n in zip(index, shape):
        flat = flat * n + i
    return info.offset + flat


_LABEL = re.compile(r"(.+)\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]")


def _resolve_chain_params(chain, params) -> Tensor:
    space = chain.space
    if isinstance(params, str):
        params = [params]
    if isinstance(params, Tensor) or (isinstance(params, Sequence) and params and not isinstance(params[0], str)):
        return torch.as_tensor(params, dtype=torch.long).reshape(-1)
    idx = []
    for p in params:
        element = _element_index(space, p)  # a label as summary prints it, "2.bias[0]"
        if element is not None:
            idx.append(torch.tensor([element]))
            continue
        infos = [space[p]] if p in space.names else [i for i in space.params if fnmatch.fnmatchcase(i.name, p)]
        if not infos:
            raise KeyError(f"no parameter matches {p!r}; names: {space.names}")
        for info in infos:
            idx.append(torch.arange(info.offset, info.offset + info.numel))
    return torch.cat(idx) if idx else torch.empty(0, dtype=torch.long)


def select_random(obj, k: int, seed: int = 0) -> Tensor:
    """``k`` distinct flat parameter indices drawn uniformly with a seeded generator, sorted.

    ``obj`` is a Chain, a ``[C, D, ...]`` tensor or the dimension P itself.
    """
    P = obj if isinstance(obj, int) else (obj.dim if _is_chain(obj) else as_draws(obj)[0, 0].numel())
    g = torch.Generator().manual_seed(int(seed))
    return torch.randperm(P, generator=g)[: min(int(k), P)].sort().values


def select_top_variance(obj, k: int, chunk: int | None = None) -> Tensor:
    """Flat indices of the ``k`` parameters with the largest pooled posterior variance
    (where the chains move most), in decreasing order of variance."""
    x = as_draws(obj)
    xf = x.reshape(x.shape[0] * x.shape[1], -1)
    P = xf.shape[1]
    step = chunk or max(1, 2**24 // max(1, xf.shape[0]))
    var = torch.cat([xf[:, i : i + step].var(dim=0) for i in range(0, P, step)])
    return var.topk(min(int(k), P)).indices.cpu()


def select_draws(
    obj, params=None, *, max_default: int | None = None, name: str = "x", labels: Sequence[str] | None = None
) -> tuple[Tensor, list[str]]:
    """``(x [C, D, k], labels)`` for the selected rows of a Chain or a ``[C, D, ...]`` tensor
    (``params`` as in :func:`summary`; ``None`` takes the first ``max_default`` rows, or all;
    ``params`` selecting more than ``max_default`` rows keeps the first ``max_default``, with a
    warning)."""
    if _is_chain(obj):
        x = as_draws(obj.samples)
        idx = torch.arange(obj.dim) if params is None else _resolve_chain_params(obj, params)
        if params is None and max_default is not None:
            idx = idx[:max_default]
        lab = list(labels) if labels is not None else param_labels(obj.space, idx)
    else:
        x = as_draws(obj)
        trailing = tuple(x.shape[2:])
        x = x.reshape(x.shape[0], x.shape[1], -1)
        idx = torch.arange(x.shape[2]) if params is None else torch.as_tensor(params, dtype=torch.long).reshape(-1)
        if params is None and max_default is not None:
            idx = idx[:max_default]
        if labels is not None:
            lab = list(labels)
        elif trailing == ():
            lab = [name]
        else:
            lab = [f"{name}[{_multi_index(int(i), trailing)}]" for i in idx.tolist()]
    if len(lab) != idx.numel():
        raise ValueError(f"got {len(lab)} labels for {idx.numel()} rows")
    if params is not None and max_default is not None and idx.numel() > max_default:
        warnings.warn(
            f"params selects {idx.numel()} rows: the first {max_default} are plotted (max_params={max_default}); "
            f"pass max_params={idx.numel()} to plot them all",
            UserWarning,
            stacklevel=3,
        )
        idx, lab = idx[:max_default], lab[:max_default]
    x = x.reshape(x.shape[0], x.shape[1], -1)[:, :, idx.to(x.device)]
    return x, lab


@dataclass
class Summary:
    """Per-row statistics: ``stats[column]`` is a ``[rows]`` tensor; ``labels[row]`` names it."""

    labels: list[str]
    stats: dict[str, Tensor]
    num_chains: int = 0
    num_draws: int = 0
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, column: str) -> Tensor:
        return self.stats[column]

    @property
    def columns(self) -> list[str]:
        return list(self.stats)

    def to_dict(self) -> dict[str, list]:
        d = {"label": list(self.labels)}
        d.update({k: v.tolist() for k, v in self.stats.items()})
        return d

    def row(self, label: str) -> dict[str, float]:
        i = self.labels.index(label)
        return {k: float(v[i]) for k, v in self.stats.items()}

    def __str__(self) -> str:
        fmt = {"ess_bulk": "{:.0f}", "ess_tail": "{:.0f}", "rhat": "{:.3f}", "iac": "{:.2f}"}
        cols = self.columns
        cells = [
            [lab] + [fmt.get(c, "{:.4g}").format(float(self.stats[c][i])) for c in cols]
            for i, lab in enumerate(self.labels)
        ]
        header = ["param"] + cols
        widths = [max(len(r[j]) for r in cells + [header]) for j in range(len(header))]

        def line(r):
            return "  ".join([r[0].ljust(widths[0])] + [r[j].rjust(widths[j]) for j in range(1, len(r))])

        out = [line(header)] + [line(r) for r in cells]
        out.append(
            f"({self.num_chains} chains x {self.num_draws} draws; ESS: rank-normalised Geyer (Vehtari et al. 2021), "
            f"R-hat: rank-normalised split, IAC: Sokal window c=5)"
        )
        out.extend(self.notes)
        return "\n".join(out)

    def __repr__(self) -> str:
        return f"Summary(rows={len(self)}, columns={self.columns})"


def summary(
    obj,
    params=None,
    *,
    labels: Sequence[str] | None = None,
    name: str = "x",
    quantiles: Sequence[float] = (0.05, 0.5, 0.95),
    max_rows: int = 1000,
    chunk: int | None = None,
    scalar: bool = False,
) -> Summary:
    """Summary table: mean, sd, quantiles (default 5/50/95%, type 7), bulk and tail ESS
    (Vehtari et al. 2021), rank-normalised split R-hat and Sokal IAC, per selected quantity.

    ``obj`` is a Chain or a tensor ``[C, D, ...]`` (chains first, then draws, as in ArviZ and
    NumPyro), e.g. ``structmc.predictive(energy, chain, X, per_draw=True)["probs"]``, ``[C,
    D, n, K]``: the class probabilities of n test inputs under each draw (function-space
    diagnostics; the default ``predictive`` output is their average ``[n, K]``, not draws).
    A 2-D tensor is the one ambiguous layout (the ``[C, D]`` draws of one scalar, or per-input
    values such as ``[n, K]`` probabilities that would silently be read as n chains of K draws):
    it is refused unless ``scalar=True`` declares it ``[chains, draws]``. ``params``: for a
    Chain, parameter names, the labels the table prints (``"2.bias[0]"``, one element), shell
    patterns (``"fc1.*"``) or flat indices; for a tensor, flat indices into ``...``.

    ``None`` takes every row up to ``max_rows``. Past it (a whole network), the mixing
    diagnostics are computed for every row and the table keeps the ``max_rows`` worst-mixing
    rows, worst first (ordered by the smaller of bulk and tail ESS; a row whose ESS or R-hat is
    NaN, e.g. a coordinate that never moves, counts as worst); ``notes`` (printed under the table) say so and
    give, per parameter tensor of a Chain (for a tensor: over all rows), the smallest bulk and
    tail ESS and the largest R-hat. ``summary(chain, max_rows=20)`` is a quick convergence
    check; pick other rows with ``params``, :func:`select_random` or
    :func:`select_top_variance`.
    """
    max_rows = check_int("max_rows", max_rows, minimum=1)
    _check_layout(obj, scalar)
    if params is None:
        rows = obj.dim if _is_chain(obj) else as_draws(obj)[0, 0].numel()
        if rows > max_rows:
            return _worst_rows(obj, rows, labels=labels, name=name, quantiles=quantiles, max_rows=max_rows, chunk=chunk)
    x, row_labels = select_draws(obj, params, name=name, labels=labels)
    pooled = x.reshape(-1, x.shape[2])
    qs = _quantiles(pooled, quantiles, dim=0)
    stats = {
        "mean": pooled.mean(dim=0),
        "sd": pooled.std(dim=0) if pooled.shape[0] > 1 else torch.zeros_like(pooled[0]),
    }
    for q, v in zip(quantiles, qs):
        stats[f"q{100 * q:g}"] = v
    stats.update(mixing(x, chunk=chunk))
    stats = {k: v.detach().cpu() for k, v in stats.items()}
    return Summary(row_labels, stats, num_chains=x.shape[0], num_draws=x.shape[1])


def _check_layout(obj, scalar) -> None:
    """A 2-D tensor is summarised only when ``scalar=True`` says it is ``[chains, draws]``."""
    if not isinstance(scalar, bool):
        raise TypeError(f"scalar must be True or False, got {scalar!r}")
    if _is_chain(obj):
        return
    shape = tuple(as_draws(obj).shape)
    if len(shape) == 2 and not scalar:
        raise ValueError(
            f"summary reads a tensor as [chains, draws, ...]; a 2-D tensor {list(shape)} would be "
            f"{shape[0]} chains x {shape[1]} draws of one scalar. If it is, pass scalar=True; if it holds "
            f"per-input values (e.g. predictive(...)['probs'] [n, K], an average over draws), summarise "
            f"the draws instead: predictive(energy, chain, X, per_draw=True)['probs'] is [C, D, n, K]"
        )


def _worst_rows(obj, rows: int, *, labels, name, quantiles, max_rows: int, chunk) -> Summary:
    """``summary`` of the ``max_rows`` rows with the smallest min(bulk ESS, tail ESS), worst first,
    with per-tensor (Chain) or overall (tensor) worst values in the notes."""
    if labels is not None and len(labels) != rows:
        raise ValueError(f"got {len(labels)} labels for {rows} rows")
    x = as_draws(obj.samples if _is_chain(obj) else obj)
    x = x.reshape(x.shape[0], x.shape[1], -1)
    mix = mixing(x, chunk=chunk)
    ess = torch.minimum(mix["ess_bulk"], mix["ess_tail"]).cpu()
    stuck = torch.isnan(ess) | torch.isnan(mix["rhat"].cpu())  # e.g. a coordinate that never moves
    ess = torch.where(stuck, torch.full_like(ess, -math.inf), ess)
    order = torch.argsort(ess, stable=True)[:max_rows]
    table = summary(
        obj,
        order,
        labels=None if labels is None else [labels[i] for i in order.tolist()],
        name=name,
        quantiles=quantiles,
        chunk=chunk,
    )
    table.notes.append(
        f"{rows} rows > max_rows={max_rows}: the {max_rows} with the smallest ESS "
        "(min of bulk and tail), worst first; choose rows with params=, select_random() or "
        "select_top_variance(), or raise max_rows"
    )
    groups = (
        [(info.name, info.offset, info.numel) for info in obj.space.params]
        if _is_chain(obj)
        else [(f"all {rows} rows", 0, rows)]
    )
    width = max(len(g[0]) for g in groups)
    table.notes.append(f"{'tensor'.ljust(width)}  min ess_bulk  min ess_tail  max rhat")
    for label, start, n in groups:
        part = {k: v[start : start + n].cpu() for k, v in mix.items()}
        worst_rhat = float("nan") if torch.isnan(part["rhat"]).any() else float(part["rhat"].max())
        table.notes.append(
            f"{label.ljust(width)}  {_nanmin(part['ess_bulk']):>12.0f}  {_nanmin(part['ess_tail']):>12.0f}"
            f"  {worst_rhat:>8.3f}"
        )
    return table


def _nanmin(v: Tensor) -> float:
    return float("nan") if torch.isnan(v).any() else float(v.min())
