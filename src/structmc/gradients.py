r"""Gradient estimators: how ∇Û is estimated at θ from a minibatch.

An estimator is independent of the sampler (blackjax style): every sampler takes whatever
gradient the estimator returns, so SGLD-CV, SGHMC-CV and SGNHT-CV are simply a sampler run
with :class:`ControlVariate`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from torch import Tensor

from .energy import Batch, Energy, full_data_value_and_grad


class Minibatch:
    """Plain minibatch estimate ∇Û_b(θ) (unbiased when the energy carries the N/n scaling)."""

    name = "minibatch"
    #: energy gradient evaluations per estimate
    evaluations = 1

    def prepare(self, energy: Energy, data: Sequence[Tensor] | None, theta: Tensor) -> None:
        pass

    def __call__(self, energy: Energy, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        return energy.value_and_grad(theta, batch)

    def config(self) -> dict:
        return {"gradient": self.name}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict, device=None) -> None:
        pass


class ControlVariate:
    r"""Control-variate estimate (Baker, Fearnhead, Fox & Nemeth 2019, eq. 6):

    .. math:: \nabla\hat U_{cv}(\theta) = \nabla U(\hat\theta) + \nabla\hat U_b(\theta) - \nabla\hat U_b(\hat\theta)

    with centring point θ̂ (e.g. the MAP from :func:`structmc.find_map`) and its full-data
    gradient ∇U(θ̂), computed once in :meth:`prepare` over chunks of the data (or given).
    Both minibatch terms use the same batch. Costs two gradient evaluations per step; its
    variance vanishes as θ → θ̂, which is what makes small batches usable near the mode.

    ``stacked=True`` evaluates the two terms as one call of the energy on ``2C`` positions
    (θ and θ̂ stacked, each chain's batch shared by its pair, a zero-copy ``expand`` for one
    chain): one forward and one backward instead of two, which pays where a step is bound
    by kernel launches (small models on a GPU). On a 2-core CPU it is slower (the batched
    ``vmap`` path costs more than two plain passes: 1.22x for an MLP 784-50-50-10 at batch
    500, 1.86x for a 10-parameter logistic regression at batch 100; docs/performance.md),
    hence off by default. Same expectation, results equal up to float rounding.
    The reported energy is the plain minibatch estimate Û_b(θ). On a structured energy the
    centre terms use its base energy: for S-SGMCMC the masks sum to one per parameter, so
    Σ_m mask_m ⊙ (∇Û_b(θ^(m)) − ∇Û_b(θ̂) + ∇U(θ̂)) is exactly this estimator.
    """

    name = "control_variate"
    #: energy gradient evaluations per estimate: at θ and at the centre, on the same batch
    evaluations = 2

    def __init__(
        self, centre: Tensor, *, centre_grad: Tensor | None = None, chunk_size: int = 4096, stacked: bool = False
    ):
        if not isinstance(stacked, bool):
            raise TypeError(f"stacked must be True or False, got {stacked!r}")
        self.stacked = stacked
        if not isinstance(centre, Tensor):
            raise TypeError("centre must be a tensor of shape [P] or [chains, P]")
        if not bool(torch.isfinite(centre).all()):
            raise ValueError("centre contains NaN or Inf")
        from .schedules import check_int

        if check_int("chunk_size", chunk_size) < 1:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        if centre.dim() not in (1, 2) or centre.numel() == 0:
            raise ValueError(f"centre must have shape [P] or [chains, P], got {tuple(centre.shape)}")
        if centre_grad is not None and not isinstance(centre_grad, Tensor):
            raise TypeError("centre_grad must be a tensor shaped like the centre")
        self.centre = centre.detach()
        self.centre_grad = None if centre_grad is None else centre_grad.detach()
        self.chunk_size = int(chunk_size)
        self._centre_c: Tensor | None = None
        self._full_grad_c: Tensor | None = None

    def prepare(self, energy: Energy, data: Sequence[Tensor] | None, theta: Tensor) -> None:
        """Move θ̂ to ``theta``'s device/dtype and compute ∇U(θ̂) (``theta``: the [C, P] start)."""
        num_chains, P = theta.shape
        # check the shape before reshaping: a [P'] centre whose length is a multiple of P would
        # otherwise be read as P'/P chains, and any other length fail inside reshape
        centre = self.centre.unsqueeze(0) if self.centre.dim() == 1 else self.centre
        if centre.dim() != 2 or centre.shape[-1] != P or centre.shape[0] not in (1, num_chains):
            raise ValueError(f"centre must have shape [{P}] or [{num_chains}, {P}], got {tuple(self.centre.shape)}")
        centre = centre.to(theta)
        energy = energy.cv_base  # structured energies: centre terms of the base
        if self.centre_grad is not None:
            if self.centre_grad.shape[-1:] != (P,) or self.centre_grad.numel() not in (P, centre.numel()):
                raise ValueError(
                    f"centre_grad must have the centre's shape {tuple(self.centre.shape)}, "
                    f"got {tuple(self.centre_grad.shape)}"
                )
            full = self.centre_grad.to(centre).reshape(-1, P)
        elif data is None:
            full = energy.value_and_grad(centre, None)[1]
        else:  # one full pass per distinct centre: a shared [P] centre costs one pass
            full = full_data_value_and_grad(energy, centre, data, self.chunk_size)[1]
        centre = centre.expand(num_chains, P).contiguous()
        full = full.expand(num_chains, P).contiguous()
        self._centre_c, self._full_grad_c = centre, full

    def __call__(self, energy: Energy, theta: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        centre, full_grad = self._centre_c, self._full_grad_c  # set together by prepare / load_state_dict
        if centre is None or full_grad is None:
            raise RuntimeError("ControlVariate.prepare(energy, data, theta) must run first")
        # per-chain buffers (BatchNorm statistics) belong to C chains, not 2C positions
        if self.stacked and energy.cv_base is energy and not energy.has_buffers:
            C = theta.shape[0]
            pairs = None if batch is None else tuple(_twice(t) for t in batch)
            value, grad = energy.value_and_grad(torch.cat([theta, centre]), pairs)
            return value[:C], grad[:C].sub_(grad[C:]).add_(full_grad)
        value, grad = energy.value_and_grad(theta, batch)
        _, grad_centre = energy.cv_base.value_and_grad(centre, batch)
        return value, grad.sub_(grad_centre).add_(full_grad)

    def config(self) -> dict:
        """The estimator's settings, with ``centre``: the centre's fingerprint
        (:func:`centre_fingerprint`), so that resuming with another centre is refused (a
        checkpoint restores the centre it was written with)."""
        out = {"gradient": self.name, "chunk_size": self.chunk_size, "centre": self._centre_fingerprint()}
        if self.stacked:  # absent when off: run folders written before the option still resume
            out["stacked"] = True
        return out

    def _centre_fingerprint(self) -> str:
        # cached per version of the centre's storage: an in-place change of the caller's tensor
        # (which the detached centre shares) is seen
        key = (self.centre.data_ptr(), self.centre._version)
        cached = getattr(self, "_fingerprint", None)
        if cached is None or cached[0] != key:
            cached = self._fingerprint = (key, centre_fingerprint(self.centre))
        return cached[1]

    def state_dict(self) -> dict:
        """The prepared centre and its full-data gradient (a checkpoint need not redo the pass)."""
        if self._centre_c is None or self._full_grad_c is None:  # set together
            return {}
        return {"centre": self._centre_c.cpu(), "full_grad": self._full_grad_c.cpu()}

    def load_state_dict(self, state: dict, device=None) -> None:
        if state:
            self._centre_c, self._full_grad_c = state["centre"].to(device), state["full_grad"].to(device)


def centre_fingerprint(centre: Tensor) -> str:
    """A control-variate centre's fingerprint (what resume compares): a blake2b digest of its
    shape (``[P]``, a ``[1, P]`` centre read as ``[P]``) and its values as float64, so that a
    centre given in another dtype that holds the same values, or with -0.0 for +0.0, agrees."""
    t = centre.detach()
    if t.dim() == 2 and t.shape[0] == 1:
        t = t[0]
    t = t.to("cpu", torch.float64).contiguous() + 0.0  # + 0.0: -0.0 -> +0.0
    h = hashlib.blake2b(digest_size=10)
    h.update(repr(tuple(t.shape)).encode())
    h.update(t.numpy().tobytes())
    return "blake2b:" + h.hexdigest()


def _twice(t: Tensor) -> Tensor:
    """``[C, n, ...]`` -> ``[2C, n, ...]``: the chains' batches for θ, then for θ̂."""
    if t.shape[0] == 1:
        return t.expand(2, *t.shape[1:])
    return torch.cat([t, t])


def as_estimator(gradient) -> Minibatch | ControlVariate:
    if gradient is None or gradient == "minibatch":
        return Minibatch()
    if isinstance(gradient, (Minibatch, ControlVariate)):
        return gradient
    if isinstance(gradient, str) and gradient.lower().replace("-", "_") in ("cv", "control_variate", "controlvariate"):
        raise TypeError(
            f"gradient must be 'minibatch', Minibatch() or ControlVariate(centre), got gradient={gradient!r}: a "
            "control variate needs its centre (a point near the mode): pass gradient=ControlVariate(centre), "
            "e.g. centre = structmc.find_map(energy, init, data=data)"
        )
    raise TypeError(f"gradient must be 'minibatch', Minibatch() or ControlVariate(...), got {gradient!r}")
