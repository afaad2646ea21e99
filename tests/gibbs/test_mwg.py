"""Blocked Metropolis-within-Gibbs: invariance against exact posteriors, incremental == generic,
block layouts, bookkeeping, adaptation, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from support.runs import Interrupt, interrupt_at
from torch import nn

import structmc as sm
from structmc.gibbs import Adapt, MetropolisWithinGibbs, acceptance, why_not_incremental
from structmc.models import MLP
from structmc.partitions import by_finer_nodes, by_layer, by_neuron, fully_factorized, round_robin
from structmc.zoo import energy_for

F64 = torch.float64


def moments_within_mc_error(samples: torch.Tensor, mean: torch.Tensor, cov: torch.Tensor, z: float = 4.5):
    """Chains are independent: per-chain averages of θ and of θθᵀ give means with standard
    errors across chains. Asserts every entry of the mean and covariance is within z SE."""
    C = samples.shape[0]
    m_c = samples.mean(1)  # [C, d]
    centred = samples - mean
    s_c = torch.einsum("cti,ctj->cij", centred, centred) / samples.shape[1]  # [C, d, d] about the true mean
    m_hat, m_se = m_c.mean(0), m_c.std(0) / math.sqrt(C)
    s_hat, s_se = s_c.mean(0), s_c.std(0) / math.sqrt(C)
    assert bool(((m_hat - mean).abs() < z * m_se).all()), (m_hat, mean, m_se)
    assert bool(((s_hat - cov).abs() < z * s_se).all()), (s_hat, cov, s_se)
    # and the test has power: a covariance 10% off would be more than 4.5 SE away
    scale = cov.diagonal().sqrt().outer(cov.diagonal().sqrt())
    assert bool((z * s_se < 0.1 * scale).all()), s_se / scale


@pytest.mark.parametrize("mala", [False, True])
def test_full_batch_mwg_leaves_a_correlated_gaussian_invariant(mala):
    """A 4-d Gaussian with all correlations 0.6, one block per coordinate (a sampler that keeps
    rejected values in its proposal vector, as the reference code does, fails this test)."""
    cov = torch.full((4, 4), 0.6, dtype=F64) + 0.4 * torch.eye(4, dtype=F64)
    cov = cov * torch.tensor([1.0, 2.0, 0.5, 1.5], dtype=F64).sqrt().outer(
        torch.tensor([1.0, 2.0, 0.5, 1.5], dtype=F64).sqrt()
    )
    mean = torch.tensor([1.0, -0.5, 0.3, 2.0], dtype=F64)
    prec = torch.linalg.inv(cov)
    energy = sm.LogDensityEnergy(lambda t, b: -0.5 * (t - mean) @ prec @ (t - mean), 4)
    sampler = MetropolisWithinGibbs(fully_factorized(4), 1.0, mala=mala)
    init = (
        mean + torch.randn(400, 4, generator=torch.Generator().manual_seed(0), dtype=F64) @ torch.linalg.cholesky(cov).T
    )
    chain = sm.sample(energy, init, sampler, 300, num_chains=400, seed=1, progress=False)
    moments_within_mc_error(chain.samples, mean, cov)
    rate = float(chain.info["accept"].double().mean())
    assert 0.2 < rate < 0.98  # both outcomes common: the accept rule is exercised


def _correlated_gaussian():
    """The 4-d Gaussian of the invariance test above: mean, covariance and its energy."""
    sd = torch.tensor([1.0, 2.0, 0.5, 1.5], dtype=F64).sqrt()
    cov = (torch.full((4, 4), 0.6, dtype=F64) + 0.4 * torch.eye(4, dtype=F64)) * sd.outer(sd)
    mean = torch.tensor([1.0, -0.5, 0.3, 2.0], dtype=F64)
    prec = torch.linalg.inv(cov)
    log_prob = lambda t, b=None: -0.5 * (t - mean) @ prec @ (t - mean)  # noqa: E731
    return mean, cov, log_prob, sm.LogDensityEnergy(log_prob, 4)


def test_reference_defect_is_the_reference_codes_sweep():
    """``reference_defect=True`` takes the decisions of eeyore's ``Gibbs.draw`` (lines 71-94,
    transcribed below on the same random numbers): one proposal vector per sweep, rejected
    blocks kept in it, the target of the proposal vector cached on acceptance. The default
    kernel, on the same numbers, does not."""
    mean, cov, log_prob, energy = _correlated_gaussian()
    C, sweeps = 40, 3
    theta0 = mean + 2.0 * torch.randn(C, 4, generator=torch.Generator().manual_seed(5), dtype=F64)
    runs = {}
    for defect in (False, True):
        kernel = MetropolisWithinGibbs(fully_factorized(4), 1.0, reference_defect=defect).prepare(energy)
        state, oracle, gen = kernel.init(theta0), sm.Oracle(energy), torch.Generator().manual_seed(7)
        accepts, energies = [], []
        for _ in range(sweeps):
            state, info = kernel.step(state, oracle, None, gen)
            accepts.append(info["accept"])
            energies.append(info["energy"])
        runs[defect] = (state.theta, torch.stack(accepts), torch.stack(energies))
    # the transcription: the kernel's draws are N(0, 1) per parameter, then one uniform per block
    gen = torch.Generator().manual_seed(7)
    theta = theta0.clone()
    accepts, cached = torch.zeros(sweeps, C, 4, dtype=torch.bool), torch.zeros(sweeps, C, dtype=F64)
    jointly_proposed = 0
    for t in range(sweeps):
        noise = torch.randn(C, 4, generator=gen, dtype=F64)
        log_u = torch.rand(C, 4, generator=gen, dtype=F64).log()
        for c in range(C):
            current = log_prob(theta[c])  # re-evaluated each sweep (the reference with minibatches, line 68)
            proposed = theta[c].clone()  # line 71
            for b in range(4):
                jointly_proposed += int(bool((proposed != theta[c]).any()))  # a rejected block rides along
                proposed[b] = proposed[b] + 1.0 * noise[c, b]  # lines 82-84: centred at proposed[b] = θ_b
                target = log_prob(proposed)  # line 85
                if log_u[c, b] < target - current:  # lines 87-88
                    theta[c, b] = proposed[b]  # line 89
                    current = target  # line 90: the proposal vector's target
                    accepts[t, c, b] = True
            cached[t, c] = -current
    got_theta, got_accept, got_energy = runs[True]
    assert jointly_proposed > 20  # the defect is exercised: many blocks proposed with a rejected one
    assert torch.equal(got_accept, accepts) and torch.equal(got_theta, theta)
    torch.testing.assert_close(got_energy, cached, rtol=1e-12, atol=1e-12)  # the reference's cached target
    ok_theta, ok_accept, _ = runs[False]
    assert not torch.equal(ok_accept, accepts) and not torch.equal(ok_theta, theta)
    assert torch.equal(ok_accept[0, :, 0], accepts[0, :, 0])  # the first block sees the state in both


def test_reference_defect_loses_the_invariant_gaussian_and_its_acceptance_falls_along_the_sweep():
    """The invariance test's target and settings, both kernels on the same numbers: the correct
    one keeps the Gaussian (moments within 4.5 SE), the reference's defect does not (its
    marginal variances of blocks 2-4 ~9 % low, 8-10 SE over seeds 0-3 at this length), and
    its acceptance falls block after block along the sweep (0.61, 0.51, 0.32, 0.28; correct:
    0.61, 0.71, 0.50, 0.67): the signature of the paper's fall of acceptance with depth."""
    mean, cov, _, energy = _correlated_gaussian()
    init = (
        mean + torch.randn(400, 4, generator=torch.Generator().manual_seed(0), dtype=F64) @ torch.linalg.cholesky(cov).T
    )
    chains = {
        defect: sm.sample(
            energy,
            init,
            MetropolisWithinGibbs(fully_factorized(4), 1.0, reference_defect=defect),
            600,
            num_chains=400,
            seed=1,
            progress=False,
        )
        for defect in (False, True)
    }
    moments_within_mc_error(chains[False].samples, mean, cov)
    s = chains[True].samples
    centred = s - mean
    s_c = torch.einsum("cti,ctj->cij", centred, centred) / s.shape[1]  # per-chain second moments
    z = (s_c.mean(0) - cov) / (s_c.std(0) / math.sqrt(s.shape[0]))
    assert bool((z.diagonal()[1:] < -6).all()), z.diagonal()  # the defect's stationary law is narrower
    rate = {d: c.info["accept"].double().mean((0, 2)) for d, c in chains.items()}  # [4] per block
    assert bool((rate[True][1:] < rate[True][:-1] - 0.02).all()), rate[True]  # falls along the sweep
    assert bool((rate[True][1:] < rate[False][1:] - 0.15).all()), rate  # well below the correct kernel's
    assert abs(float(rate[True][0] - rate[False][0])) < 0.02  # block 1 sees the state in both


