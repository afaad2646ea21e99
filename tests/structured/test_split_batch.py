"""Split-batch structured SGMCMC (``StructuredEnergy(..., split_batch=True)``, beyond the paper):
copy k of a step sees the k-th of K contiguous slices of n/K rows of its chain's minibatch.

Checked here: per-batch identity and unbiasedness against the exact full-data Sd/S energy
(Bayesian linear regression, closed form), one batched base call per step on a view, the
stationary law against the per-copy full-batch estimator and against the exact discretised
law at ρ = 1, the errors, and that ``split_batch=False`` leaves the chains bit for bit as
before.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from support.exact import LinearRegression, sgld_recursion
from support.nets import mlp
from support.tuning import linreg

import structmc as sm
from structmc import Budget
from structmc.structured import (
    BernoulliMask,
    ChainHistory,
    StructuredEnergy,
    UniformMask,
    by_layer,
    fully_factorized,
    round_robin,
)
from structmc.tuning import Arm, mamba
from structmc.tuning.arms import structured_energy

F64 = torch.float64


# ---------------------------------------------------------------------------------------
# a linear regression as three kinds of base energy (all apply N/n to the batch they get)
# ---------------------------------------------------------------------------------------
def _density_energy(N: int, d: int, vectorized: bool) -> sm.LogDensityEnergy:
    """y ~ N(Xθ, 1), θ ~ N(0, I), as LogDensityEnergy(log_likelihood=..., log_prior=...)."""
    if vectorized:

        def log_lik(theta, batch):  # [C, P], ([C, n, d], [C, n, 1]) -> [C]
            xb, yb = batch
            return -0.5 * (yb[..., 0] - torch.einsum("cnd,cd->cn", xb, theta)).square().sum(1)

        log_prior = lambda theta: -0.5 * theta.square().sum(-1)
    else:

        def log_lik(theta, batch):  # one chain: [P], ([n, d], [n, 1]) -> scalar
            xb, yb = batch
            return -0.5 * (yb[:, 0] - xb @ theta).square().sum()

        log_prior = lambda theta: -0.5 * theta.square().sum()
    return sm.LogDensityEnergy(dim=d, log_likelihood=log_lik, log_prior=log_prior, vectorized=vectorized, num_data=N)


def _problem(kind: str, N: int = 12, d: int = 3):
    """(base energy with num_data = N, data (X [N, d], y [N, 1]), exact LinearRegression)."""
    module_energy, data, model = linreg(N=N, d=d)  # noise_std = prior_std = 1
    if kind == "module":
        return module_energy.with_num_data(N), data, model
    return _density_energy(N, d, vectorized=kind == "vectorized"), data, model


def _exact_full_data(model: LinearRegression, mixed: np.ndarray, r: np.ndarray, scale: float):
    """Full-data structured energy and gradient from the copies' mixed points ``[C, K, P]``
    and parameter-level masks ``r [C, K, P]``: scale·Σ_k U(mixed_k), scale·Σ_k r_k ⊙ ∇U(mixed_k),
    with U(θ) = ½‖y − Xθ‖² + ½‖θ‖² (constants dropped, as the energies do)."""
    X, y = model.X, model.y
    res = y[None, None, :] - np.einsum("nd,ckd->ckn", X, mixed)
    U = 0.5 * (res**2).sum(-1) + 0.5 * (mixed**2).sum(-1)
    G = mixed @ model.hessian().T - model.shift()  # ∇U = Hθ − r per copy
    return scale * U.sum(1), scale * (r * G).sum(1)


def _started(energy, partition, *, mask=None, K=None, C=2, split=True, seed=3, **kw):
    """A structured energy whose history holds a few random past positions of C chains."""
    s = StructuredEnergy(
        energy, partition, ChainHistory(16), mask=mask, num_copies=K, seed=seed, split_batch=split, **kw
    )
    g = torch.Generator().manual_seed(11)
    s.start(torch.randn(C, energy.space.dim, generator=g, dtype=F64))
    for _ in range(6):
        s.observe(torch.randn(C, energy.space.dim, generator=g, dtype=F64))
    return s


def _draws(s: StructuredEnergy, C: int, P: int):
    """The masks ``[C, K, P]`` and θ̃ ``[C, K, P]`` the next evaluation of ``s`` will use (drawn
    as ``_evaluate`` does, from a copy of its generator state)."""
    gen = s._state["generator"]
    state = gen.get_state()
    ids = s.partition.group_ids
    r = s._copy_masks(C, 0, s.num_copies, F64, "cpu", gen)[:, :, ids]
    tilde = s.history.draw(s.num_copies, ids, s.partition.num_groups, gen, F64)
    gen.set_state(state)
    return r, tilde


# ---------------------------------------------------------------------------------------
# 1. per-batch identity and unbiasedness
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, sd", [("module", True), ("vectorized", False), ("per_chain", True)])
def test_split_batch_is_unbiased_for_the_full_data_structured_energy(kind, sd):
    """Masks and θ̃ held fixed (the generator state restored before each evaluation), the
    average over random minibatches of the split-batch value and gradient is the exact
    full-data Sd (or S) value and gradient, and the average of the per-copy full-batch
    estimator; N/n instead of N/(n/K) on the slices is far outside the tolerance."""
    N, d, n, C = 12, 3, 6, 2
    energy, (X, y), model = _problem(kind, N, d)
    part = fully_factorized(d)
    mask, K = (BernoulliMask(0.5), 3) if sd else (None, None)  # S-SGMCMC: K = M = 3 copies
    s = _started(energy, part, mask=mask, K=K, C=C)
    K = s.num_copies
    theta = torch.tensor([[0.3, -0.2, 0.5], [-0.4, 0.1, 0.2]], dtype=F64)
    r, tilde = _draws(s, C, d)
    mixed = tilde + r * (theta.unsqueeze(1) - tilde)  # [C, K, P]
    state = s._state["generator"].get_state()

    def evaluate(energy_obj, batch):
        energy_obj._state["generator"].set_state(state)
        return energy_obj.value_and_grad(theta, batch)

    # (a) one batch, exactly: copy k of chain c sees rows [k·n/K, (k+1)·n/K) of chain c's batch
    g = torch.Generator().manual_seed(0)
    idx = torch.rand(C, N, generator=g).argsort(1)[:, :n]
    batch = (X[idx], y[idx])
    v, gr = evaluate(s, batch)
    m = n // K
    for c in range(C):
        exp_v, exp_g = 0.0, np.zeros(d)
        for k in range(K):
            rows = idx[c, k * m : (k + 1) * m].numpy()
            x = mixed[c, k].numpy()
            res = model.y[rows] - model.X[rows] @ x
            exp_v += s.scale * ((N / m) * 0.5 * (res**2).sum() + 0.5 * (x**2).sum())
            exp_g += s.scale * r[c, k].numpy() * ((N / m) * -(model.X[rows].T @ res) + x)
        assert v[c].item() == pytest.approx(exp_v, rel=1e-12)
        assert np.allclose(gr[c].numpy(), exp_g, rtol=1e-12, atol=1e-12)

    # (b) averages over R random minibatches (each chain its own uniform subset in random order)
    full = StructuredEnergy(energy, part, ChainHistory(16), mask=mask, num_copies=None if mask is None else K, seed=3)
    misscaled = StructuredEnergy(
        energy.with_num_data(N // K),
        part,
        ChainHistory(16),
        mask=mask,
        num_copies=None if mask is None else K,
        split_batch=True,
    )
    for e in (full, misscaled):  # the same history; masks and θ̃ from the same generator state
        e.history, e._state = s.history, {"generator": torch.Generator(), "steps": 0}
    R = 1500
    split_vals, full_vals, mis_vals = [], [], []
    for _ in range(R):
        idx = torch.rand(C, N, generator=g).argsort(1)[:, :n]
        batch = (X[idx], y[idx])
        split_vals.append(torch.cat(tuple(t.reshape(-1) for t in evaluate(s, batch))))
        full_vals.append(torch.cat(tuple(t.reshape(-1) for t in evaluate(full, batch))))
        mis_vals.append(torch.cat(tuple(t.reshape(-1) for t in evaluate(misscaled, batch))))
    split_vals, full_vals, mis_vals = (torch.stack(x).numpy() for x in (split_vals, full_vals, mis_vals))
    exact_v, exact_g = _exact_full_data(model, mixed.numpy(), r.numpy(), s.scale)
    exact = np.concatenate([exact_v, exact_g.reshape(-1)])  # [C + C·P]: values, then gradients
    mean, se = split_vals.mean(0), split_vals.std(0, ddof=1) / math.sqrt(R)
    z = np.abs(mean - exact) / se
    assert (z < 5).all(), (z, mean, exact)
    # the full-batch-per-copy estimator: same expectation; paired differences on the same batches
    diff = split_vals - full_vals
    z_pair = np.abs(diff.mean(0)) / (diff.std(0, ddof=1) / math.sqrt(R))
    assert (z_pair < 5).all(), z_pair
    z_full = np.abs(full_vals.mean(0) - exact) / (full_vals.std(0, ddof=1) / math.sqrt(R))
    assert (z_full < 5).all(), z_full
    # the same batches with the slices scaled by N/n (the base told N/K): detected
    z_mis = np.abs(mis_vals.mean(0) - exact) / (mis_vals.std(0, ddof=1) / math.sqrt(R))
    assert z_mis.max() > 50, z_mis
    # split costs noise: every gradient coordinate's variance is at least the full-batch one's
    assert (split_vals[:, C:].var(0) > full_vals[:, C:].var(0)).all()


# ---------------------------------------------------------------------------------------
# 2. one batched base call over C·K mixed vectors, on a view of the batch
# ---------------------------------------------------------------------------------------
class _Counting:
    """Forwards an energy and records every base call (θ shape, batch shapes, batch storage)."""

    def __init__(self, base):
        self.base = base
        self.calls = []

    def __getattr__(self, name):
        return getattr(self.base, name)

    def _record(self, theta, batch):
        self.calls.append(
            (
                tuple(theta.shape),
                tuple(tuple(t.shape) for t in batch),
                tuple(t.untyped_storage().data_ptr() for t in batch),
            )
        )

    def value_and_grad(self, theta, batch):
        self._record(theta, batch)
        return self.base.value_and_grad(theta, batch)

    def value(self, theta, batch):
        self._record(theta, batch)
        return self.base.value(theta, batch)


def test_one_batched_base_call_per_step_on_slices():
    energy, (X, y), _ = _problem("module", N=24, d=3)
    counting = _Counting(energy)
    C, K, n, P = 3, 4, 8, 3
    s = _started(counting, fully_factorized(P), mask=BernoulliMask(0.5), K=K, C=C)
    idx = torch.rand(C, 24, generator=torch.Generator().manual_seed(1)).argsort(1)[:, :n]
    batch = (X[idx], y[idx])
    theta = torch.zeros(C, P, dtype=F64)
    s.value_and_grad(theta, batch)
    s.value(theta, batch)
    assert len(counting.calls) == 2
    for shape, shapes, ptrs in counting.calls:
        assert shape == (C * K, P) and shapes == ((C * K, n // K, 3), (C * K, n // K, 1))
        assert ptrs == tuple(t.untyped_storage().data_ptr() for t in batch)  # a view: no copy
    # chunks of max_copies_per_call copies: ceil(K / 3) = 2 calls, C·3 then C·1 mixed vectors
    counting.calls.clear()
    s_chunked = _started(counting, fully_factorized(P), mask=BernoulliMask(0.5), K=K, C=C, max_copies_per_call=3)
    s_chunked.value_and_grad(theta, batch)
    assert [c[:2] for c in counting.calls] == [
        ((C * 3, P), ((C * 3, 2, 3), (C * 3, 2, 1))),
        ((C * 1, P), ((C * 1, 2, 3), (C * 1, 2, 1))),
    ]
    # no random numbers: after an evaluation the θ̃/mask generator is where the unsplit one is
    pair = [
        _started(energy, fully_factorized(P), mask=BernoulliMask(0.5), K=K, C=C, split=split) for split in (True, False)
    ]
    for e in pair:
        e.value_and_grad(theta, batch)
        e.value(theta, batch)
    assert torch.equal(pair[0]._state["generator"].get_state(), pair[1]._state["generator"].get_state())
    # ρ = 1 (every copy at θ): chunked or not, the K slices together are the chain's batch
    # once, so the value and gradient are the base energy's on the whole batch (a slice used
    # twice or skipped, or another chain's slice, would change them)
    theta = torch.randn(C, P, generator=torch.Generator().manual_seed(2), dtype=F64)
    expected = energy.value_and_grad(theta, batch)
    for chunk in (None, 3, 1):
        got = _started(
            energy, fully_factorized(P), mask=BernoulliMask(1.0), K=K, C=C, max_copies_per_call=chunk
        ).value_and_grad(theta, batch)
        assert torch.allclose(got[0], expected[0], rtol=1e-12) and torch.allclose(got[1], expected[1], rtol=1e-11)
    # in a run: one base call per SGLD iteration, and grad_evals 1 per iteration (K copies on n/K rows)
    counting.calls.clear()
    sd = StructuredEnergy(
        counting, fully_factorized(P), ChainHistory(16), mask=BernoulliMask(0.5), num_copies=K, split_batch=True
    )
    chain = sm.sample(sd, None, sm.SGLD(1e-3), 7, data=(X, y), batch_size=n, num_chains=C, progress=False)
    assert len(counting.calls) == 7
    assert all(c[:2] == ((C * K, P), ((C * K, 2, 3), (C * K, 2, 1))) for c in counting.calls)
    assert chain.info["grad_evals"].tolist() == [1] * 7


# ---------------------------------------------------------------------------------------
# 3. stationary law
# ---------------------------------------------------------------------------------------
def _stationary_problem():
    """Linear regression, N = 16, d = 2, correlated features (posterior correlation −0.51)."""
    N, d = 16, 2
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, d, generator=g, dtype=F64) @ torch.tensor([[1.0, 0.0], [0.6, 0.8]], dtype=F64).T
    y = X @ torch.tensor([0.5, -1.0], dtype=F64) + torch.randn(N, generator=g, dtype=F64)
    energy = _density_energy(N, d, vectorized=True)
    return energy, (X, y.unsqueeze(1)), LinearRegression(X.numpy(), y.numpy(), 1.0, 1.0)


# eps = 0.005 (ε·λ_max/2 = 0.064), 256 chains x 3000 steps (750 burn-in); batches of n = 8 drawn
# without replacement, K = 4 copies on slices of 2, Bernoulli(0.5) masks over 2 groups.
EPS, STEPS, CHAINS, N_BATCH, K_COPIES = 0.005, 3000, 256, 8, 4


def _per_chain_moments(energy, data, rho, split, centre):
    s = StructuredEnergy(
        energy,
        fully_factorized(2),
        ChainHistory(1000),
        mask=BernoulliMask(rho),
        num_copies=K_COPIES,
        seed=1,
        split_batch=split,
    )
    ch = sm.sample(
        s,
        torch.as_tensor(centre),
        sm.SGLD(EPS),
        STEPS,
        burn_in=STEPS // 4,
        num_chains=CHAINS,
        seed=2,
        data=data,
        batch_size=N_BATCH,
        batching="without_replacement",
        progress=False,
    )
    x = ch.samples  # [C, D, P]
    return torch.cat([x.mean(1), (x - torch.as_tensor(centre)).square().mean(1)], 1).numpy()  # [C, 4]


def test_split_batch_has_the_stationary_law_of_the_full_batch_estimator():
    """Sd-SGLD, ρ = 0.5: split and per-copy full batch give the same means and variances
    (independent-chain standard errors); a paired comparison (same random numbers) resolves
    the split's extra gradient noise as a small positive variance excess, O(ε). At ρ = 1 the
    split chain has the exact discretised SGLD law with its minibatch noise (affine recursion
    over all C(16, 8) batches). Slices scaled by N/n instead of N/(n/K) fail both checks by
    far."""
    energy, data, model = _stationary_problem()
    pm, pc = model.posterior()
    full = _per_chain_moments(energy, data, 0.5, False, pm)
    split = _per_chain_moments(energy, data, 0.5, True, pm)
    mis = _per_chain_moments(energy.with_num_data(16 // K_COPIES), data, 0.5, True, pm)  # N/n on slices

    se = np.sqrt((full.var(0, ddof=1) + split.var(0, ddof=1)) / CHAINS)  # independent chains
    diff = split.mean(0) - full.mean(0)
    # means, E(θ − μ)²: measured |diff| ≤ 1.3 SE (SE ≈ 0.0049 mean, 0.0010 second moment)
    assert (np.abs(diff) < 4.5 * se).all(), (diff, se)
    # paired (the two runs share every random number): the means agree tightly, the split
    # variance is larger by its extra gradient noise (measured +1.5%, ~8 paired SE, over 4 seeds)
    pair = split - full
    pair_se = pair.std(0, ddof=1) / math.sqrt(CHAINS)
    assert (np.abs(pair.mean(0)[:2]) < 4.5 * pair_se[:2]).all(), (pair.mean(0), pair_se)
    excess = pair.mean(0)[2:] / full.mean(0)[2:]
    assert ((excess > 0) & (excess < 0.05)).all(), excess
    # mis-scaled: the likelihood is down-weighted by K (a tempered posterior), far outside
    assert (np.abs(mis.mean(0) - full.mean(0)) / se).max() > 50

    # ρ = 1: masks all one, the split energy is (1/K) Σ_k Û(θ; slice k) = Û(θ; batch)
    one = _per_chain_moments(energy, data, 1.0, True, pm)
    rec = sgld_recursion(model, EPS, N_BATCH, batching="without_replacement")
    m_exact, V_exact = rec.moments()
    exact = np.concatenate([m_exact, np.diag(V_exact) + (m_exact - pm) ** 2])
    se_one = one.std(0, ddof=1) / math.sqrt(CHAINS)
    assert (np.abs(one.mean(0) - exact) < 4.5 * se_one).all(), (one.mean(0), exact, se_one)
    # the N/n-on-slices energy at ρ = 1 is SGLD on a likelihood weighted 1/K (noise_std √K)
    wrong = LinearRegression(model.X, model.y, math.sqrt(K_COPIES), 1.0)
    m_w, V_w = sgld_recursion(wrong, EPS, N_BATCH, batching="without_replacement").moments()
    wrong_exact = np.concatenate([m_w, np.diag(V_w) + (m_w - pm) ** 2])
    assert (np.abs(one.mean(0) - wrong_exact) / se_one).max() > 50


def test_rho_one_and_one_group_split_reproduce_the_base_sampler():
    """ρ = 1 (any K dividing n) and S-SGMCMC with M = 1: the split energy is the base energy
    up to rounding, so the chain is the base sampler's chain."""
    energy, data, _ = _stationary_problem()
    kw = dict(data=data, batch_size=8, num_chains=3, seed=5, progress=False)
    base = sm.sample(energy, torch.zeros(2, dtype=F64), sm.SGLD(0.01), 40, **kw)
    for s in (
        StructuredEnergy(energy, fully_factorized(2), 20, mask=BernoulliMask(1.0), num_copies=4, split_batch=True),
        StructuredEnergy(energy, round_robin(2, 1), 20, split_batch=True),
    ):
        ch = sm.sample(s, torch.zeros(2, dtype=F64), sm.SGLD(0.01), 40, **kw)
        assert torch.allclose(ch.samples, base.samples, rtol=0, atol=1e-11)


