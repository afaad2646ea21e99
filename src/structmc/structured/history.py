"""The chain's own past samples: the θ̃ source of structured SGMCMC.

:class:`ChainHistory` keeps, per chain, up to ``capacity`` past positions in one
``[C, W, P]`` buffer on the chain's device, optionally in a lower precision (bfloat16 halves
the memory; draws are cast back to the chain's dtype).

* ``mode="window"``: the last W stored samples (FIFO ring buffer).
* ``mode="reservoir"``: a uniform sample of all stored positions so far (Vitter's Algorithm
  R), i.e. θ̃ is drawn from the whole chain, not just its recent past.
* ``thin``: only every ``thin``-th observed position is stored.

Before the buffer is full, draws are uniform over the samples stored so far (the reference
code's ``randint(W) % count`` over-weights early samples; we do not). The first observed
position (the chain's start) is stored, so a draw is always possible.

Drawing: for every chain, copy k and group g an independent time index
t ~ U{0..count-1}; parameter j of copy k takes the value of slot t[k, group(j)] — one
``torch.gather`` over the buffer, no Python loop. With ``group_ids`` given to ``reset``, the
buffer stores parameters sorted by group, so the gather reads contiguous runs instead of
jumping between rows at every element (2.5x faster for a round-robin partition of an MLP,
bench/bench_structured.py); draws come back in the original order. When every group is at
least ``MIN_ROW`` parameters long and padding each group to the longest costs at most
``MAX_PADDING`` extra memory, the buffer stores each group as one padded row
(``[C, W, M·L]``), and a draw copies K·M whole rows (``index_select`` with a K·M index instead
of a K·P one): 6x faster for K = 8 copies, 2 chains, 64 groups of an MLP with P = 42,310.
Draws are the same values either way; checkpoints hold the group-sorted layout.

Memory: the buffer holds capacity x C x P numbers (4 bytes each in float32), e.g. 6.4 GB for
``ChainHistory(5000)`` with 4 chains of a 784-100-10 MLP (P = 79,510). A buffer above
``WARN_BYTES`` (2 GiB) warns when it is allocated, with its size and the ways to shrink it:
a smaller ``capacity`` (with ``thin`` to span the same stretch of the chain, or
``mode="reservoir"`` to draw from the whole chain), ``dtype=torch.bfloat16``, fewer chains.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from ..schedules import check_int


class ChainHistory:
    MIN_ROW = 8  # shortest group for the padded-row layout (shorter rows do not pay)
    MAX_PADDING = 0.25  # most extra memory the padded-row layout may cost, relative to P
    WARN_BYTES = 2 * 2**30  # a buffer larger than this warns when it is allocated (see _check_memory)

    def __init__(self, capacity: int, *, mode: str = "window", thin: int = 1, dtype: torch.dtype | None = None):
        if check_int("capacity", capacity) < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if mode not in ("window", "reservoir"):
            raise ValueError(f"mode must be 'window' or 'reservoir', got {mode!r}")
        if check_int("thin", thin) < 1:
            raise ValueError(f"thin must be >= 1, got {thin}")
        self.capacity, self.mode, self.thin, self.storage_dtype = int(capacity), mode, int(thin), dtype
        self.buffer: Tensor | None = None  # [C, W, P]
        self.count = 0  # filled slots
        self._order: Tensor | None = None  # group-sorted layout: the sort, its inverse, the sorted ids
        self._inverse: Tensor | None = None
        self._sorted_ids: Tensor | None = None
        # padded-row layout: (M, L, original j -> padded position, sorted -> padded)
        self._rows: tuple[int, int, Tensor, Tensor] | None = None
        self.seen = 0  # positions offered to the store (after thinning)
        self.observed = 0  # positions observed (before thinning)
        self._next = 0  # window: slot to overwrite next

    def empty_copy(self) -> ChainHistory:
        """A new, empty store with the same settings."""
        return ChainHistory(self.capacity, mode=self.mode, thin=self.thin, dtype=self.storage_dtype)

    def reset(self, theta: Tensor, group_ids: Tensor | None = None) -> None:
        """Empty the store for chains shaped like ``theta [C, P]`` and store ``theta``.
        ``group_ids`` (the partition draws will use) selects the group-sorted layout."""
        C, P = theta.shape
        self.count = self.seen = self.observed = self._next = 0
        self._set_layout(group_ids, theta.device)
        self.buffer = self._new_buffer(C, P, self.storage_dtype or theta.dtype, theta.device)
        self.push(theta)

    def _new_buffer(self, C: int, P: int, dtype, device) -> Tensor:
        width = P if self._rows is None else self._rows[0] * self._rows[1]
        self._check_memory(C, P, width, dtype)
        return torch.zeros(C, self.capacity, width, dtype=dtype, device=device)  # padding stays 0

    def _check_memory(self, C: int, P: int, width: int, dtype) -> None:
        """Warns, before allocating, when the buffer (capacity x chains x width x bytes) is
        larger than ``WARN_BYTES``, with the ways to shrink it."""
        item = torch.empty((), dtype=dtype).element_size()
        size = C * self.capacity * width * item
        if size <= self.WARN_BYTES:
            return
        pad = "" if width == P else f" (P = {P:,} padded to {width:,} for the group-row layout)"
        half = (
            ""
            if item <= 2
            else f"; dtype=torch.bfloat16 (or torch.float16) divides it by {item // 2} (draws are "
            "cast back to the chain's dtype)"
        )
        warnings.warn(
            f"ChainHistory: the θ̃ history takes {size / 2**30:.3g} GiB = capacity {self.capacity:,} x "
            f"{C} chains x {width:,} parameters{pad} x {item} bytes. To reduce it: a smaller capacity "
            f"(ChainHistory({max(1, self.capacity // 10):,}, thin=10) spans the same stretch of the chain; "
            f"mode='reservoir' draws from the whole chain at any capacity){half}; or fewer chains",
            UserWarning,
            stacklevel=4,
        )

    def _set_layout(self, group_ids: Tensor | None, device) -> None:
        self._rows = None
        if group_ids is None:
            self._order = self._inverse = self._sorted_ids = None
            return
        group_ids = group_ids.to(device)
        self._order = torch.argsort(group_ids, stable=True)
        self._inverse = torch.argsort(self._order)
        self._sorted_ids = group_ids[self._order]
        sizes = torch.bincount(group_ids)
        M, L, P = sizes.numel(), int(sizes.max()), group_ids.numel()
        if int(sizes.min()) >= self.MIN_ROW and M * L <= (1 + self.MAX_PADDING) * P:
            start = torch.cumsum(sizes, 0) - sizes
            padded_of_sorted = torch.arange(P, device=device) - start[self._sorted_ids] + self._sorted_ids * L
            self._rows = (M, L, padded_of_sorted[self._inverse], padded_of_sorted)

    def push(self, theta: Tensor, generator: torch.Generator | None = None) -> None:
        if self.buffer is None:
            self.reset(theta)
            return
        self.observed += 1
        if (self.observed - 1) % self.thin:
            return
        self.seen += 1
        if self.count < self.capacity:
            slot = self.count
            self.count += 1
        elif self.mode == "window":
            slot = self._next
        else:  # reservoir: keep the new sample with probability W / seen
            j = int(torch.randint(self.seen, (1,), generator=generator, device=theta.device))
            if j >= self.capacity:
                return
            slot = j
        if self._rows is not None:
            self.buffer[:, slot].index_copy_(1, self._rows[2], theta.to(self.buffer.dtype))
        else:
            self.buffer[:, slot].copy_(theta if self._order is None else theta[:, self._order])
        self._next = (slot + 1) % self.capacity

    def draw(
        self,
        num_copies: int,
        group_ids: Tensor,
        num_groups: int,
        generator: torch.Generator | None,
        dtype: torch.dtype | None = None,
    ) -> Tensor:
        """θ̃ for ``num_copies`` copies: ``[C, K, P]``, an independent past time per group."""
        return self.gather(self.draw_times(num_copies, num_groups, generator), group_ids, dtype)

    def draw_times(self, num_copies: int, num_groups: int, generator: torch.Generator | None) -> Tensor:
        """The past times ``[C, K, M]`` of :meth:`draw` (its random part)."""
        if self.buffer is None:
            raise RuntimeError("the history is empty: call reset(theta) first")
        return torch.randint(
            self.count, (self.buffer.shape[0], num_copies, num_groups), generator=generator, device=self.buffer.device
        )

    def gather(self, times: Tensor, group_ids: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """θ̃ ``[C, K, P]`` at the past ``times`` ``[C, K, M]`` of each group (:meth:`draw`'s
        deterministic part: the compiled step traces it)."""
        assert self.buffer is not None  # draw_times refuses an empty history
        C, num_copies = times.shape[0], times.shape[1]
        if self._rows is not None:  # K·M whole rows: row (c, t, g) of the [C·W·M, L] view
            M, L, padded_of_original, _ = self._rows
            W = self.capacity
            chain = torch.arange(C, device=times.device).view(C, 1, 1) * W
            flat = ((chain + times) * M + torch.arange(M, device=times.device)).reshape(-1)
            rows = self.buffer.view(C * W * M, L).index_select(0, flat).view(C, num_copies, M * L)
            out = rows[:, :, padded_of_original]
        elif self._order is None:
            out = torch.gather(self.buffer, 1, times[:, :, group_ids.to(times.device)])  # index [C, K, P]
        else:
            out = torch.gather(self.buffer, 1, times[:, :, self._sorted_ids])[:, :, self._inverse]
        return out if dtype is None else out.to(dtype)

    def _stored(self) -> Tensor:
        """The filled slots in the group-sorted layout (the checkpoint format)."""
        assert self.buffer is not None  # state_dict asks only a store that has one
        filled = self.buffer[:, : self.count]
        return filled if self._rows is None else filled[:, :, self._rows[3]]

    def state_dict(self) -> dict:
        return {
            "buffer": None if self.buffer is None else self._stored().cpu(),
            "count": self.count,
            "seen": self.seen,
            "observed": self.observed,
            "next": self._next,
            # _order, _inverse and _sorted_ids are set together (_set_layout)
            "group_ids": None if self._sorted_ids is None else self._sorted_ids[self._inverse].cpu(),
        }

    def load_state_dict(self, state: dict, device=None) -> None:
        buf = state["buffer"]
        self._set_layout(state.get("group_ids"), device)
        if buf is None:
            self.buffer = None
        else:
            C, n, P = buf.shape
            self.buffer = self._new_buffer(C, P, buf.dtype, device)
            if self._rows is None:
                self.buffer[:, :n].copy_(buf.to(device))
            else:
                self.buffer[:, :n].index_copy_(2, self._rows[3], buf.to(device))
        self.count, self.seen, self.observed, self._next = (
            state["count"],
            state["seen"],
            state["observed"],
            state["next"],
        )

    def memory_bytes(self) -> int:
        return 0 if self.buffer is None else self.buffer.numel() * self.buffer.element_size()