def test_reference_defect_incremental_path_gives_the_generic_chain():
    """With ``reference_defect`` the incremental evaluator's caches follow the proposal vector
    (every proposal committed): the same chain as the full forward, which evaluates the vector
    itself; blocks out of layer order fall back to the full forward."""
    from structmc.partitions import Partition

    g = torch.Generator().manual_seed(1)
    X, y = torch.randn(60, 4, generator=g, dtype=F64), torch.randint(0, 3, (60,), generator=g)
    torch.manual_seed(0)
    energy = sm.ModuleEnergy(MLP((4, 3, 3, 3), "sigmoid").double(), "categorical", prior_std=3.0)
    for part in (by_neuron(energy.space), by_finer_nodes(energy.space, 2), by_layer(energy.space)):
        for C in (1, 3):
            chains = {}
            for ev in ("generic", "incremental", "correct"):
                sampler = MetropolisWithinGibbs(
                    part, 0.3, evaluator="incremental" if ev == "correct" else ev, reference_defect=ev != "correct"
                )
                chains[ev] = sm.sample(
                    energy, None, sampler, 8, data=(X, y), batch_size=20, num_chains=C, seed=1, progress=False
                )
            a, b = chains["generic"], chains["incremental"]
            assert torch.equal(a.samples, b.samples) and torch.equal(a.info["accept"], b.info["accept"])
            torch.testing.assert_close(a.info["energy"], b.info["energy"], rtol=1e-12, atol=1e-10)
            assert 0 < float(a.info["accept"].double().mean()) < 1
            if part.num_groups > 3:  # several blocks, some rejected: the defect changes the chain
                assert not torch.equal(a.info["accept"], chains["correct"].info["accept"])
    layers = by_layer(energy.space)  # the same blocks, visited output layer first
    reversed_layers = Partition(2 - layers.group_ids, 3, layer=layers.layer.flip(0), layer_names=layers.layer_names)
    assert MetropolisWithinGibbs(reversed_layers, 0.1).prepare(energy)._incremental is not None
    assert MetropolisWithinGibbs(reversed_layers, 0.1, reference_defect=True).prepare(energy)._incremental is None
    with pytest.raises(ValueError, match="reference_defect=True needs blocks in layer order"):
        MetropolisWithinGibbs(reversed_layers, 0.1, evaluator="incremental", reference_defect=True).prepare(energy)