# ---------------------------------------------------------------------------------------
# 4. errors
# ---------------------------------------------------------------------------------------
def test_split_batch_errors():
    energy, (X, y), _ = _problem("module", N=12, d=3)
    part = fully_factorized(3)
    sd = StructuredEnergy(energy, part, 10, mask=BernoulliMask(0.5), num_copies=4, split_batch=True)
    # n not divisible by K: check_batch_size (before compute) and lazily at the first evaluation
    with pytest.raises(ValueError, match=r"n = 6 rows into K = 4 slices.*not.*batch_size=4 or 8"):
        sd.check_batch_size(6)
    sd.check_batch_size(8)
    sd.check_batch_size(12, batching="with_replacement")
    with pytest.raises(ValueError, match=r"n = 6 rows into K = 4"):
        sm.sample(sd, None, sm.SGLD(1e-3), 3, data=(X, y), batch_size=6, progress=False)
    # no minibatch: batch=None at evaluation, batch_size=None or N, stratified batches
    s = _started(energy, part, mask=BernoulliMask(0.5), K=4, C=1)
    with pytest.raises(ValueError, match="needs a minibatch.*batch=None"):
        s.value_and_grad(torch.zeros(1, 3, dtype=F64), None)
    with pytest.raises(ValueError, match="full data"):
        sd.check_batch_size(None)
    with pytest.raises(ValueError, match="whole data set"):
        sd.check_batch_size(12)
    with pytest.raises(ValueError, match="stratified"):
        sd.check_batch_size(8, batching="stratified")
    # a base with no likelihood of its own (an opaque log density): nothing to rescale per slice
    opaque = sm.LogDensityEnergy(lambda t, b: -0.5 * t.square().sum(), 3)
    with pytest.raises(ValueError, match="requires_data is False"):
        StructuredEnergy(opaque, part, 10, mask=BernoulliMask(0.5), num_copies=2, split_batch=True)
    StructuredEnergy(opaque, part, 10, mask=BernoulliMask(0.5), num_copies=2)  # fine without splitting
    # not a bool
    for bad in (1, "yes", None, np.bool_(True)):
        with pytest.raises(TypeError, match="split_batch must be True or False"):
            StructuredEnergy(energy, part, 10, mask=BernoulliMask(0.5), num_copies=2, split_batch=bad)
    # S-SGMCMC splits between its M copies: the same rule with K = M = 3
    s_split = StructuredEnergy(energy, part, 10, split_batch=True)
    with pytest.raises(ValueError, match=r"n = 8 rows into K = 3"):
        s_split.check_batch_size(8)
    s_split.check_batch_size(6)
    # without split_batch nothing is refused
    StructuredEnergy(energy, part, 10, mask=BernoulliMask(0.5), num_copies=4).check_batch_size(None)


