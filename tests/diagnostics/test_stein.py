"""KSD and FSSD: hand-computed cases, stein-thinning, ports of the MAMBA reference formulas,
and the exact null expectations that the estimators must satisfy.

Statistical checks use R independent replicates; a mean is compared with its exact value
within 4 standard errors (SE = replicate SD / √R), so a correct estimator fails with
probability < 1e-4 while a wrong formula (sign, missing term, V vs U) is off by many SE.
"""

import math

import numpy as np
import pytest
import torch

from structmc.diagnostics import (
    fssd,
    fssd_optimize,
    fssd_test_locations,
    imq_stein_kernel,
    ksd,
    ksd_curve,
    median_bandwidth,
)

R = 40  # replicates for the expectation tests


def _gauss(n, d, seed, shift=0.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype) + shift
    return x, -x  # scores of the standard normal target, evaluated at the samples


def _within(values, target, label):
    v = torch.as_tensor(values, dtype=torch.float64)
    se = float(v.std()) / math.sqrt(v.numel())
    assert abs(float(v.mean()) - target) < 4 * se, f"{label}: {float(v.mean()):.4g} vs {target} (SE {se:.3g})"
    return se


# --------------------------------------------------------------------------- KSD ------------


def test_ksd_single_point_closed_form():
    # n = 1: KSD² = k0(x, x) = s² c^{2β} − 2β d c^{2(β−1)}; with c = 1, β = −1/2: s² + 1
    x, s = torch.tensor([[0.3]], dtype=torch.float64), torch.tensor([[-0.7]], dtype=torch.float64)
    assert float(ksd(x, s)) == pytest.approx(math.sqrt(0.49 + 1.0), rel=1e-12)
    # c = 2: 0.49 / 2 + 1 / 8
    assert float(ksd(x, s, c=2.0)) == pytest.approx(math.sqrt(0.49 / 2 + 1 / 8), rel=1e-12)


def test_ksd_two_points_closed_form():
    # x = (0, 1), s = (0, −1), d = 1, c = 1, β = −1/2; by hand from the Stein kernel:
    # k0(0,0) = 1, k0(1,1) = 2, k0(0,1): r = −1, q = 2, (sx−sy)·r + d = 0, so only the
    # −4β(β−1)‖r‖² q^{β−2} = −3·2^{−5/2} term remains
    x = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    s = torch.tensor([[0.0], [-1.0]], dtype=torch.float64)
    k01 = -3 * 2**-2.5
    assert float(imq_stein_kernel(x[0], x[1], s[0], s[1])) == pytest.approx(k01, rel=1e-12)
    assert float(ksd(x, s, squared=True)) == pytest.approx((1 + 2 + 2 * k01) / 4, rel=1e-12)
    assert float(ksd(x, s, statistic="u", squared=True)) == pytest.approx(k01, rel=1e-12)
    assert float(ksd(x, s, statistic="u")) == 0.0  # negative U-statistic: the root is clamped
    torch.testing.assert_close(ksd_curve(x, s), torch.tensor([1.0, math.sqrt(3 + 2 * k01) / 2], dtype=torch.float64))


def test_ksd_matches_stein_thinning():
    kernel = pytest.importorskip("stein_thinning.kernel", reason="stein-thinning not installable")
    stein = pytest.importorskip("stein_thinning.stein", reason="stein-thinning not installable")
    n, d = 60, 4
    x, _ = _gauss(n, d, seed=2, shift=0.4)
    s = -x / 1.5  # a different target, N(0, 1.5 I): the scores need not match the samples
    xn, sn = x.numpy(), s.numpy()
    for c, ell in [(1.0, 1.0), (2.0, 1.0), (1.0, 1.7)]:
        linv = np.eye(d) / ell**2  # their preconditioned kernel (c + rᵀ Γ⁻¹ r)^β, c not squared

        def integrand(i, j, c=c, linv=linv):
            return kernel.vfk0_imq(xn[i], xn[j], sn[i], sn[j], linv, c=c * c)

        ref_curve = stein.ksd(integrand, n)
        np.testing.assert_allclose(ksd_curve(x, s, c=c, lengthscale=ell, block_size=7).numpy(), ref_curve, rtol=1e-10)
        K = stein.kmat(integrand, n)
        assert float(ksd(x, s, c=c, lengthscale=ell, statistic="u", squared=True)) == pytest.approx(
            (K.sum() - np.trace(K)) / (n * (n - 1)), rel=1e-10
        )
        # and the direct pairwise formula
        Kd = imq_stein_kernel(x[:, None], x[None], s[:, None], s[None], c=c, lengthscale=ell)
        np.testing.assert_allclose(Kd.numpy(), K, rtol=1e-10, atol=1e-12)


