r"""Probabilistic matrix factorisation (Salakhutdinov & Mnih 2008) with the MAMBA paper's
hierarchical priors, as a log density over one flat vector.

Model (d latent dimensions, W ∈ {U, V}; U has one row per user, V one per item):

.. math::
    r_{ij} \mid U, V &\sim \mathcal N(\bar r + U_i^\top V_j,\ \alpha^{-1}) \\
    W_k \mid \mu_W, \lambda_W &\sim \mathcal N(\mu_W,\ \mathrm{diag}(e^{\lambda_W})^{-1}) \\
    \mu_W \mid \lambda_W &\sim \mathcal N(\mu_0,\ \mathrm{diag}(e^{\lambda_W})^{-1}) \\
    e^{\lambda_{W,k}} &\sim \mathrm{Gamma}(a_0, \text{rate } b_0)

with α = 3, μ₀ = 0, a₀ = 4, b₀ = 5, d = 20 and ratings centred on the training mean r̄
(the authors' code). The precisions are sampled on the log scale, so the Gamma prior
carries its Jacobian: log p(λ) = a₀λ − b₀e^λ. Layout of θ (``space``): ``U [users, d]``,
``V [items, d]``, ``mu_U``, ``log_lambda_U``, ``mu_V``, ``log_lambda_V`` (``[d]`` each) —
52,580 numbers for MovieLens 100K.

:meth:`PMF.log_likelihood` (summed over a batch of ``(user, item, rating)`` tensors, or
``(x [n, 2], rating)``) and :meth:`PMF.log_prior` are the two parts of the log posterior
(constants dropped); the N/n scaling of the likelihood belongs to the energy built from them
(``structmc.zoo.energy_for("pmf", ...)``, a :class:`~structmc.energy.LogDensityEnergy`),
like every other energy of the library. :meth:`PMF.rmse` scores predictions clipped to [1, 5].
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..space import ParamSpace


class PMF:
    def __init__(
        self,
        num_users: int,
        num_items: int,
        *,
        dim: int = 20,
        alpha: float = 3.0,
        a0: float = 4.0,
        b0: float = 5.0,
        mu0: float = 0.0,
        mean_rating: float = 0.0,
        rating_range: tuple[float, float] = (1.0, 5.0),
    ):
        if min(num_users, num_items, dim) < 1:
            raise ValueError("num_users, num_items and dim must be positive")
        self.num_users, self.num_items, self.d = int(num_users), int(num_items), int(dim)
        self.alpha, self.a0, self.b0, self.mu0 = float(alpha), float(a0), float(b0), float(mu0)
        self.mean_rating = float(mean_rating)
        self.rating_range = rating_range
        d = self.d
        self.space = ParamSpace(
            [
                ("U", (self.num_users, d)),
                ("V", (self.num_items, d)),
                ("mu_U", (d,)),
                ("log_lambda_U", (d,)),
                ("mu_V", (d,)),
                ("log_lambda_V", (d,)),
            ]
        )

    @classmethod
    def for_dataset(cls, ds, **kwargs) -> PMF:
        """A PMF sized for a MovieLens :class:`~structmc.data.Dataset` (users, items, r̄)."""
        kwargs.setdefault("mean_rating", ds.meta["mean_rating"])
        return cls(ds.meta["num_users"], ds.meta["num_items"], **kwargs)

    @property
    def dim(self) -> int:
        return self.space.dim

    # -- pieces --------------------------------------------------------------------------
    @staticmethod
    def _unpack_batch(batch) -> tuple[Tensor, Tensor, Tensor]:
        if len(batch) == 3:
            return batch[0], batch[1], batch[2]
        if len(batch) == 2:
            x, r = batch
            return x[..., 0], x[..., 1], r
        raise ValueError("a PMF batch is (users, items, ratings) or (x [n, 2], ratings)")

    def log_likelihood(self, theta: Tensor, batch) -> Tensor:
        """Σ_batch −(α/2)(r − r̄ − UᵢᵀVⱼ)² for one θ ``[P]`` (no N/n: the energy scales it)."""
        users, items, ratings = self._unpack_batch(batch)
        p = self.space.unflatten(theta)
        pred = (p["U"][users] * p["V"][items]).sum(-1)
        resid = ratings.to(theta.dtype) - self.mean_rating - pred
        return -0.5 * self.alpha * resid.square().sum()

    def _log_prior_w(self, w: Tensor, mu: Tensor, lam: Tensor) -> Tensor:
        prec = lam.exp()
        rows = w.shape[0]
        log_w = 0.5 * rows * lam.sum() - 0.5 * ((w - mu).square() * prec).sum()
        log_mu = 0.5 * lam.sum() - 0.5 * ((mu - self.mu0).square() * prec).sum()
        log_lam = (self.a0 * lam - self.b0 * prec).sum()  # Gamma(a0, b0) on e^λ with Jacobian e^λ
        return log_w + log_mu + log_lam

    def log_prior(self, theta: Tensor) -> Tensor:
        p = self.space.unflatten(theta)
        return self._log_prior_w(p["U"], p["mu_U"], p["log_lambda_U"]) + self._log_prior_w(
            p["V"], p["mu_V"], p["log_lambda_V"]
        )

    # -- use -----------------------------------------------------------------------------
    def init(
        self, *, seed: int = 0, generator: torch.Generator | None = None, scale: float = 0.1, dtype=torch.float32
    ) -> Tensor:
        """U, V ~ N(0, scale²), μ = 0, λ = log(a₀/b₀) (the prior mean precision)."""
        g = generator if generator is not None else torch.Generator().manual_seed(int(seed))
        theta = torch.zeros(self.dim, dtype=dtype)
        p = self.space.unflatten(theta)
        p["U"].copy_(scale * torch.randn(p["U"].shape, generator=g, dtype=dtype))
        p["V"].copy_(scale * torch.randn(p["V"].shape, generator=g, dtype=dtype))
        p["log_lambda_U"].fill_(torch.log(torch.tensor(self.a0 / self.b0)).item())
        p["log_lambda_V"].fill_(torch.log(torch.tensor(self.a0 / self.b0)).item())
        return theta

    @torch.no_grad()
    def predict(
        self, theta: Tensor, users: Tensor, items: Tensor, *, clip: bool = True, draws_per_chunk: int = 16
    ) -> Tensor:
        """Predicted ratings, averaged over draws when ``theta`` is ``[S, P]``; clipped to the
        rating range after averaging."""
        draws = theta.reshape(-1, self.dim)
        total = torch.zeros(users.shape[0], dtype=draws.dtype, device=draws.device)
        for s0 in range(0, draws.shape[0], draws_per_chunk):
            p = self.space.unflatten(draws[s0 : s0 + draws_per_chunk])
            total += (p["U"][:, users] * p["V"][:, items]).sum(-1).sum(0)
        pred = total / draws.shape[0] + self.mean_rating
        return pred.clamp(*self.rating_range) if clip else pred

    def rmse(self, theta: Tensor, users: Tensor, items: Tensor, ratings: Tensor, *, clip: bool = True) -> float:
        """Root mean squared error of :meth:`predict` (posterior-mean prediction for ``[S, P]``)."""
        pred = self.predict(theta, users, items, clip=clip)
        return float((pred - ratings.to(pred)).square().mean().sqrt())


def pmf_rmse(model: PMF, theta: Tensor, users: Tensor, items: Tensor, ratings: Tensor, *, clip: bool = True) -> float:
    """RMSE of predictions clipped to [1, 5] (posterior mean over draws for ``theta [S, P]``)."""
    return model.rmse(theta, users, items, ratings, clip=clip)
