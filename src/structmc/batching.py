"""Minibatch streams: one independent minibatch per chain, drawn from the run's generator.

Modes
-----
``"epoch"`` (default)
    Each chain reshuffles the data every epoch and walks through its permutation in slices of
    ``batch_size``; the last partial batch of an epoch is dropped, so every batch has the same
    size and ``steps_per_epoch = N // batch_size``.
``"with_replacement"``
    Every step draws ``batch_size`` indices uniformly with replacement (MAMBA reference code).
``"without_replacement"``
    Every step draws a fresh uniform subset (i.i.d. across steps, no repeats within a batch).
``"stratified"``
    Class-stratified subsets (the blocked-Gibbs reference code): every step draws, without
    replacement, n_c points of each class c of the last data tensor (integer labels), with
    n_c proportional to the class's share of the data (largest remainders, so Σ n_c = n).

All three give an unbiased minibatch energy. ``batch_size=None`` (or N) uses the full data.
Batches are tuples of ``[C, n, ...]`` tensors, gathered with ``index_select`` into buffers
that are reused from step to step (measured ~7x faster than advanced indexing on CPU): a
batch is valid until the next call to ``next``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

MODES = ("epoch", "with_replacement", "without_replacement", "stratified")


class MinibatchStream:
    def __init__(
        self,
        data: Sequence[Tensor],
        batch_size: int | None,
        num_chains: int,
        generator: torch.Generator,
        mode: str = "epoch",
    ):
        self.data = tuple(data)
        self._init_law(int(self.data[0].shape[0]), batch_size, num_chains, generator, mode, self.data[0].device)
        self._buffers = tuple(t.new_empty((num_chains * self.batch_size, *t.shape[1:])) for t in self.data)
        self._views = tuple(buf.view(num_chains, self.batch_size, *buf.shape[1:]) for buf in self._buffers)
        if self.full:
            self._full_batch = tuple(t.unsqueeze(0).expand(num_chains, *t.shape) for t in self.data)
        if mode == "stratified":
            self._strata = _strata(self.data[-1], self.batch_size)

    def _init_law(
        self, num_data: int, batch_size: int | None, num_chains: int, generator: torch.Generator, mode: str, device
    ) -> None:
        """What the index draws need (shared with :class:`DatasetStream`)."""
        if mode not in MODES:
            raise ValueError(f"batching must be one of {MODES}, got {mode!r}")
        self.num_data = num_data
        self.batch_size = num_data if batch_size is None else int(batch_size)
        self.full = self.batch_size == num_data and mode != "with_replacement"
        self.num_chains, self.generator, self.mode = num_chains, generator, mode
        self.device = torch.device(device)
        self.steps_per_epoch = max(1, num_data // self.batch_size)
        self._perm: Tensor | None = None  # [C, N] current epoch's order
        self._pos = 0

    def _new_epoch(self) -> None:
        C, N = self.num_chains, self.num_data
        if C == 1:
            self._perm = torch.randperm(N, generator=self.generator, device=self.device).unsqueeze(0)
        else:  # one independent permutation per chain in one op
            self._perm = torch.rand(C, N, generator=self.generator, device=self.device).argsort(dim=1)
        self._pos = 0

    def _gather(self, idx: Tensor) -> tuple[Tensor, ...]:
        """``idx [C, n]`` -> tuple of ``[C, n, ...]`` batches, written into the reused buffers
        (the same tuple of views every step: no per-step view objects)."""
        flat = idx.reshape(-1)
        for t, buf in zip(self.data, self._buffers):
            torch.index_select(t, 0, flat, out=buf)
        return self._views

    def next(self) -> tuple[Tensor, ...]:
        if self.full:
            return self._full_batch
        return self._gather(self._next_indices())

    @property
    def full_batch(self) -> tuple[Tensor, ...]:
        """Every row for every chain (``[C, N, ...]`` expanded views): the batch :meth:`next`
        returns when the batch is the whole data set (``full``)."""
        return self._full_batch

    def next_indices(self) -> Tensor | None:
        """The next batch's ``[C, n]`` indices (``None`` for the full batch), drawn as
        :meth:`next` draws them, without gathering the rows (the compiled step gathers them)."""
        return None if self.full else self._next_indices()

    def _next_indices(self) -> Tensor:
        """``[C, n]`` indices of the next batch, drawn from the run's generator (the batching law)."""
        C, N, n = self.num_chains, self.num_data, self.batch_size
        if self.mode == "with_replacement":
            return torch.randint(N, (C, n), generator=self.generator, device=self.device)
        if self.mode == "without_replacement":
            return torch.rand(C, N, generator=self.generator, device=self.device).argsort(dim=1)[:, :n]
        if self.mode == "stratified":
            parts = [
                members[
                    torch.rand(C, members.numel(), generator=self.generator, device=self.device).argsort(dim=1)[
                        :, :count
                    ]
                ]
                for members, count in self._strata
            ]
            return torch.cat(parts, 1)
        if self._perm is None or self._pos + n > N:
            self._new_epoch()
        assert self._perm is not None  # set by _new_epoch
        lo, hi = self._pos, self._pos + n
        self._pos = hi
        return self._perm[:, lo:hi]

    def _upcoming_indices(self) -> Tensor | None:
        """The indices the next call will use when they are already fixed without a random
        draw (epoch mode inside an epoch), else ``None``: what a prefetch may fetch early."""
        if self.mode != "epoch" or self._perm is None or self._pos + self.batch_size > self.num_data:
            return None
        return self._perm[:, self._pos : self._pos + self.batch_size]

    # -- checkpointing ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"perm": None if self._perm is None else self._perm.cpu(), "pos": self._pos}

    def load_state_dict(self, state: dict) -> None:
        perm = state["perm"]
        self._pos = int(state["pos"])
        self._perm = None if perm is None else perm.to(self.device)