def _mamba_k0(x1, x2, g1, g2, c=1.0, beta=-0.5):
    """Transcription of the MAMBA reference ``k_0_fun`` (tuning/ksd.py), pair by pair."""
    diff = x1 - x2
    dim = x1.shape[0]
    base = c**2 + diff @ diff
    return (
        g1 @ g2 * base**beta
        - 2 * beta * (g1 @ diff) * base ** (beta - 1)
        + 2 * beta * (g2 @ diff) * base ** (beta - 1)
        - 2 * dim * beta * base ** (beta - 1)
        - 4 * beta * (beta - 1) * base ** (beta - 2) * (diff @ diff)
    )


def test_ksd_reference_compat_reproduces_mamba_formula():
    x, _ = _gauss(25, 3, seed=4, shift=0.3)
    s = -x
    for c in (1.0, 2.0):
        total = sum(_mamba_k0(x[i], x[j], s[i], s[j], c=c) for i in range(25) for j in range(25))
        ref = math.sqrt(float(total)) / 25  # imq_KSD: √(ΣΣ k0) / N
        assert float(ksd(x, s, c=c, reference_compat=True)) == pytest.approx(ref, rel=1e-10)
        assert float(ksd(x, s, c=c)) == pytest.approx(ref, rel=1e-10)  # our default is the same V-statistic


def test_ksd_null_expectations_and_decrease():
    # under x ~ N(0, I_d) with exact scores: E k0(x, y) = 0 for independent x, y (Stein identity),
    # so E[KSD²_U] = 0 and E[m·KSD²_V(m)] = E k0(x, x) = E‖x‖² + d = 2d at every m
    d, n = 3, 400
    u, mv50, mv400, curves, shifted = [], [], [], [], []
    for r in range(R):
        x, s = _gauss(n, d, seed=100 + r)
        u.append(float(ksd(x, s, statistic="u", squared=True)))
        c = ksd_curve(x, s)
        mv50.append(50 * float(c[49]) ** 2)
        mv400.append(400 * float(c[399]) ** 2)
        curves.append(c[[24, 99, 399]])
        xs, ss = _gauss(n, d, seed=100 + r, shift=1.0)
        shifted.append(float(ksd(xs, ss)))  # target scores at shifted samples
    _within(u, 0.0, "E[KSD²_U] under the target")
    _within(mv50, 2 * d, "E[50 KSD²_V(50)]")
    _within(mv400, 2 * d, "E[400 KSD²_V(400)]")
    mean_curve = torch.stack(curves).mean(0)
    # KSD ~ √(2d/m): each 4-fold increase of m should about halve it
    assert mean_curve[0] > mean_curve[1] > mean_curve[2]
    assert float(mean_curve[2] / mean_curve[1]) == pytest.approx(0.5, abs=0.15)
    # shifted samples: KSD tends to a positive constant instead of 0
    assert min(shifted) > 3 * float(mean_curve[2])


def test_ksd_blocks_centering_dtype_and_scale():
    x, _ = _gauss(90, 6, seed=9, shift=50.0)  # far from the origin: stresses ‖x‖² cancellation
    s = -(x - 50.0)
    ref = ksd(x, s, block_size=90, center=False)
    torch.testing.assert_close(ksd(x, s, block_size=8), ref)
    torch.testing.assert_close(
        ksd(x, s, statistic="u", squared=True, block_size=5), ksd(x, s, statistic="u", squared=True)
    )
    torch.testing.assert_close(ksd_curve(x, s, block_size=4), ksd_curve(x, s))
    # float32 with centring stays close to float64 even with large ‖x‖
    torch.testing.assert_close(ksd(x.float(), s.float()).double(), ref, rtol=1e-4, atol=0)
    # chains [C, D, P] are pooled
    torch.testing.assert_close(ksd(x.reshape(3, 30, 6), s.reshape(3, 30, 6)), ref)
    assert ksd_curve(x, s, at=[10, 90]).shape == (2,)
    # a wide, chunked case: n = 200 in d = 20,000 in float32 matches float64
    g = torch.Generator().manual_seed(1)
    xb = torch.randn(200, 20_000, generator=g)
    sb = -xb
    torch.testing.assert_close(ksd(xb, sb, block_size=32).double(), ksd(xb.double(), sb.double()), rtol=1e-4, atol=0)