def test_split_batch_in_config_fresh_and_with_num_data():
    energy, _, _ = _problem("module")
    s = StructuredEnergy(
        energy,
        fully_factorized(3),
        ChainHistory(10, mode="reservoir"),
        mask=UniformMask(),
        num_copies=3,
        split_batch=True,
    )
    for e in (s, s.fresh(), s.with_num_data(100)):
        assert e.split_batch is True and e.config()["split_batch"] is True and e.evaluations_per_call == 1
    cfg = s.config()
    assert cfg["kind"] == "Sd-SGMCMC" and cfg["num_copies"] == 3 and cfg["mask"] == {"law": "UniformMask"}
    assert cfg["history"]["mode"] == "reservoir"
    off = StructuredEnergy(energy, fully_factorized(3), 10, mask=BernoulliMask(0.2), num_copies=3)
    assert off.config()["split_batch"] is False and off.evaluations_per_call == 3
    assert off.config()["mask"] == {"law": "BernoulliMask", "rho": 0.2, "at_least_one": False}


def test_tuning_arms_pass_split_batch_through():
    energy, data, _ = linreg(N=12, d=2)
    s = {"partition": "factorized", "mask": "bernoulli", "rho": 0.5, "num_copies": 2, "split_batch": True}
    arm = Arm({"name": "sgld", "lr": 0.02}, 4, structured=s)
    assert "split" in arm.label and Arm.from_dict(arm.to_dict()) == arm
    built = structured_energy(energy, arm.structured)
    assert built.split_batch is True and built.num_copies == 2
    assert structured_energy(energy, {**s, "split_batch": False}).split_batch is False
    with pytest.raises(ValueError, match="split_batch must be true or false"):
        Arm({"name": "sgld", "lr": 0.02}, 4, structured={**s, "split_batch": "yes"})
    init = torch.zeros(2, dtype=F64)
    with pytest.raises(ValueError, match=r"n = 3 rows into K = 2"):  # refused before any compute
        mamba(
            energy,
            init,
            [Arm({"name": "sgld", "lr": 0.02}, 3, structured=s)],
            Budget(iterations=1000),
            data=data,
            progress=False,
        )
    res = mamba(
        energy,
        init,
        [arm, Arm({"name": "sgld", "lr": 0.02}, 4, structured={**s, "split_batch": False})],
        Budget(grad_evals=40),
        data=data,
        thin=1,
        progress=False,
    )
    r0 = {r["index"]: r for r in res.rounds[0]["results"]}
    assert r0[0]["iterations"] == 20 and r0[1]["iterations"] == 10  # split costs 1 per step, K = 2 otherwise


