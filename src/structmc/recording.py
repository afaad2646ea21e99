"""Parts the run loop uses: the per-iteration log, the draw recorder, the progress display.

Each is small and owns one job, so that :func:`structmc.sample` reads as the loop it is and
other drivers (tuning arms, Gibbs sweeps) can reuse them.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from numbers import Number

import torch
from torch import Tensor

from .chain import Chain
from .space import ParamSpace
from .storage import RunFolder, concat_info


class InfoLog:
    """Per-iteration records, whatever keys the sampler's ``info`` and the loop provide.

    A tensor value of shape ``[C]`` (or any shape) becomes ``[..., S]`` (e.g. ``energy [C, S]``);
    a Python number becomes ``[S]``. Kept cheap in the hot loop: values are appended to lists
    and tensors are copied to the CPU in blocks of ``BLOCK`` iterations (one copy per block,
    not per step, so no per-step device-to-host transfer).

    With a run ``folder`` the records are streamed to ``folder/info`` in chunks of about
    ``WRITE_EVERY`` iterations; a checkpoint holds only the records not yet in a chunk
    (:meth:`tail`), so neither a checkpoint nor, with ``keep=False``, memory grows with the
    number of iterations.
    """

    BLOCK = 256
    WRITE_EVERY = 4096

    def __init__(self, folder: RunFolder | None = None, *, keep: bool = True):
        self.folder, self.keep = folder, keep or folder is None
        self._clear()

    def _clear(self) -> None:
        """No records, nothing written, no ``before_write`` (what :meth:`restore` and :meth:`load`
        start from)."""
        self._done: dict[str, list[Tensor]] = {}  # finished blocks on the CPU, iterations [base, count)
        self._pending: dict[str, list] = {}
        self._count = 0  # iterations appended
        self._pending_count = 0
        self._base = 0  # first iteration held in memory (records before it are only on disk)
        self._written = 0  # iterations written to the folder
        self._chunks = 0  # info chunks written
        self.before_write: Callable[[], None] | None = (
            None  # called before records go to disk (the run loop's NaN/Inf check)
        )

    def __len__(self) -> int:
        return self._count

    def append(self, info: dict) -> None:
        if info.keys() != self._pending.keys():
            self._new_keys(info)
        for key, value in info.items():
            self._pending[key].append(value)
        self._count += 1
        self._pending_count += 1
        if self._pending_count >= self.BLOCK:
            self._flush()
            if self.folder is not None and self._count - self._written >= self.WRITE_EVERY:
                self.write()

    def _new_keys(self, info: dict) -> None:
        """A key missing from earlier iterations (a record restored from an older checkpoint)
        is back-filled with NaN; a key that stops appearing is an error."""
        gone = self._pending.keys() - info.keys()
        if gone:
            raise ValueError(f"info records must have the same keys every iteration; missing now: {sorted(gone)}")
        self._flush()
        held = self._count - self._base
        for key in info.keys() - self._pending.keys():
            self._pending[key] = []
            if held:
                shape = tuple(info[key].shape) if isinstance(info[key], Tensor) else ()
                self._done[key] = [torch.full((*shape, held), math.nan, dtype=torch.float64)]

    def _flush(self) -> None:
        if not self._pending_count:
            return
        for key, values in self._pending.items():
            self._done.setdefault(key, []).append(_stack(values))
            values.clear()
        self._pending_count = 0

    def write(self) -> None:
        """Write the records not yet in the folder as the next info chunk (without ``keep``,
        drop them from memory)."""
        if self.folder is None or self._count == self._written:
            return
        if self.before_write is not None:
            self.before_write()
        self.folder.write_info_chunk(self._chunks, self.tail())
        self._written, self._chunks = self._count, self._chunks + 1
        if not self.keep:
            self._done = {}
            self._base = self._count

    def truncate(self, steps: int) -> None:
        """Keep the records of the first ``steps`` iterations (those after a divergence go);
        records already written to the folder stay."""
        if steps >= self._count:
            return
        if steps < max(self._written, self._base):
            raise ValueError(f"cannot cut the records to {steps} iterations: {self._written} are on disk")
        self._flush()
        keep = steps - self._base
        for key, blocks in self._done.items():
            if blocks:
                self._done[key] = [torch.cat(blocks, -1)[..., :keep].clone()]
        self._count = steps

    def tail(self) -> dict[str, Tensor]:
        """The records not yet written to the folder (what a checkpoint stores)."""
        self._flush()
        n = self._count - self._written
        return {k: _last(blocks, n) for k, blocks in self._done.items() if blocks} if n else {}

    def upto(self, steps: int | None = None) -> dict[str, Tensor]:
        """``{key: [..., S]}`` for the first ``steps`` iterations (all by default); records no
        longer in memory are read back from the folder."""
        self._flush()
        steps = self._count if steps is None else steps
        held = {k: torch.cat(blocks, -1) for k, blocks in self._done.items() if blocks}
        if self._base:
            assert self.folder is not None  # records leave memory only once on disk (keep is False)
            held = concat_info(
                [self.folder.read_info(self._chunks), held] if held else [self.folder.read_info(self._chunks)]
            )
        # torch.cat and concat_info return fresh tensors: copy only a cut
        return {k: v if steps == v.shape[-1] else v[..., :steps].clone() for k, v in held.items()}

    def state_dict(self) -> dict:
        return {"info_written": self._written, "info_chunks": self._chunks}

    def restore(self, state: dict, steps: int, tail: dict[str, Tensor]) -> None:
        """Back to a checkpoint with streamed records: ``state`` (info chunks written) and the
        checkpoint's ``tail``; later info chunks must already be dropped. Without ``keep`` only
        the tail is held in memory (the chunks are checked, not loaded)."""
        assert self.folder is not None  # streamed records: a run folder
        self._clear()
        self._chunks, self._written, self._count = int(state["info_chunks"]), int(state["info_written"]), steps
        held = next(iter(tail.values())).shape[-1] if tail else 0
        if self._written + held != steps:
            raise ValueError(f"inconsistent checkpoint: {self._written} + {held} iterations of records, at {steps}")
        if self.keep:
            records = concat_info([self.folder.read_info(self._chunks), tail])
        else:
            self.folder.verify_info(self._chunks)
            self._base, records = self._written, tail
        for key, value in records.items():
            self._done[key] = [value.clone()]
            self._pending[key] = []

    def load(self, info: dict[str, Tensor], steps: int) -> None:
        """Start from a saved log (a checkpoint's), cut at ``steps`` iterations."""
        self._clear()
        for key, value in info.items():
            self._done[key] = [value[..., :steps].clone()]
            self._pending[key] = []
        self._count = steps


def _last(blocks: list[Tensor], n: int) -> Tensor:
    """The last ``n`` iterations of a key's blocks, as a fresh tensor (cost: those iterations only)."""
    out, got = [], 0
    for b in reversed(blocks):
        if got >= n:
            break
        take = min(n - got, b.shape[-1])
        out.append(b[..., b.shape[-1] - take :])
        got += take
    return torch.cat(out[::-1], -1)


def _stack(values: list) -> Tensor:
    first = values[0]
    if isinstance(first, Tensor):
        return torch.stack(values, -1).to(device="cpu", dtype=torch.float64 if first.is_floating_point() else None)
    if isinstance(first, bool) or not isinstance(first, Number):
        raise TypeError(f"info values must be tensors or numbers, got {type(first).__name__}")
    dtype = torch.int64 if isinstance(first, int) else torch.float64
    return torch.tensor(values, dtype=dtype)


class DrawRecorder:
    """Keeps the draws: in memory (``[C, D, P]``, allocated once) and/or streamed to the run
    folder in chunks of ``chunk_draws``. A checkpoint always refers to chunks on disk. Without
    ``keep_in_memory`` nothing sized by the number of draws is held (only the pending chunk)."""

    def __init__(
        self,
        num_chains: int,
        dim: int,
        num_draws: int,
        *,
        dtype,
        device,
        keep_in_memory: bool = True,
        folder: RunFolder | None = None,
        chunk_draws: int = 1000,
    ):
        self.C, self.P = num_chains, dim
        self.samples = torch.empty(num_chains, num_draws, dim, dtype=dtype, device=device) if keep_in_memory else None
        self.draw_steps = torch.empty(num_draws, dtype=torch.long) if keep_in_memory else None
        self.folder, self.chunk_draws = folder, chunk_draws
        self.kept = self.written = self.chunks = 0
        self._pending: list[Tensor] = []  # draws not yet on disk, when not kept in memory
        self._pending_steps: list[int] = []
        self.before_write: Callable[[], None] | None = (
            None  # called before draws go to disk (the run loop's NaN/Inf check)
        )

    def add(self, theta: Tensor, iteration: int) -> None:
        if self.samples is not None:
            assert self.draw_steps is not None  # both kept in memory, or neither
            self.samples[:, self.kept].copy_(theta)
            self.draw_steps[self.kept] = iteration
        else:
            self._pending.append(theta.detach().clone())
            self._pending_steps.append(iteration)
        self.kept += 1
        if self.folder is not None and self.kept - self.written >= self.chunk_draws:
            self.flush()

    def flush(self) -> None:
        """Write the draws not yet on disk as the next chunk."""
        if self.folder is None or self.kept == self.written:
            return
        if self.before_write is not None:
            self.before_write()
        if self.samples is not None:
            assert self.draw_steps is not None  # both kept in memory, or neither
            chunk, steps = self.samples[:, self.written : self.kept], self.draw_steps[self.written : self.kept]
        else:
            chunk, steps = torch.stack(self._pending, 1), torch.tensor(self._pending_steps, dtype=torch.long)
        self.folder.write_chunk(self.chunks, chunk, steps)
        self._pending.clear()
        self._pending_steps.clear()
        self.written, self.chunks = self.kept, self.chunks + 1

    def truncate(self, before_iteration: int) -> None:
        """Drop the draws of iterations ``>= before_iteration`` not yet on disk (after a
        divergence found late: those draws are not finite)."""
        if self.samples is not None:
            assert self.draw_steps is not None  # both kept in memory, or neither
            steps = self.draw_steps[self.written : self.kept]
            self.kept = self.written + int((steps < before_iteration).sum())
        else:
            keep = sum(1 for s in self._pending_steps if s < before_iteration)
            del self._pending[keep:], self._pending_steps[keep:]
            self.kept = self.written + keep

    def state_dict(self) -> dict:
        return {"kept": self.kept, "written": self.written, "chunks": self.chunks}

    def restore(self, state: dict, info_chunks: int | None = None) -> None:
        """Back to a checkpoint: drop later chunks (and later info chunks), reload the kept
        draws from disk (without ``keep_in_memory``, only check them)."""
        assert self.folder is not None  # a checkpoint refers to chunks in a run folder
        self.kept, self.written, self.chunks = state["kept"], state["written"], state["chunks"]
        self.folder.drop_chunks_from(self.chunks, info_chunks)
        if self.samples is None:
            self.folder.verify_chunks(self.chunks)
            return
        assert self.draw_steps is not None  # both kept in memory, or neither
        got = self.folder.read_chunks(self.chunks)
        if got is not None:
            samples, steps = got
            assert samples is not None  # read with samples=True
            self.draw_steps[: self.kept] = steps
            self.samples[:, : self.kept] = samples.to(self.samples)

    def chain(self, space: ParamSpace, info: dict, config: dict) -> Chain:
        if self.samples is not None:
            assert self.draw_steps is not None  # both kept in memory, or neither
            samples, steps = self.samples[:, : self.kept], self.draw_steps[: self.kept].clone()
        elif self.written:
            assert self.folder is not None  # draws are written only to a run folder
            got = self.folder.read_chunks()
            assert got is not None and got[0] is not None  # written chunks, read with samples=True
            samples, steps = got[0], got[1]
        else:
            samples, steps = torch.empty(self.C, 0, self.P), torch.empty(0, dtype=torch.long)
        return Chain(samples, space, steps, info, config)


class Progress:
    """A tqdm bar (``show=None``: only when stderr is a terminal); the energy every 100 steps."""

    def __init__(self, show: bool | None, total: int, initial: int, desc: str):
        self.bar = None
        if sys.stderr.isatty() if show is None else bool(show):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, mininterval=0.5, smoothing=0.05)

    def update(self, iteration: int, info: dict) -> None:
        if self.bar is None:
            return
        self.bar.update(1)
        if iteration % 100 == 0 and "energy" in info:
            energy = float(info["energy"].mean())
            self.bar.set_postfix(energy=f"{energy:.4g}" if math.isfinite(energy) else energy, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