# -------------------------------------------------------------------------- FSSD ------------


def test_fssd_two_points_closed_form():
    # Gaussian kernel σ = 1, v = 0.5: ξ(x, v) = k(x, v)(s(x) − (x − v)/σ²), k = exp(−(x−v)²/2)
    # ξ1 = e^{−1/8}·0.5, ξ2 = e^{−1/8}·(−1.5); U: ξ1ξ2 (n = 2, d = J = 1), V: (ξ1 + ξ2)²/4
    x = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    s = torch.tensor([[0.0], [-1.0]], dtype=torch.float64)
    v = torch.tensor([[0.5]], dtype=torch.float64)
    assert float(fssd(x, s, v, bandwidth=1.0)) == pytest.approx(-0.75 * math.exp(-0.25), rel=1e-12)
    assert float(fssd(x, s, v, bandwidth=1.0, statistic="v")) == pytest.approx(math.exp(-0.25) / 4, rel=1e-12)


def _xi_autograd(x, s, V, kernel):
    """ξ_ij = k(x_i, v_j) s_i + ∇_x k(x_i, v_j), by autograd on a direct [n, J] kernel."""
    xg = x.clone().requires_grad_(True)
    K = kernel(xg[:, None, :], V[None, :, :])  # [n, J]
    xi = []
    for j in range(V.shape[0]):
        (gx,) = torch.autograd.grad(K[:, j].sum(), xg, retain_graph=True)
        xi.append(K[:, j, None].detach() * s + gx)
    return torch.stack(xi, 1)  # [n, J, d]