def _strata(labels: Tensor, batch_size: int) -> list[tuple[Tensor, int]]:
    """``[(indices of class c, n_c)]`` with n_c ∝ the class share, Σ n_c = ``batch_size``."""
    if labels.dim() != 1 or labels.is_floating_point() and not bool((labels == labels.round()).all()):
        raise ValueError("stratified batching needs integer class labels as the last data tensor")
    classes, counts = torch.unique(labels, return_counts=True)
    N = labels.numel()
    exact = counts.double() * batch_size / N
    take = exact.floor().long()
    short = batch_size - int(take.sum())
    if short:
        take[torch.argsort(exact - take, descending=True)[:short]] += 1
    return [(torch.nonzero(labels == c).flatten(), int(k)) for c, k in zip(classes, take) if int(k) > 0]


class DataSource:
    """Data for :func:`structmc.sample` / :class:`structmc.Run` that need not sit in device
    memory, or that gets a per-batch transform.

    ``data``: a map-style ``torch.utils.data.Dataset`` (items collated by ``collate_fn``,
    default ``torch.utils.data.default_collate``, into ``(inputs..., targets)``) or a tuple of
    tensors. Per-chain index batches are drawn exactly as for in-memory tensors (same batching
    laws, same random stream, same resume), gathered on the CPU by the dataset, pinned and
    copied to the run's device without blocking; with ``prefetch=True`` the next batch is
    gathered by a background thread while the current step runs, whenever its indices are
    already fixed (``batching="epoch"`` inside an epoch; the other laws draw indices at the
    step itself, so prefetching them would change the random stream).

    ``transform(batch, generator) -> batch``: applied to every minibatch on the device (random
    crops, flips); its random numbers come from the run's generator, so runs stay
    reproducible. ``labels``: the class labels ``[N]`` for ``batching="stratified"`` (default:
    the dataset's ``targets`` attribute).
    """

    def __init__(self, data, *, collate_fn=None, transform=None, prefetch: bool = True, labels: Tensor | None = None):
        from torch.utils.data import Dataset

        if isinstance(data, Tensor):
            data = (data,)
        if hasattr(data, "tensors"):  # TensorDataset: the in-memory path
            data = tuple(data.tensors)
        self.tensors = tuple(data) if isinstance(data, (tuple, list)) else None
        self.dataset = None if self.tensors is not None else data
        if self.dataset is not None and not (isinstance(data, Dataset) or hasattr(data, "__getitem__")):
            raise TypeError(f"data must be a map-style Dataset or tensors, got {type(data).__name__}")
        if self.dataset is not None and not hasattr(data, "__len__"):
            raise TypeError("an iterable-style dataset has no length: use a map-style Dataset (with __len__)")
        if transform is not None and not callable(transform):
            raise TypeError("transform must be a callable transform(batch, generator) -> batch")
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError("collate_fn must be callable")
        self.collate_fn, self.transform, self.prefetch, self.labels = collate_fn, transform, bool(prefetch), labels
        if labels is not None:
            self._check_labels(torch.as_tensor(labels), "DataSource(labels=...)")

    def _check_labels(self, labels: Tensor, which: str) -> Tensor:
        """One class label per item: a shorter vector would silently confine stratified batches
        to its first rows."""
        if labels.dim() != 1 or labels.shape[0] != len(self):
            raise ValueError(
                f"{which} must hold one class label per item, shape [{len(self)}], got shape {list(labels.shape)}"
            )
        return labels

    def __len__(self) -> int:
        if self.tensors is not None:
            return int(self.tensors[0].shape[0])
        assert self.dataset is not None  # exactly one of tensors and dataset is set
        return len(self.dataset)

    def collate(self, indices) -> tuple[Tensor, ...]:
        """The items at ``indices`` (a list of ints) as a tuple of tensors ``[len, ...]``."""
        from torch.utils.data import default_collate

        assert self.dataset is not None, "collate reads items of a Dataset; in-memory tensors are sliced directly"
        getitems = getattr(self.dataset, "__getitems__", None)
        items = getitems(indices) if getitems is not None else [self.dataset[i] for i in indices]
        batch = (self.collate_fn or default_collate)(items)
        if isinstance(batch, Tensor):
            batch = (batch,)
        if (
            isinstance(batch, dict)
            or not isinstance(batch, (tuple, list))
            or not all(isinstance(t, Tensor) for t in batch)
        ):
            raise ValueError(
                "the dataset's items must collate into a tuple of tensors (inputs..., targets); give a "
                "collate_fn that returns one"
            )
        return tuple(batch)

    def probe(self, rows: int = 8) -> tuple[Tensor, ...]:
        """The first ``rows`` items, collated (checks before any compute)."""
        if self.tensors is not None:
            return tuple(t[:rows] for t in self.tensors)
        if len(self) < 1:
            raise ValueError(
                f"the Dataset ({type(self.dataset).__name__}) is empty (len 0): sampling needs at least one "
                "item; check the dataset's path, split or filter"
            )
        return self.collate(list(range(min(rows, len(self)))))