def test_reference_defect_is_in_the_config_and_a_resume_with_the_other_setting_is_refused(tmp_path):
    energy = energy_for("mlp_xor", seed=0)
    g = torch.Generator().manual_seed(0)
    X, y = torch.rand(60, 2, generator=g), torch.randint(0, 2, (60,), generator=g).float()
    part = by_neuron(energy.space)
    assert "reference_defect" not in MetropolisWithinGibbs(part, 0.04).config()  # old runs' configs unchanged
    assert MetropolisWithinGibbs(part, 0.04, reference_defect=True).config()["reference_defect"] is True
    kw = dict(data=(X, y), batch_size=20, num_chains=2, seed=3, progress=False, out_dir=tmp_path, checkpoint_every=5)
    sm.sample(energy, None, MetropolisWithinGibbs(part, 0.04, reference_defect=True), 10, **kw)
    for other in (False, True):
        if other:
            kw_other = dict(kw, out_dir=tmp_path / "correct")
            sm.sample(energy, None, MetropolisWithinGibbs(part, 0.04), 10, **kw_other)
            sampler, where = MetropolisWithinGibbs(part, 0.04, reference_defect=True), kw_other
        else:
            sampler, where = MetropolisWithinGibbs(part, 0.04), kw
        with pytest.raises(ValueError, match="cannot resume: config differs"):
            sm.sample(energy, None, sampler, 20, resume=True, **where)
    resumed = sm.sample(energy, None, MetropolisWithinGibbs(part, 0.04, reference_defect=True), 20, resume=True, **kw)
    assert resumed.config["sampler"]["reference_defect"] is True


