"""What a tuner tunes: the target, its data, the start and the control-variate centre.

A :class:`Problem` is built once in the driver, checked there (before any compute: every arm's
:class:`~structmc.Run` is built, not run, by :meth:`Problem.check_arm`), and
shipped once to every worker (``executor.share``). Workers build each arm's run from it and
score the arm's samples with :meth:`Problem.scores`: full-data scores ``∇ log π(θ)`` of all
samples in one batched evaluation (the samples play the role of chains), chunked over data
and over samples so that memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..energy import Energy, as_energy, full_data_value_and_grad
from ..gradients import ControlVariate, Minibatch
from ..run_inputs import as_data, check_int, init_width, initial_positions
from .arms import Arm, structured_energy

SCORE_BATCHES = ("per_draw", "fixed")  # Problem(score_batches=...): how score_data=m draws its rows


class Problem:
    """Target, data and start shared by every arm.

    ``target``: an energy (or log density) of the posterior; its ``num_data`` is set to
    ``len(data)`` when ``None``. ``init``: ``[P]`` or ``[num_chains, P]`` start of every arm
    (the paper starts from the MAP). ``centre``: the control-variate centre (default: the
    mean of ``init``); its full-data gradient is computed once, here, not per arm.
    ``score_data``: ``None`` scores on the full data (the paper's choice, Sect. 3.3); an int m
    scores on m of the N rows, N/m-scaled (cheaper for big N, noisier), in the way
    ``score_batches`` says:

    * ``"per_draw"`` (the default with ``score_data``): the paper's stochastic KSD/FSSD
      (Coullon, South & Nemeth 2023, App. B.2, Fig. 4): every draw's score is a stochastic
      gradient as an SGMCMC step computes it, on the draw's own minibatch of m rows (drawn with
      replacement, as the reference code's batches), so it is unbiased for the full-data
      score. The minibatches come from a generator seeded with ``seed`` afresh at every
      :meth:`scores` call: the same draws get the same scores (on any backend, on resume), and
      the i-th draw of every arm gets the same i-th minibatch (the arms are compared on common
      random numbers).
    * ``"fixed"``: one random subset of m rows (without replacement, seeded with ``seed``)
      scores every draw — the only estimator of structmc 0.1.0. It is biased: it scores the draws
      against the subset's own posterior, whose centre sits O(1/√m) from the full posterior's,
      which is only O(1/√N) wide, so for m ≪ N it ranks arms by their distance to the wrong
      centre (measured on the paper's logistic regression, N = 10⁵, m = 1 %: Kendall's τ
      −0.36 (KSD) / 0.08 (FSSD) against the full-data ranking of the step sizes, 0.67 / 0.71
      per draw; ``structmc_papers.mamba_logreg`` (the papers' companion package)). Kept to reproduce earlier results.

    ``batching``: how arms draw minibatches (:mod:`structmc.batching`; the
    reference code draws with replacement). ``validation``: held-out ``(inputs..., targets)`` for user metrics.
    ``score_chunk``: data points per chunk of the batched score evaluation;
    ``max_score_examples`` bounds samples × data points per call (memory; per draw:
    samples × m).
    """

    def __init__(
        self,
        target: Energy | Callable,
        init: Tensor | None,
        *,
        data: Sequence[Tensor] | None = None,
        num_chains: int = 1,
        batching: str = "epoch",
        centre: Tensor | None = None,
        score_data: int | None = None,
        score_batches: str | None = None,
        validation: Sequence[Tensor] | None = None,
        score_chunk: int = 4096,
        max_score_examples: int = 2**18,
        seed: int = 0,
    ):
        # the arguments a Run takes, normalised by Run's own helpers; the checks of the target
        # against the data and the start (and of batching) are Run.__init__'s, made on every
        # arm's run by check_arm before any compute
        if score_batches is not None and score_batches not in SCORE_BATCHES:
            raise ValueError(
                f"score_batches must be 'per_draw' (every draw its own minibatch of score_data rows, the "
                f"paper's App. B.2) or 'fixed' (one subset for every draw, biased), got {score_batches!r}"
            )
        if score_batches is not None and score_data is None:
            raise ValueError(
                f"score_batches={score_batches!r} needs score_data=m (the minibatch size); "
                "without score_data the scores use the full data"
            )
        if score_data is not None:  # an integer number of rows (2.5 is not truncated to 2)
            score_data = check_int("score_data", score_data, 1)
        data = as_data(data)
        num_chains = check_int("num_chains", num_chains, 1)
        energy = as_energy(target, init_width(init))
        if data is not None and energy.num_data is None:
            energy = energy.with_num_data(int(data[0].shape[0]))
        theta0 = initial_positions(energy, init, num_chains)
        self.batching = batching
        self.energy, self.data, self.init, self.num_chains = energy, data, theta0, num_chains
        self.validation = as_data(validation)
        self.num_data = None if data is None else int(data[0].shape[0])
        self.score_chunk, self.max_score_examples = int(score_chunk), int(max_score_examples)
        self.score_points: tuple[Tensor, ...] | None
        if score_data is not None:
            if data is None:
                raise ValueError("score_data needs data")
            num_data = int(data[0].shape[0])
            if not 1 <= int(score_data) <= num_data:
                raise ValueError(f"score_data must lie in [1, {num_data}], got {score_data}")
            score_data, score_batches = int(score_data), score_batches or "per_draw"
            if score_batches == "fixed":  # structmc 0.1.0's subset, the same rows as then
                g = torch.Generator().manual_seed(int(seed))
                idx = torch.randperm(num_data, generator=g)[:score_data].to(theta0.device)
                self.score_points = tuple(t.index_select(0, idx) for t in data)
            else:  # per draw: each scores() call draws its minibatches from these rows
                self.score_points = data
        else:
            self.score_points = data
        self.score_data, self.score_batches, self.score_seed = score_data, score_batches, int(seed)
        self.centre = (theta0.mean(0) if centre is None else torch.as_tensor(centre).to(theta0).reshape(-1)).detach()
        if self.centre.shape[0] != energy.space.dim:
            raise ValueError(f"centre must have {energy.space.dim} entries, got {tuple(self.centre.shape)}")
        self._centre_grad: Tensor | None = None

    # -- per arm -------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return self.energy.space.dim

    def check_arm(self, arm: Arm) -> None:
        """Errors an arm would raise, before any compute: a batch larger than N or given without
        data, and everything ``Run.__init__`` refuses when it builds the arm's run (the path
        every worker takes; nothing is sampled): the target against the data and the start,
        batching, a structured energy whose partition does not fit or whose ``split_batch``
        cannot split the batch, a sampler that refuses the energy. The run is built with a
        plain minibatch gradient: a control variate's full-data pass waits for :meth:`prepare`
        (its centre is checked in ``__init__``)."""
        arm.batch_count(self.num_data)
        if arm.batch_size is not None and self.data is None:
            raise ValueError(f"arm {arm.label!r} has a batch_size but the problem has no data")
        self._run(arm, Minibatch(), seed=0, init=None)

    def energy_for(self, arm: Arm) -> Energy:
        return self.energy if arm.structured is None else structured_energy(self.energy, arm.structured)

    def gradient_for(self, arm: Arm):
        if arm.gradient == "minibatch":
            return Minibatch()
        return ControlVariate(self.centre, centre_grad=self.centre_grad(), chunk_size=self.score_chunk)

    def centre_grad(self) -> Tensor:
        """∇U at the centre over the full data, computed once (``prepare`` calls it in the driver)."""
        if self._centre_grad is None:
            c = self.centre.unsqueeze(0)
            if self.data is None:
                self._centre_grad = self.energy.value_and_grad(c, None)[1][0]
            else:
                self._centre_grad = full_data_value_and_grad(self.energy, c, self.data, self.score_chunk)[1][0]
        return self._centre_grad

    def prepare(self, arms: Sequence[Arm]) -> None:
        """Driver-side work done once before shipping: the CV centre gradient if any arm needs it."""
        if any(a.gradient == "control_variate" for a in arms):
            self.centre_grad()

    def run(self, arm: Arm, *, seed: int = 0, init: Tensor | None = None):
        """A :class:`~structmc.Run` of ``arm`` on this problem (its batch, estimator, energy),
        from ``init`` (default: the problem's start)."""
        return self._run(arm, self.gradient_for(arm), seed=seed, init=init)

    def _run(self, arm: Arm, gradient, *, seed: int, init: Tensor | None):
        from ..run import Run

        return Run(
            self.energy_for(arm),
            self.init if init is None else init,
            arm.build_sampler(),
            data=self.data,
            batch_size=arm.batch_count(self.num_data),
            batching=self.batching,
            seed=seed,
            num_chains=self.num_chains,
            gradient=gradient,
        )

    def sample(self, arm: Arm, budget, *, seed: int = 0, thin: int = 1, burn_in: int = 0, init: Tensor | None = None):
        """Run ``arm`` for ``budget`` (a :class:`~structmc.Budget` or iterations) and return the
        :class:`~structmc.Chain` of every ``thin``-th draw after ``burn_in`` iterations — how a
        tuned arm is evaluated (e.g. the paper's 10 s runs from the MAP)."""
        return self.run(arm, seed=seed, init=init).sample(budget, thin=thin, burn_in=burn_in)

    # -- scores ------------------------------------------------------------------------------
    def scores(self, samples: Tensor) -> Tensor:
        """``∇ log π`` at each row of ``samples [n, P]``: on the full data, or with
        ``score_data=m`` N/m-scaled on each draw's own minibatch (``score_batches="per_draw"``)
        or on the fixed subset (``"fixed"``): one batched evaluation per chunk of samples ×
        chunk of data."""
        samples = samples.to(self.init)
        n = samples.shape[0]
        if n == 0:
            return samples.clone()
        if self.score_points is None:
            return -self.energy.value_and_grad(samples, None)[1]
        if self.score_batches == "per_draw":
            return self._per_draw_scores(samples)
        chunk = min(self.score_chunk, int(self.score_points[0].shape[0]))
        per_call = max(1, self.max_score_examples // chunk)
        out = []
        for i in range(0, n, per_call):
            _, g = full_data_value_and_grad(self.energy, samples[i : i + per_call], self.score_points, chunk)
            out.append(g.neg_())
        return torch.cat(out)

    def _per_draw_scores(self, samples: Tensor) -> Tensor:
        """App. B.2's stochastic scores: draw i's score is the N/m-scaled stochastic gradient on
        its own minibatch ``idx[i]`` of m rows (with replacement), ``idx [n, m]`` drawn at once
        from a generator seeded with ``seed`` (the same at every call: same draws, same scores);
        the draws are evaluated together, each chain its own batch (``[k, m, ...]``, the energy's
        per-chain layout), ``max_score_examples // m`` draws per call."""
        data = self.score_points
        assert data is not None and self.score_data is not None
        n, m = samples.shape[0], self.score_data
        g = torch.Generator().manual_seed(self.score_seed)
        idx = torch.randint(int(data[0].shape[0]), (n, m), generator=g).to(data[0].device)
        per_call = max(1, self.max_score_examples // m)
        out = []
        for i in range(0, n, per_call):
            rows = idx[i : i + per_call]
            _, grad = self.energy.value_and_grad(samples[i : i + per_call], tuple(t[rows] for t in data))
            out.append(grad.neg_())
        return torch.cat(out)

    def score_cost(self) -> int:
        """Data points one score evaluates (1 without data; m with ``score_data=m``)."""
        if self.score_points is None:
            return 1
        return int(self.score_data) if self.score_data is not None else int(self.score_points[0].shape[0])


def as_problem(target, init, problem: Problem | None = None, **kwargs) -> Problem:
    """The tuners' problem: ``target`` when it is a :class:`Problem`, else ``problem`` when given,
    else ``Problem(target, init, **kwargs)``."""
    if isinstance(target, Problem):
        return target
    return Problem(target, init, **kwargs) if problem is None else problem


__all__ = ["Problem", "as_problem"]