@pytest.mark.parametrize("kernel", ["gauss", "imq"])
def test_fssd_matches_brute_force(kernel):
    n, d, J = 9, 4, 3
    x, _ = _gauss(n, d, seed=5, shift=0.3)
    s = -x * 0.8
    V = torch.randn(J, d, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    bw, c, beta = 1.3, 1.5, -0.5
    if kernel == "gauss":
        kfun = lambda a, b: torch.exp(-((a - b) ** 2).sum(-1) / (2 * bw**2))  # noqa: E731
    else:
        kfun = lambda a, b: (c * c + ((a - b) ** 2).sum(-1) / bw**2) ** beta  # noqa: E731
    xi = _xi_autograd(x, s, V, kfun)
    G = xi.sum(0)
    u = ((G**2).sum() - (xi**2).sum()) / (d * J * n * (n - 1))
    v = (G**2).sum() / (d * J * n * n)
    kw = dict(kernel=kernel, bandwidth=bw, c=c, beta=beta)
    assert float(fssd(x, s, V, **kw)) == pytest.approx(float(u), rel=1e-10)
    assert float(fssd(x, s, V, statistic="v", **kw)) == pytest.approx(float(v), rel=1e-10)


def test_fssd_reference_compat_reproduces_mamba_formula():
    """Port of the reference ``imq_kernel``, ``xi`` and ``FSSD`` (c not squared in the kernel)."""
    n, d, J = 8, 3, 4
    x, _ = _gauss(n, d, seed=12, shift=0.2)
    s = -x
    V = torch.randn(J, d, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    for c in (1.0, 2.0):
        imq = lambda a, b, c=c: (c + ((a - b) ** 2).sum(-1)) ** -0.5  # noqa: E731
        xi = _xi_autograd(x, s, V, imq)
        ref = sum(float((xi[:, j].sum(0) ** 2 - (xi[:, j] ** 2).sum(0)).sum()) for j in range(J)) / (
            d * J * n * (n - 1)
        )
        assert float(fssd(x, s, V, reference_compat=True, c=c)) == pytest.approx(ref, rel=1e-10)
        ours = float(fssd(x, s, V, kernel="imq", bandwidth=1.0, c=c))
        if c == 1.0:
            assert ours == pytest.approx(ref, rel=1e-10)
        else:
            assert abs(ours - ref) > 1e-3 * abs(ref)  # c² vs c: the documented difference


def test_fssd_null_unbiased_and_detects_shift():
    # Stein identity: E ξ(x, v) = 0 under the target for any fixed v, so E[FSSD²_U] = 0 exactly
    d, n, J = 3, 200, 5
    V = torch.randn(J, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    null, alt = [], []
    for r in range(R):
        x, s = _gauss(n, d, seed=300 + r)
        null.append(float(fssd(x, s, V, bandwidth=1.0)))
        xs, _ = _gauss(n, d, seed=300 + r, shift=0.7)
        alt.append(float(fssd(xs, -xs, V, bandwidth=1.0)))
    se = _within(null, 0.0, "E[FSSD²_U] under the target")
    assert float(np.mean(alt)) > 10 * se


def test_test_locations():
    g = torch.Generator().manual_seed(21)
    L = torch.linalg.cholesky(torch.tensor([[2.0, 0.8], [0.8, 1.0]], dtype=torch.float64))
    x = torch.randn(500, 2, generator=g, dtype=torch.float64) @ L.T + torch.tensor([1.0, -2.0], dtype=torch.float64)
    J = 4000
    V = fssd_test_locations(x, J, generator=torch.Generator().manual_seed(22))
    m, S = x.mean(0), torch.cov(x.T)
    # the draws follow N(x̄, Σ̂): compare moments within 4 SE (SE of a mean √(Σ_ii/J); of a
    # covariance entry √((Σ_ii Σ_jj + Σ_ij²)/J))
    se_m = torch.sqrt(torch.diag(S) / J)
    assert torch.all((V.mean(0) - m).abs() < 4 * se_m)
    se_S = torch.sqrt((torch.diag(S)[:, None] * torch.diag(S)[None, :] + S**2) / J)
    assert torch.all((torch.cov(V.T) - S).abs() < 4 * se_S)
    Vd = fssd_test_locations(x, J, generator=torch.Generator().manual_seed(22), covariance="diag")
    assert abs(float(torch.corrcoef(Vd.T)[0, 1])) < 4 / math.sqrt(J)  # independent coordinates
    same = fssd_test_locations(x, 5, generator=torch.Generator().manual_seed(1), reference_compat=True)
    assert torch.equal(same, same[:1].expand(5, 2))
    again = fssd_test_locations(x, 5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(again, fssd_test_locations(x, 5, generator=torch.Generator().manual_seed(1)))
    assert len({tuple(r.tolist()) for r in again}) == 5


def test_fssd_optimize():
    x, _ = _gauss(400, 5, seed=31, shift=0.5)
    s = -x
    g = torch.Generator().manual_seed(0)
    res = fssd_optimize(x, s, 4, steps=30, generator=g)
    assert res.history[-1] > res.history[0]  # Adam ascends the training objective
    assert float(res.value) > float(res.initial_value)
    assert res.locations.shape == (4, 5) and res.evaluated_on == "all"
    assert float(res.value) == pytest.approx(float(fssd(x, s, res.locations, bandwidth=res.bandwidth)), rel=1e-9)
    hold = fssd_optimize(x, s, 4, steps=30, objective="power", holdout=0.5, generator=torch.Generator().manual_seed(0))
    assert hold.evaluated_on == "holdout" and hold.history[-1] > hold.history[0]
    assert math.isfinite(float(hold.value))
    ref = fssd_optimize(x, s, 4, steps=5, reference_compat=True, generator=torch.Generator().manual_seed(0))
    assert ref.kernel == "imq" and ref.objective == "fssd"
    assert median_bandwidth(x) > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_stein_cuda_matches_cpu():
    x, _ = _gauss(300, 50, seed=3, shift=0.2)
    s = -x
    torch.testing.assert_close(ksd(x.cuda(), s.cuda()).cpu(), ksd(x, s), rtol=1e-8, atol=0)
    torch.testing.assert_close(ksd_curve(x.cuda(), s.cuda()).cpu(), ksd_curve(x, s), rtol=1e-8, atol=1e-12)
    V = fssd_test_locations(x, 4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(fssd(x.cuda(), s.cuda(), V.cuda()).cpu(), fssd(x, s, V), rtol=1e-8, atol=1e-12)