# ---------------------------------------------------------------------------------------
# 5. split_batch=False: exactly the chains of the code before the option existed
# ---------------------------------------------------------------------------------------
class _Legacy(StructuredEnergy):
    """StructuredEnergy._evaluate as it was before split_batch (commit 1f78042), verbatim."""

    def _evaluate(self, theta, batch, grad):
        generator = self._state["generator"]
        if self._state["steps"] < self.warmup_steps:
            return self.base.value_and_grad(theta, batch) if grad else (self.base.value(theta, batch), None)
        C, P = theta.shape
        ids = self.partition.group_ids.to(theta.device)
        M, K = self.partition.num_groups, self.num_copies
        value = theta.new_zeros(C)
        total = torch.zeros_like(theta) if grad else None
        for k0 in range(0, K, self.max_copies_per_call):
            k1 = min(K, k0 + self.max_copies_per_call)
            k = k1 - k0
            r = self._copy_masks(C, k0, k1, theta.dtype, theta.device, generator)[:, :, ids]
            tilde = self.history.draw(k, ids, M, generator, theta.dtype)
            mixed = torch.addcmul(tilde, r, theta.unsqueeze(1) - tilde).reshape(C * k, P)
            rep = (
                None
                if batch is None
                else tuple(
                    (t.expand(k, *t.shape[1:]) if t.shape[0] == 1 else t.repeat_interleave(k, dim=0)) for t in batch
                )
            )
            if grad:
                u, g = self.base.value_and_grad(mixed, rep)
                total += (r * g.view(C, k, P)).sum(1)
            else:
                u = self.base.value(mixed, rep)
            value += u.view(C, k).sum(1)
        value *= self.scale
        if grad and self.scale != 1.0:
            total *= self.scale
        return value, total


