"""The open run loop: Run.iterate with budgets, in-memory continuation, step info, the oracle."""

from __future__ import annotations

import pytest
import torch
from support.runs import ALL_SAMPLERS, mlp_energy

import structmc as sm
from structmc.structured import BernoulliMask, ChainHistory, StructuredEnergy, by_neuron, round_robin


def test_segments_continued_in_memory_equal_one_run():
    """A run advanced in three budgeted segments (scored in between) gives the chain of one
    uninterrupted sample() call: same draws, same per-iteration info."""
    for make in ALL_SAMPLERS:
        energy, data = mlp_energy()
        full = sm.sample(energy, None, make(), 30, data=data, batch_size=15, num_chains=2, seed=3, progress=False)
        run = sm.Run(energy, None, make(), data=data, batch_size=15, num_chains=2, seed=3)
        parts = [run.sample(10), run.sample(sm.Budget(iterations=5)), run.sample(15)]
        assert run.iteration == 30
        samples = torch.cat([p.samples for p in parts], 1)
        assert torch.equal(samples, full.samples)
        assert torch.equal(torch.cat([p.draw_steps for p in parts]), full.draw_steps)
        for key in ("energy", "lr", "grad_evals"):
            assert torch.equal(torch.cat([p.info[key] for p in parts], -1), full.info[key]), key


def test_iterate_yields_iteration_state_info_and_stops_on_a_predicate():
    energy, data = mlp_energy()
    run = sm.Run(energy, None, sm.SGNHT(1e-4, a=0.1), data=data, batch_size=30, num_chains=3)
    seen = []
    for t, state, info in run.iterate(until=lambda t, state, info: t == 7):
        seen.append(t)
        assert state is run.state and info["energy"].shape == (3,) and info["thermostat"].shape == (3,)
        assert info["lr"] == 1e-4 and info["grad_evals"] == 1 and info["time"] > 0
    assert seen == list(range(1, 8)) and run.iteration == 7
    assert list(run.iterate(0)) == []


def test_budgets_in_seconds_and_gradient_evaluations():
    energy, data = mlp_energy()
    run = sm.Run(
        energy, None, sm.SGLD(1e-3), data=data, batch_size=30, gradient=sm.ControlVariate(energy.initial_position())
    )
    steps = list(run.iterate(sm.Budget(grad_evals=9)))
    assert len(steps) == 5 and run.grad_evals == 10  # a control variate costs 2 per update; stops at >= 9
    t0 = run.elapsed
    n = len(list(run.iterate(sm.Budget(seconds=0.05))))
    assert n >= 1 and run.elapsed - t0 >= 0.05
    # time counts only sampler steps: it cannot exceed the wall clock and grows every step
    chain = run.sample(sm.Budget(iterations=4))
    assert bool((chain.info["time"].diff() > 0).all())
    with pytest.raises(ValueError, match="a Budget needs iterations, seconds or grad_evals"):
        sm.Budget()
    with pytest.raises(ValueError, match="Budget.iterations must be a non-negative integer"):
        sm.Budget(iterations=-1)


@pytest.mark.parametrize(
    "case, expected",
    [
        ("sgld", 1),
        ("sghmc-3", 3),
        ("cv", 2),
        ("S", "M"),
        ("Sd-4", 4),
        ("S+cv", "M+1"),
        ("S-warmup", 1),
    ],
)
def test_gradient_evaluations_are_counted_per_iteration(case, expected):
    energy, data = mlp_energy()
    sampler = sm.SGHMC(1e-4, num_leapfrog=3) if case == "sghmc-3" else sm.SGLD(1e-3)
    gradient = sm.ControlVariate(energy.initial_position()) if "cv" in case else "minibatch"
    target = energy
    M = by_neuron(energy.space).num_groups
    if case.startswith("S-") or case.startswith("S+") or case == "S":
        target = StructuredEnergy(
            energy, by_neuron(energy.space), ChainHistory(5), warmup_steps=100 if case == "S-warmup" else 0
        )
    if case.startswith("Sd"):
        target = StructuredEnergy(
            energy, round_robin(energy.space.dim, 5), ChainHistory(5), mask=BernoulliMask(0.5), num_copies=4
        )
    expected = {"M": M, "M+1": M + 1}.get(expected, expected)
    chain = sm.sample(target, None, sampler, 4, data=data, batch_size=30, gradient=gradient, progress=False)
    assert chain.info["grad_evals"].tolist() == [expected] * 4