def test_bayesian_linear_regression_as_an_mlp_matches_the_conjugate_posterior():
    """MLP((3, 1)) with a Gaussian likelihood of known noise: the posterior is exactly Gaussian.
    Full batch, one block per parameter, the incremental evaluator (checked to be used)."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 3, generator=g, dtype=F64)
    y = X @ torch.tensor([1.0, -2.0, 0.5], dtype=F64) + 0.3 + 0.5 * torch.randn(40, generator=g, dtype=F64)
    energy = sm.ModuleEnergy(MLP((3, 1)).double(), "gaussian", noise_std=0.5, prior_std=2.0)
    Xb = torch.cat([X, torch.ones(40, 1, dtype=F64)], 1)  # [w, b] is the flat order
    precision = Xb.T @ Xb / 0.25 + torch.eye(4, dtype=F64) / 4.0
    cov = torch.linalg.inv(precision)
    mean = cov @ (Xb.T @ y) / 0.25
    part = by_finer_nodes(energy.space, 1)
    sampler = MetropolisWithinGibbs(part, 0.02)
    assert sampler.prepare(energy)._incremental is not None
    init = mean + torch.randn(300, 4, generator=g, dtype=F64) @ torch.linalg.cholesky(cov).T
    chain = sm.sample(energy, init, sampler, 300, data=(X, y), num_chains=300, seed=2, progress=False)
    moments_within_mc_error(chain.samples, mean, cov)


@pytest.mark.parametrize(
    "likelihood, act",
    [("categorical", "sigmoid"), ("bernoulli", "tanh"), ("gaussian", "relu"), ("categorical", "softmax")],
)
def test_incremental_path_gives_the_generic_chain(likelihood, act):
    """Same seed: same states and the same acceptance for every block, several sweeps, float64."""
    torch.manual_seed(0)
    out = 3 if likelihood == "categorical" else 1
    g = torch.Generator().manual_seed(1)
    X = torch.randn(60, 4, generator=g, dtype=F64)
    y = {
        "categorical": torch.randint(0, 3, (60,), generator=g),
        "bernoulli": torch.randint(0, 2, (60,), generator=g).to(F64),
        "gaussian": torch.randn(60, generator=g, dtype=F64),
    }[likelihood]
    energy = sm.ModuleEnergy(
        MLP((4, 3, 3, out), act).double(),
        likelihood,
        prior_std={"*.bias": 2.0, "*": 3.0},
        noise_std=0.5 if likelihood == "gaussian" else None,
    )
    for part in (by_neuron(energy.space), by_finer_nodes(energy.space, 2), by_layer(energy.space)):
        for C in (1, 3):
            chains = {}
            for ev in ("generic", "incremental"):
                sampler = MetropolisWithinGibbs(part, 0.05, evaluator=ev)
                chains[ev] = sm.sample(
                    energy, None, sampler, 8, data=(X, y), batch_size=20, num_chains=C, seed=1, progress=False
                )
            a, b = chains["generic"], chains["incremental"]
            assert torch.equal(a.samples, b.samples) and torch.equal(a.info["accept"], b.info["accept"])
            torch.testing.assert_close(a.info["energy"], b.info["energy"], rtol=1e-12, atol=1e-10)
            assert 0 < float(a.info["accept"].double().mean()) < 1  # both outcomes exercised


def test_incremental_path_gives_the_generic_chain_under_other_priors():
    """The incremental evaluator's prior differences for non-Gaussian and off-centre priors."""
    from structmc.priors import Laplace, Normal, StudentT

    g = torch.Generator().manual_seed(1)
    X = torch.randn(60, 4, generator=g, dtype=F64)
    y = torch.randint(0, 3, (60,), generator=g)
    for prior in ({"*.bias": Laplace(0.1, 1.0), "*": StudentT(3.0, scale=2.0)}, Normal(loc=0.3, scale=2.0)):
        torch.manual_seed(0)
        energy = sm.ModuleEnergy(MLP((4, 3, 3), "tanh").double(), "categorical", prior=prior)
        chains = {}
        for ev in ("generic", "incremental"):
            sampler = MetropolisWithinGibbs(by_neuron(energy.space), 0.05, evaluator=ev)
            chains[ev] = sm.sample(
                energy, None, sampler, 8, data=(X, y), batch_size=20, num_chains=3, seed=1, progress=False
            )
        a, b = chains["generic"], chains["incremental"]
        assert torch.equal(a.samples, b.samples) and torch.equal(a.info["accept"], b.info["accept"])
        torch.testing.assert_close(a.info["energy"], b.info["energy"], rtol=1e-12, atol=1e-10)


