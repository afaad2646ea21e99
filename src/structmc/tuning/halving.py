r"""MAMBA's round arithmetic (Coullon, South & Nemeth 2023, Algorithm 1): ``R = ⌊log_η M⌋``
rounds, ``|S_i|`` arms in round i, each given ``r_i = T / (|S_i| R)`` of the budget T, and
the checks that every arm's share can be scored (see :mod:`structmc.tuning.mamba`)."""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..run import Budget


def num_rounds(num_arms: int, eta: int = 3) -> int:
    """``⌊log_η M⌋`` in integers (no floating-point log: ``log(27)/log(3)`` is not exactly 3),
    at least 1 so that a single arm or fewer than η arms still get scored once."""
    _check_eta(eta)
    if int(num_arms) < 1:
        raise ValueError("no arms to tune: the grid is empty")
    r, power = 0, eta
    while power <= num_arms:
        r, power = r + 1, power * eta
    return max(1, r)


def survivors(num_arms: int, eta: int = 3) -> int:
    """``⌊n/η⌋`` arms kept after a round of ``n``, at least one."""
    return max(1, int(num_arms) // int(eta))


def round_sizes(num_arms: int, eta: int = 3) -> list[int]:
    """``|S_i|`` for every round: 9 arms, η = 3 -> [9, 3]; 27 -> [27, 9, 3]; 10 -> [10, 3]."""
    sizes, n = [], int(num_arms)
    for _ in range(num_rounds(num_arms, eta)):
        sizes.append(n)
        n = survivors(n, eta)
    return sizes


def round_budget(budget: Budget, arms_in_round: int, rounds: int) -> Budget:
    """``r_i = T / (|S_i| R)``: seconds as a float, iterations and gradient evaluations rounded
    down (at least 1)."""
    kind, total = budget_kind(budget)
    share = total / (arms_in_round * rounds)
    if kind == "seconds":
        return Budget(seconds=share)
    return Budget(**{kind: max(1, int(math.floor(share)))})


def check_scorable(share: Budget, thin: int, min_samples: int, *, arms: int, rounds: int, total: Budget) -> None:
    """Refuse, before any compute, a budget whose smallest per-arm share cannot give each arm
    ``min_samples`` draws kept every ``thin`` iterations (callers pass
    ``min(min_samples, max_samples)``: no more than are scored): such arms would be scored on one or
    two draws and a winner chosen from noise. Counted in iterations (a gradient evaluation
    budget needs at least one evaluation per iteration); a ``seconds`` budget is checked after
    its first round (see :func:`warn_unscored`)."""
    kind, _ = budget_kind(share)
    if kind == "seconds" or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (thin, min_samples)
    ):
        return  # bad thin / min_samples get their own error from the round runner
    need = int(thin) * int(min_samples)
    have = int(getattr(share, kind))
    if have < need and total is share:  # a per-arm budget (grid search)
        raise ValueError(
            f"the tuning budget {kind}={have} per arm is too small to score the arms: it keeps fewer than "
            f"min_samples={min_samples} draws at thin={thin}. Give at least {kind}={need} per arm (= thin x "
            f"min_samples), or lower thin / min_samples"
        )
    if have < need:
        minimum = need * arms * rounds
        raise ValueError(
            f"the tuning budget {kind}={getattr(total, kind)} is too small to score the arms: the first round gives "
            f"each of its {arms} arms {have} {kind.replace('_', ' ')}, which keeps fewer than min_samples="
            f"{min_samples} draws at thin={thin} ({need} needed). Give at least {kind}={minimum} (= thin x "
            f"min_samples x {arms} arms x {rounds} round{'s' if rounds > 1 else ''}), or lower thin / min_samples, "
            f"or tune fewer arms"
        )


def warn_unscored(result, min_samples: int) -> None:
    """After a ``seconds`` budget: warn when an arm that did not fail was scored on fewer than
    ``min_samples`` draws (the choice between such arms is noise)."""
    short = [
        (r["label"], r["scored"])
        for rnd in result.rounds
        for r in rnd["results"]
        if not r.get("error") and r.get("scored", 0) < min_samples
    ]
    if short:
        shown = ", ".join(f"{label}: {n}" for label, n in short[:5])
        warnings.warn(
            f"the tuning budget was too small to score every arm on min_samples={min_samples} draws "
            f"({len(short)} arm-rounds fell short; {shown}{', ...' if len(short) > 5 else ''}): the choice is "
            f"unreliable; give more seconds or use an iterations budget",
            RuntimeWarning,
            stacklevel=3,
        )


def budget_kind(budget: Budget) -> tuple[str, float]:
    given = [(k, getattr(budget, k)) for k in ("iterations", "seconds", "grad_evals") if getattr(budget, k) is not None]
    if len(given) != 1:
        raise ValueError(
            "a tuning budget has exactly one of iterations, seconds or grad_evals, "
            f"got {', '.join(k for k, _ in given)}"
        )
    kind, total = given[0]
    if not total > 0:
        raise ValueError(f"the tuning budget must be positive, got {kind}={total}")
    return kind, total


def _check_eta(eta) -> None:
    if isinstance(eta, bool) or not isinstance(eta, (int, np.integer)) or eta < 2:
        raise ValueError(f"eta (the pruning rate) must be an integer >= 2, got {eta!r}")


def _as_budget(budget) -> Budget:
    if isinstance(budget, Budget):
        budget_kind(budget)
        return budget
    raise TypeError(
        "budget must be a structmc.Budget, e.g. Budget(seconds=12.0), Budget(iterations=30_000) "
        f"or Budget(grad_evals=...), got {budget!r}"
    )


def arm_seed(seed: int, index: int, round_: int = 0) -> int:
    """A seed per (tuning seed, arm, round), independent of where the task runs."""
    return int(np.random.SeedSequence([int(seed), int(index), int(round_)]).generate_state(1)[0])