class DatasetStream(MinibatchStream):
    """:class:`MinibatchStream`'s batching over a :class:`DataSource` dataset: the same index
    draws, items gathered on the CPU and moved to ``device`` (pinned, non-blocking), the next
    batch prefetched in a background thread when its indices are already fixed."""

    def __init__(
        self,
        source: DataSource,
        batch_size: int | None,
        num_chains: int,
        generator: torch.Generator,
        mode: str = "epoch",
        device: torch.device | str = "cpu",
    ):
        self.source = source
        self._init_law(len(source), batch_size, num_chains, generator, mode, device)
        self._pin = self.device.type == "cuda"
        self._pool: ThreadPoolExecutor | None = None
        self._pending: tuple[Tensor, Future[tuple[Tensor, ...]]] | None = None  # (indices, future)
        if self.full:
            whole = self._fetch(torch.arange(self.num_data).unsqueeze(0))
            self._full_batch = tuple(t.expand(num_chains, *t.shape[1:]) for t in whole)
        if mode == "stratified":
            self._stratify()

    def _stratify(self) -> None:
        """The class strata of ``batching="stratified"``, from the dataset's labels."""
        source = self.source
        labels = source.labels if source.labels is not None else getattr(source.dataset, "targets", None)
        if labels is None:
            raise ValueError(
                "stratified batching over a Dataset needs its class labels: DataSource(dataset, "
                "labels=...) or a dataset with a 'targets' attribute"
            )
        which = "DataSource(labels=...)" if source.labels is not None else "the dataset's 'targets'"
        labels = source._check_labels(torch.as_tensor(labels), which)
        self._strata = _strata(labels.to(self.device), self.batch_size)

    def _selected(self, idx: Tensor) -> Tensor:
        """The columns of a batch's ``[C, n]`` indices this stream fetches: all of them (a
        distributed run's stream fetches only its rank's share)."""
        return idx

    def _fetch(self, idx: Tensor) -> tuple[Tensor, ...]:
        C, n = idx.shape
        cols = self.source.collate(idx.reshape(-1).tolist())
        out = []
        for t in cols:
            t = t.reshape(C, n, *t.shape[1:])
            if self._pin:
                t = t.pin_memory()
            out.append(t.to(self.device, non_blocking=True))
        return tuple(out)

    def next(self) -> tuple[Tensor, ...]:
        if self.full:
            batch = self._full_batch
        else:
            idx = self._selected(self._next_indices())
            pending, self._pending = self._pending, None
            if pending is not None and pending[0].shape == idx.shape and torch.equal(pending[0], idx):
                batch = pending[1].result()
            else:
                batch = self._fetch(idx)
            upcoming = self._upcoming_indices() if self.source.prefetch else None
            if upcoming is not None:
                upcoming = self._selected(upcoming)
                if self._pool is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="structmc-prefetch")
                upcoming = upcoming.clone()
                self._pending = (upcoming, self._pool.submit(self._fetch, upcoming))
        if self.source.transform is not None:
            batch = tuple(self.source.transform(batch, self.generator))
        return batch

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._pending = None

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


class TransformedStream(MinibatchStream):
    """In-memory tensors with a per-batch ``transform(batch, generator)``."""

    def __init__(self, data, batch_size, num_chains, generator, mode, transform):
        super().__init__(data, batch_size, num_chains, generator, mode)
        self.transform = transform

    def next(self):
        return tuple(self.transform(super().next(), self.generator))


def default_stream(source, data, batch_size, num_chains, generator, batching, device):
    """A run's minibatch stream: a Dataset's, a transformed one, in-memory tensors' or none."""
    if source is not None and source.dataset is not None:
        return DatasetStream(source, batch_size, num_chains, generator, batching, device)
    if data is not None and source is not None and source.transform is not None:
        return TransformedStream(data, batch_size, num_chains, generator, batching, source.transform)
    return MinibatchStream(data, batch_size, num_chains, generator, batching) if data is not None else None