def test_block_layouts_of_the_papers_networks():
    xor = energy_for("mlp_xor")
    blocks = by_neuron(xor.space).blocks()
    assert [b.tolist() for b in blocks] == [[0, 1, 4], [2, 3, 5], [6, 7, 8]]  # a node's two weights and its bias
    mnist = energy_for("mlp_gibbs")
    assert mnist.space.dim == 8180 and by_neuron(mnist.space).num_groups == 40
    finer = by_finer_nodes(mnist.space, 10)  # the reference code's chunks of 10: 78 per first-layer node
    assert finer.num_groups == 810
    first = finer.sizes()[:78]
    assert int((first == 11).sum()) == 5 and int((first == 10).sum()) == 73
    sampler = MetropolisWithinGibbs(finer, [1e-2, 1e-4, 1e-4, 1e-5])  # the paper's per-layer values in one line
    assert sampler.block_var[:780].eq(1e-2).all() and sampler.block_var[-10:].eq(1e-5).all()


def test_rejected_proposals_leave_no_trace_and_non_finite_ones_are_rejected():
    """The log density is NaN for θ₀ > 1: such proposals are rejected, the run goes on, and the
    stored energy always belongs to the stored state."""

    def log_prob(t, batch):
        lp = -0.5 * (t * t).sum()
        return torch.where(t[0] > 1.0, torch.full_like(lp, float("nan")), lp)

    energy = sm.LogDensityEnergy(log_prob, 3)
    run = sm.Run(energy, torch.zeros(3), MetropolisWithinGibbs(fully_factorized(3), 4.0), num_chains=50, seed=0)
    chain = run.sample(200)
    assert float(chain.samples[..., 0].max()) <= 1.0
    assert bool(torch.isfinite(chain.samples).all()) and bool(torch.isfinite(chain.info["energy"]).all())
    # the recorded energy is the energy of the recorded state
    last = chain.samples[:, -1]
    torch.testing.assert_close(chain.info["energy"][:, -1], 0.5 * (last * last).sum(1).double())
    # and an all-rejected sweep does not move the state
    frozen = MetropolisWithinGibbs(fully_factorized(3), 1e-12)
    prepared = frozen.prepare(energy)
    state = prepared.init(torch.full((2, 3), 2.0))  # NaN region: every proposal is NaN too
    oracle = sm.Oracle(energy)
    state, info = prepared.step(state, oracle, None, torch.Generator().manual_seed(0))
    assert torch.equal(state.theta, torch.full((2, 3), 2.0)) and not bool(info["accept"].any())