def _mlp_problem():
    torch.manual_seed(0)
    net = mlp([3, 5, 2], torch.nn.Tanh).double()
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, generator=g, dtype=F64)
    y = torch.randint(0, 2, (40,), generator=g)
    return sm.ModuleEnergy(net, "categorical"), (X, y)


# Draws recorded with the code before split_batch existed (commit 1f78042): the last draw's first
# four coordinates of both chains and the sum of all draws, SGLD(1e-3), 25 iterations, batch 10,
# 2 chains, seed 3 (sha256 of the float64 draws on that machine: sd 2e49037f…, s 019b6609…).
GOLDEN = {
    "sd": (
        [
            [0.03827163112011489, 0.2904032839138717, -0.3495063257228752, -0.1261434595768395],
            [-0.25795931636299946, 0.15587458003801644, -0.32509811723085963, -0.3233977758077218],
        ],
        -25.25735203126193,
    ),
    "s": (
        [
            [0.03930298875161149, 0.28955537193251113, -0.35036147836565096, -0.12651251039056643],
            [-0.2562418181907104, 0.15431319975936014, -0.3219592314189668, -0.3224868309372767],
        ],
        -25.514132183802232,
    ),
}


def test_split_batch_false_keeps_the_chains_bit_for_bit():
    energy, data = _mlp_problem()
    make = {
        "sd": lambda cls, **kw: cls(
            energy,
            round_robin(energy.space.dim, 4),
            ChainHistory(20),
            mask=BernoulliMask(0.5),
            num_copies=3,
            seed=2,
            **kw,
        ),
        "s": lambda cls, **kw: cls(energy, by_layer(energy.space), ChainHistory(20), seed=2, **kw),
    }
    kw = dict(data=data, batch_size=10, num_chains=2, seed=3, progress=False)
    for name, build in make.items():
        default = sm.sample(build(StructuredEnergy), None, sm.SGLD(1e-3), 25, **kw)
        explicit = sm.sample(build(StructuredEnergy, split_batch=False), None, sm.SGLD(1e-3), 25, **kw)
        legacy = sm.sample(build(_Legacy), None, sm.SGLD(1e-3), 25, **kw)
        assert torch.equal(default.samples, explicit.samples) and torch.equal(default.samples, legacy.samples)
        last, total = GOLDEN[name]
        assert torch.allclose(default.samples[:, -1, :4], torch.tensor(last, dtype=F64), rtol=0, atol=1e-12)
        assert float(default.samples.sum()) == pytest.approx(total, rel=0, abs=1e-10)
    # chunked copies, warm-up and pSGLD as well (against the re-implementation)
    kw2 = dict(data=data, batch_size=8, num_chains=3, seed=7, progress=False)
    ours = sm.sample(
        make["sd"](StructuredEnergy, max_copies_per_call=2, warmup_steps=3), None, sm.PSGLD(1e-3), 15, **kw2
    )
    theirs = sm.sample(make["sd"](_Legacy, max_copies_per_call=2, warmup_steps=3), None, sm.PSGLD(1e-3), 15, **kw2)
    assert torch.equal(ours.samples, theirs.samples)
