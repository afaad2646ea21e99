"""Parts the run loop uses: the per-iteration log, the draw recorder, the progress display.

Each is small and owns one job, so that :func:`structmc.sample` reads as the loop it is and
other drivers (tuning arms, Gibbs sweeps) can reuse them.
"""

from __future__ import annotations

import math
import sys
from numbers import Number

import torch
from torch import Tensor

from .chain import Chain
from .space import ParamSpace
from .storage import RunFolder


class InfoLog:
    """Per-iteration records, whatever keys the sampler's ``info`` and the loop provide.

    A tensor value of shape ``[C]`` (or any shape) becomes ``[..., S]`` (e.g. ``energy [C, S]``);
    a Python number becomes ``[S]``. Kept cheap in the hot loop: values are appended to lists
    and tensors are copied to the CPU in blocks of ``BLOCK`` iterations (one copy per block,
    not per step, so no per-step device-to-host transfer).
    """

    BLOCK = 256

    def __init__(self):
        self._done: dict[str, list[Tensor]] = {}  # finished blocks on the CPU
        self._pending: dict[str, list] = {}
        self._count = 0  # iterations appended
        self._pending_count = 0

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

    def _new_keys(self, info: dict) -> None:
        """A key missing from earlier iterations (a record restored from an older checkpoint)
        is back-filled with NaN; a key that stops appearing is an error."""
        gone = self._pending.keys() - info.keys()
        if gone:
            raise ValueError(f"info records must have the same keys every iteration; missing now: {sorted(gone)}")
        self._flush()
        for key in info.keys() - self._pending.keys():
            self._pending[key] = []
            if self._count:
                shape = tuple(info[key].shape) if isinstance(info[key], Tensor) else ()
                self._done[key] = [torch.full((*shape, self._count), math.nan, dtype=torch.float64)]

    def _flush(self) -> None:
        if not self._pending_count:
            return
        for key, values in self._pending.items():
            self._done.setdefault(key, []).append(_stack(values))
            values.clear()
        self._pending_count = 0

    def upto(self, steps: int | None = None) -> dict[str, Tensor]:
        """``{key: [..., S]}`` for the first ``steps`` iterations (all by default)."""
        self._flush()
        steps = self._count if steps is None else steps
        return {k: torch.cat(blocks, -1)[..., :steps].clone() for k, blocks in self._done.items()}

    def load(self, info: dict[str, Tensor], steps: int) -> None:
        """Start from a saved log (a checkpoint's), cut at ``steps`` iterations."""
        self.__init__()
        for key, value in info.items():
            self._done[key] = [value[..., :steps].clone()]
            self._pending[key] = []
        self._count = steps


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
    folder in chunks of ``chunk_draws``. A checkpoint always refers to chunks on disk."""

    def __init__(self, num_chains: int, dim: int, num_draws: int, *, dtype, device, keep_in_memory: bool = True,
                 folder: RunFolder | None = None, chunk_draws: int = 1000):
        self.C, self.P = num_chains, dim
        self.samples = (torch.empty(num_chains, num_draws, dim, dtype=dtype, device=device)
                        if keep_in_memory else None)
        self.draw_steps = torch.empty(num_draws, dtype=torch.long)
        self.folder, self.chunk_draws = folder, chunk_draws
        self.kept = self.written = self.chunks = 0
        self._pending: list[Tensor] = []  # draws not yet on disk, when not kept in memory

    def add(self, theta: Tensor, iteration: int) -> None:
        if self.samples is not None:
            self.samples[:, self.kept].copy_(theta)
        else:
            self._pending.append(theta.detach().clone())
        self.draw_steps[self.kept] = iteration
        self.kept += 1
        if self.folder is not None and self.kept - self.written >= self.chunk_draws:
            self.flush()

    def flush(self) -> None:
        """Write the draws not yet on disk as the next chunk."""
        if self.folder is None or self.kept == self.written:
            return
        if self.samples is not None:
            chunk = self.samples[:, self.written:self.kept]
        else:
            chunk = torch.stack(self._pending, 1)
        self.folder.write_chunk(self.chunks, chunk, self.draw_steps[self.written:self.kept])
        self._pending.clear()
        self.written, self.chunks = self.kept, self.chunks + 1

    def state_dict(self) -> dict:
        return {"kept": self.kept, "written": self.written, "chunks": self.chunks}

    def restore(self, state: dict) -> None:
        """Back to a checkpoint: drop later chunks, reload the kept draws from disk."""
        self.kept, self.written, self.chunks = state["kept"], state["written"], state["chunks"]
        self.folder.drop_chunks_from(self.chunks)
        got = self.folder.read_chunks(self.chunks)
        if got is not None:
            self.draw_steps[:self.kept] = got[1]
            if self.samples is not None:
                self.samples[:, :self.kept] = got[0].to(self.samples)

    def chain(self, space: ParamSpace, info: dict, config: dict) -> Chain:
        if self.samples is not None:
            samples = self.samples[:, :self.kept]
        elif self.written:
            samples = self.folder.read_chunks()[0]
        else:
            samples = torch.empty(self.C, 0, self.P)
        return Chain(samples, space, self.draw_steps[:self.kept].clone(), info, config)


class Progress:
    """A tqdm bar (``show=None``: only when stderr is a terminal); the energy every 100 steps."""

    def __init__(self, show: bool | None, total: int, initial: int, desc: str):
        self.bar = None
        if (sys.stderr.isatty() if show is None else bool(show)):
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