def test_acceptance_per_block_node_and_layer_over_a_window():
    energy = energy_for("mlp_xor_deep", seed=0)
    g = torch.Generator().manual_seed(0)
    X, y = torch.rand(80, 2, generator=g), torch.randint(0, 2, (80,), generator=g).float()
    part = by_finer_nodes(energy.space, 2)  # 2 sub-blocks for the 2-input nodes: node ≠ block
    chain = sm.sample(
        energy, None, MetropolisWithinGibbs(part, 0.04), 30, data=(X, y), batch_size=20, num_chains=2, progress=False
    )
    acc = chain.info["accept"].double()  # [C, M, S]
    assert acc.shape == (2, part.num_groups, 30)
    torch.testing.assert_close(acceptance(chain, part, window=(11, 30)), acc[..., 10:].mean(-1))
    by_node = acceptance(chain, part, by="node")
    assert by_node.shape == (2, 13)  # 6 hidden layers of 2 nodes and the output node
    by_layer_ = acceptance(chain, part, by="layer")
    assert by_layer_.shape == (2, 7)
    first_layer = [b for b in range(part.num_groups) if int(part.layer[b]) == 0]
    torch.testing.assert_close(by_layer_[:, 0], acc[:, first_layer].mean(-1).mean(-1))
    with pytest.raises(ValueError, match="window must satisfy"):
        acceptance(chain, part, window=(0, 5))
    # per-layer recording for long chains: the same rates, [C, L] per sweep
    layer_chain = sm.sample(
        energy,
        None,
        MetropolisWithinGibbs(part, 0.04, record="layer"),
        30,
        data=(X, y),
        batch_size=20,
        num_chains=2,
        progress=False,
    )
    assert layer_chain.info["accept"].shape == (2, 7, 30)
    torch.testing.assert_close(acceptance(layer_chain, part, by="layer"), by_layer_)


def test_adaptation_reaches_the_target_and_freezes():
    cov = torch.diag(torch.tensor([0.01, 1.0, 100.0], dtype=F64))
    energy = sm.LogDensityEnergy(lambda t, b: -0.5 * (t * t / cov.diagonal()).sum(), 3)
    sampler = MetropolisWithinGibbs(fully_factorized(3), 1.0, adapt=Adapt(steps=1500, target=0.4, by="block"))
    run = sm.Run(energy, torch.zeros(3, dtype=F64), sampler, num_chains=8, seed=0)
    adapting = run.sample(1500)
    frozen = run.sample(1000)
    sd = frozen.info["proposal_sd"]
    assert torch.equal(sd[..., 0], sd[..., -1])  # frozen after the adaptation sweeps
    assert torch.equal(sd[..., 0], run.state.log_sd.exp())  # the recorded values are the state's
    rates = frozen.info["accept"].double().mean((0, 2))
    # 8 chains x 1,000 frozen sweeps: binomial SE of a rate ≈ 0.0055; over seeds 0-3 the rates
    # lay within 0.011 of the target and the scale ratios in 9.3-10.4
    assert bool(((rates - 0.4).abs() < 0.03).all()), rates
    ratio = sd.mean((0, 2))  # scales follow the target's standard deviations 0.1 : 1 : 10
    assert 8 < float(ratio[1] / ratio[0]) < 12 and 8 < float(ratio[2] / ratio[1]) < 12
    assert not torch.equal(adapting.info["proposal_sd"][..., 0], adapting.info["proposal_sd"][..., -1])