def test_the_oracle_evaluates_states_on_one_batch_and_never_raises():
    """What Metropolis steps need: the current and the proposed state on the same minibatch,
    a non-finite proposal reported (not raised), and the evaluations counted."""
    energy, data = mlp_energy()
    run = sm.Run(energy, None, sm.SGLD(1e-3), data=data, batch_size=10, num_chains=2, seed=1)
    oracle = run.oracle
    batch = oracle.next_batch()
    theta = run.theta.clone()
    v1, v2 = oracle.value(theta), oracle.value(theta)
    assert torch.equal(v1, v2) and oracle.batch is batch
    bad = theta.clone()
    bad[1, 0] = float("nan")
    v = oracle.value(bad)
    assert bool(torch.isfinite(v[0])) and not bool(torch.isfinite(v[1]))
    u, g = oracle.value_and_grad(theta)
    torch.testing.assert_close(u, v1)
    assert oracle.value_evals == 3 and oracle.grad_evals == 1
    ref_u, ref_g = energy.with_num_data(90).reference_value_and_grad(theta, batch)
    torch.testing.assert_close(g, ref_g)
    torch.testing.assert_close(u, ref_u)


@pytest.mark.parametrize("check_every", [1, 4, 32, 1000])
def test_divergence_inside_a_run_names_the_first_bad_iteration_whatever_the_check_interval(check_every):
    def log_prob(t, b):
        return -0.5 * (t * t).sum() * 1e4

    reference = sm.Run(log_prob, torch.ones(3), sm.SGLD(1.0), check_every=1)
    with pytest.raises(sm.DivergenceError) as first:
        for _t, state, info in reference.iterate(1000):
            assert bool(torch.isfinite(state.theta).all()) and bool(torch.isfinite(info["energy"]).all())
    assert reference.iteration == first.value.step  # checked every iteration: stops at once

    run = sm.Run(log_prob, torch.ones(3), sm.SGLD(1.0), check_every=check_every)
    with pytest.raises(
        sm.DivergenceError, match=r"sgld: non-finite .* iteration \d+ \(lr=1\); reduce the step size"
    ) as err:
        for _ in run.iterate(1000):
            pass
    assert err.value.step == first.value.step and str(err.value) == str(first.value)
    # found at the next read of the flags: a multiple of check_every, or the budget's end
    assert run.iteration == min(1000, -(-err.value.step // check_every) * check_every)


def test_no_device_to_host_read_per_iteration():
    """The hot loop reads the device only every check_every iterations (counted as
    aten._local_scalar_dense calls, what .item()/float()/bool() dispatch to)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountReads(TorchDispatchMode):
        reads = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                CountReads.reads += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    X, y = torch.randn(64, 3), torch.randint(0, 2, (64,))
    energy = sm.ModuleEnergy(
        torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)), "categorical", prior_std=1.0
    )
    for sampler, gradient in (
        (sm.SGLD(1e-3), "minibatch"),
        (sm.PSGLD(1e-3), "minibatch"),
        (sm.SGHMC(1e-3, friction=0.1), "minibatch"),
        (sm.SGNHT(1e-3, a=0.1), "minibatch"),
        (sm.SGLD(1e-3), sm.ControlVariate(energy.initial_position())),
    ):
        run = sm.Run(energy, None, sampler, data=(X, y), batch_size=16, num_chains=2, gradient=gradient, check_every=16)
        for _ in run.iterate(3):
            pass
        CountReads.reads = 0
        with CountReads():
            for _ in run.iterate(64):  # ends on a multiple of 16: 4 reads, each of 16 iterations' flags
                pass
        assert CountReads.reads == 4, (sampler.name, CountReads.reads)


def test_info_log_records_any_sampler_keys_and_backfills_new_ones():
    from structmc.recording import InfoLog

    log = InfoLog()
    log.BLOCK = 3
    for k in range(5):
        log.append({"energy": torch.tensor([k, -k], dtype=torch.float32), "lr": 0.5, "grad_evals": 2})
    out = log.upto()
    assert out["energy"].shape == (2, 5) and out["energy"].dtype == torch.float64
    assert out["lr"].tolist() == [0.5] * 5 and out["grad_evals"].dtype == torch.int64
    log.append({"energy": torch.zeros(2), "lr": 0.5, "grad_evals": 2, "accept": torch.ones(2)})
    out = log.upto()
    assert out["accept"].shape == (2, 6) and bool(out["accept"][:, :5].isnan().all()) and out["accept"][0, 5] == 1
    with pytest.raises(ValueError, match="missing now: \\['accept'\\]"):
        log.append({"energy": torch.zeros(2), "lr": 0.5, "grad_evals": 2})
    assert log.upto(4)["energy"].shape == (2, 4)
