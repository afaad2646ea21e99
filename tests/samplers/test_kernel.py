"""The kernel protocol (structmc.samplers.Kernel): a transition written outside the library,
subclassing nothing, runs through sample() with a run folder and resumes exactly; its draws
follow the exact law; the run loop does not change the kernel objects users build (SGMCMC
samplers and Metropolis-within-Gibbs)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor

import structmc as sm
from structmc.gibbs import MetropolisWithinGibbs
from structmc.partitions import by_neuron


@dataclass
class AR1State:
    theta: Tensor


class AR1:
    """θ' = ρθ + √(1−ρ²) ξ: an exact kernel whose stationary law is N(0, I) whatever the energy
    (the oracle's energy is recorded, not used), with lag-k autocorrelation ρ^k."""

    name = "ar1"
    lr = None

    def __init__(self, rho: float):
        self.rho = rho

    def target_energy(self, energy):
        return energy

    def prepare(self, energy):
        return copy.copy(self)

    def init(self, theta, generator=None):
        return AR1State(theta.detach().clone())

    def step(self, state, oracle, lr, generator):
        oracle.next_batch()
        energy = oracle.value(state.theta)
        z = torch.randn(state.theta.shape, generator=generator, dtype=state.theta.dtype)
        state.theta = self.rho * state.theta + math.sqrt(1 - self.rho**2) * z
        return state, {"energy": energy}

    def state_dict(self, state):
        return {"theta": state.theta}

    def load_state(self, d):
        return AR1State(d["theta"])

    def config(self):
        return {"sampler": self.name, "rho": self.rho}


def log_prob(theta, batch):
    return -0.5 * (theta * theta).sum()


def test_a_kernel_from_outside_the_library_samples_its_exact_law():
    assert isinstance(AR1(0.5), sm.Kernel) and not issubclass(AR1, sm.Sampler)
    chain = sm.sample(
        log_prob, torch.zeros(3, dtype=torch.float64), AR1(0.5), 20_000, num_chains=4, seed=1, progress=False
    )
    x = chain.samples.reshape(-1, 3)
    # N(0, 1): the mean's sd is about sqrt((1+ρ)/(1−ρ) / n) = 0.0061, the variance's about 0.017
    assert x.mean(0).abs().max() < 0.03 and (x.var(0) - 1).abs().max() < 0.08
    lag1 = (chain.samples[:, 1:] * chain.samples[:, :-1]).mean() / chain.samples.var()
    assert abs(float(lag1) - 0.5) < 0.03
    assert chain.info["energy"].shape == (4, 20_000)


def test_a_kernel_from_outside_the_library_resumes_exactly(tmp_path):
    def run(out_dir=None, stop_at=None, resume=False):
        def stop(t, state):
            if t == stop_at:
                raise KeyboardInterrupt

        return sm.sample(
            log_prob,
            torch.zeros(2, dtype=torch.float64),
            AR1(0.9),
            50,
            seed=3,
            out_dir=out_dir,
            checkpoint_every=10 if out_dir else None,
            resume=resume,
            callback=stop if stop_at else None,
            progress=False,
        )

    whole = run()
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, stop_at=23)
    resumed = run(tmp_path, resume=True)
    torch.testing.assert_close(resumed.samples, whole.samples, rtol=0, atol=0)
    assert sm.load_chain(tmp_path).config["sampler"] == {"sampler": "ar1", "rho": 0.9}


def test_an_object_that_is_no_kernel_is_refused_before_any_compute():
    with pytest.raises(TypeError, match="structmc.samplers.Kernel"):
        sm.Run(log_prob, torch.zeros(2), object())


@pytest.mark.parametrize(
    "make",
    [
        lambda s: sm.SGHMC(1e-3, friction=0.1),
        lambda s: sm.PSGLD(1e-3),
        lambda s: MetropolisWithinGibbs(by_neuron(s), 1e-2, scaling="N/n"),
    ],
)
def test_the_run_loop_leaves_the_users_kernel_unchanged(make):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    energy = sm.ModuleEnergy(net)
    kernel = make(energy.space)
    before = dict(vars(kernel))
    tensors = {k: v.clone() for k, v in before.items() if isinstance(v, Tensor)}
    scratch = {k: dict(vars(v)) for k, v in before.items() if hasattr(v, "__dict__") and not isinstance(v, type)}
    X, y = torch.randn(40, 3), torch.randint(0, 2, (40,))
    sm.sample(energy, None, kernel, 5, data=(X, y), batch_size=10, num_chains=2, progress=False)
    after = vars(kernel)
    assert set(after) == set(before)  # no per-run attribute added to the user's object
    for k, v in before.items():
        assert after[k] is v, k  # nothing rebound
    for k, v in tensors.items():
        assert torch.equal(after[k], v), k  # nothing written in place
    for k, d in scratch.items():  # members of members (a partition may memoise its blocks) are not rebound
        assert all(vars(after[k]).get(a) is b for a, b in d.items()), k
    if "_noise" in after:  # the noise buffer is the run's copy's: never allocated on the user's object
        assert after["_noise"]._buf is None