def test_scaling_none_is_the_batch_target_and_n_over_n_the_scaled_one():
    energy, data = (
        sm.ModuleEnergy(MLP((2, 2, 1), "sigmoid"), "bernoulli"),
        (torch.rand(40, 2), torch.randint(0, 2, (40,)).float()),
    )
    kw = dict(data=data, batch_size=10, progress=False, seed=0)
    none = sm.sample(energy, None, MetropolisWithinGibbs(by_neuron(energy.space), 1e-12), 1, **kw)
    scaled = sm.sample(energy, None, MetropolisWithinGibbs(by_neuron(energy.space), 1e-12, scaling="N/n"), 1, **kw)
    prior = float(energy.prior_energy(energy.initial_position().unsqueeze(0)))
    # same first batch: the likelihood part differs by N/n = 4
    assert (float(scaled.info["energy"][0, 0]) - prior) == pytest.approx(
        4 * (float(none.info["energy"][0, 0]) - prior), rel=1e-5
    )


def test_mwg_checkpoints_and_resumes_exactly(tmp_path):
    energy = energy_for("mlp_xor", seed=0)
    g = torch.Generator().manual_seed(0)
    X, y = torch.rand(60, 2, generator=g), torch.randint(0, 2, (60,), generator=g).float()
    make = lambda: MetropolisWithinGibbs(by_neuron(energy.space), 0.04, adapt=Adapt(steps=10))
    kw = dict(data=(X, y), batch_size=20, batching="stratified", num_chains=2, seed=3, progress=False)
    full = sm.sample(energy, None, make(), 30, **kw)

    with pytest.raises(Interrupt):
        sm.sample(energy, None, make(), 30, out_dir=tmp_path, checkpoint_every=5, callback=interrupt_at(17), **kw)
    resumed = sm.sample(energy, None, make(), 30, out_dir=tmp_path, checkpoint_every=5, resume=True, **kw)
    assert torch.equal(resumed.samples, full.samples)
    assert torch.equal(resumed.info["accept"], full.info["accept"])


def test_stratified_batches_keep_the_class_shares():
    from structmc.batching import MinibatchStream

    y = torch.cat([torch.zeros(60), torch.ones(30), torch.full((10,), 2.0)]).long()
    x = torch.arange(100.0)
    stream = MinibatchStream((x, y), 20, 3, torch.Generator().manual_seed(0), "stratified")
    for _ in range(5):
        bx, by = stream.next()
        for c in range(3):
            assert torch.bincount(by[c], minlength=3).tolist() == [12, 6, 2]
            assert len(set(bx[c].tolist())) == 20  # without replacement
            assert torch.equal(y[bx[c].long()], by[c])
    with pytest.raises(ValueError, match="integer class labels"):
        MinibatchStream((x, torch.randn(100)), 20, 1, torch.Generator(), "stratified")


def test_bad_input_is_refused_before_compute():
    energy = energy_for("mlp_xor")
    part = by_neuron(energy.space)
    with pytest.raises(ValueError, match="positive and finite"):
        MetropolisWithinGibbs(part, [0.1, -1.0])
    with pytest.raises(ValueError, match="positive and finite"):
        MetropolisWithinGibbs(part, 0.0)
    with pytest.raises(ValueError, match="3 per-layer proposal variances given for 2 layers"):
        MetropolisWithinGibbs(part, [0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="per-layer proposal variances need blocks that each lie in one layer"):
        MetropolisWithinGibbs(round_robin(9, 2), [0.1, 0.1])
    with pytest.raises(ValueError, match="one value per block"):
        MetropolisWithinGibbs(part, torch.ones(4))
    X, y = torch.rand(20, 2), torch.randint(0, 2, (20,)).float()
    with pytest.raises(ValueError, match="the partition covers 10 parameters but the model has 9"):
        sm.sample(energy, None, MetropolisWithinGibbs(fully_factorized(10), 0.1), 5, data=(X, y), progress=False)
    conv = sm.ModuleEnergy(nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten(), nn.Linear(8, 1)), "bernoulli")
    assert "unsupported layer Conv1d" in why_not_incremental(conv, by_neuron(conv.space))
    with pytest.raises(ValueError, match="the incremental evaluator cannot run here: unsupported layer Conv1d"):
        sm.sample(
            conv,
            None,
            MetropolisWithinGibbs(by_neuron(conv.space), 0.1, evaluator="incremental"),
            2,
            data=(torch.randn(10, 1, 6), torch.randint(0, 2, (10,)).float()),
            progress=False,
        )
    # the generic path runs any ModuleEnergy with any partition
    chain = sm.sample(
        conv,
        None,
        MetropolisWithinGibbs(round_robin(conv.space.dim, 3), 0.01),
        3,
        data=(torch.randn(10, 1, 6), torch.randint(0, 2, (10,)).float()),
        progress=False,
    )
    assert chain.info["accept"].shape == (1, 3, 3)
    with pytest.raises(ValueError, match="scaling must be one of"):
        MetropolisWithinGibbs(part, 0.1, scaling="N")
    with pytest.raises(ValueError, match="Adapt.target must lie in"):
        Adapt(steps=10, target=1.5)


def test_adaptation_per_layer_shares_one_scale_per_layer():
    energy = energy_for("mlp_xor_deep", seed=0)
    g = torch.Generator().manual_seed(0)
    X, y = torch.rand(80, 2, generator=g), torch.randint(0, 2, (80,), generator=g).float()
    part = by_finer_nodes(energy.space, 2)
    run = sm.Run(
        energy,
        None,
        MetropolisWithinGibbs(part, 0.04, adapt=Adapt(steps=20, by="layer")),
        data=(X, y),
        batch_size=20,
        num_chains=2,
    )
    chain = run.sample(25)
    assert chain.info["proposal_sd"].shape == (2, 7, 25)
    log_sd = run.state.log_sd
    for layer in range(7):
        members = (part.layer == layer).nonzero().flatten()
        assert bool((log_sd[:, members] == log_sd[:, members[:1]]).all())
    assert torch.equal(chain.info["proposal_sd"][..., 20], chain.info["proposal_sd"][..., -1])


def test_the_papers_finer_blocks_are_one_argument_away():
    """The paper's text: β₁ = 10 sub-blocks per first-layer node (78/79 parameters), 130 blocks;
    the reference code: chunks of 10, 810 blocks."""
    space = energy_for("mlp_gibbs").space
    paper = by_finer_nodes(space, num_chunks=[10, 1, 1, 1])
    sizes = paper.sizes()
    assert paper.num_groups == 130 and set(sizes[:100].tolist()) == {78, 79} and set(sizes[100:].tolist()) == {11}
    assert paper.unit[:10].tolist() == [0] * 10 and paper.layer[100:].tolist() == [1] * 10 + [2] * 10 + [3] * 10
    assert by_finer_nodes(space, 10).num_groups == 810
    with pytest.raises(ValueError, match="either chunk_size or num_chunks"):
        by_finer_nodes(space, 10, num_chunks=10)
    with pytest.raises(ValueError, match="one per layer"):
        by_finer_nodes(space, num_chunks=[10, 1])


def test_a_gradient_budget_is_refused_for_a_sampler_without_gradients():
    energy = sm.LogDensityEnergy(lambda t, b: -0.5 * (t * t).sum(), 2)
    run = sm.Run(energy, torch.zeros(2), MetropolisWithinGibbs(fully_factorized(2), 1.0))
    with pytest.raises(ValueError, match="computes no gradients"):
        run.sample(sm.Budget(grad_evals=10))
    assert run.sample(sm.Budget(iterations=3, grad_evals=10)).num_draws == 3
