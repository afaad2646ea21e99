"""Predictive metrics: hand-computed values, edge conventions, and reference packages where
their conventions agree (torchmetrics top-label ECE/MCE, scikit-learn Brier/log-loss, torch's
Gaussian NLL)."""

import math

import numpy as np
import pytest
import torch

from structmc.diagnostics import (
    accuracy,
    brier,
    calibration_bins,
    classification_metrics,
    ece,
    gaussian_nll,
    mce,
    mse,
    nll,
    regression_metrics,
    rmse,
)

# confidences 0.72, 0.63, 0.55, 0.91 fall in bins 7, 6, 5, 9 (away from edges); predictions
# 0, 1, 2, 0 against labels 0, 0, 2, 1: correct, wrong, correct, wrong
P = torch.tensor([[0.72, 0.18, 0.10], [0.27, 0.63, 0.10], [0.20, 0.25, 0.55], [0.91, 0.05, 0.04]], dtype=torch.float64)
Y = torch.tensor([0, 0, 2, 1])


def test_hand_computed_multiclass():
    assert float(accuracy(P, Y)) == 0.5
    assert float(nll(P, Y)) == pytest.approx(-(math.log(0.72) + math.log(0.27) + math.log(0.55) + math.log(0.05)) / 4)
    rows = [
        0.28**2 + 0.18**2 + 0.10**2,
        0.73**2 + 0.63**2 + 0.10**2,
        0.20**2 + 0.25**2 + 0.45**2,
        0.91**2 + 0.95**2 + 0.04**2,
    ]
    assert float(brier(P, Y)) == pytest.approx(sum(rows) / 4)
    # one sample per bin: ECE = mean |correct − conf|, MCE = max of the same
    gaps = [1 - 0.72, 0.63, 1 - 0.55, 0.91]
    assert float(ece(P, Y)) == pytest.approx(sum(gaps) / 4)
    assert float(mce(P, Y)) == pytest.approx(0.91)
    m = classification_metrics(P, Y)
    assert set(m) == {"accuracy", "nll", "brier", "ece", "mce"}


def test_hand_computed_binary_shared_bin():
    # P(y=1) = 0.62, 0.35, 0.68 with labels 1, 1, 0: top-label confidences 0.62, 0.65, 0.68 all in
    # bin [0.6, 0.7); correct = 1, 0, 0: ECE = MCE = |1/3 − 0.65|
    p = torch.tensor([0.62, 0.35, 0.68], dtype=torch.float64)
    y = torch.tensor([1, 1, 0])
    assert float(ece(p, y)) == pytest.approx(abs(1 / 3 - 0.65))
    assert float(mce(p, y)) == pytest.approx(abs(1 / 3 - 0.65))
    assert float(accuracy(p, y)) == pytest.approx(1 / 3)
    assert float(brier(p, y)) == pytest.approx((0.38**2 + 0.65**2 + 0.68**2) / 3)  # binary convention
    assert float(brier(torch.stack([1 - p, p], 1), y)) == pytest.approx(2 * float(brier(p, y)))
    assert float(nll(p, y)) == pytest.approx(-(math.log(0.62) + math.log(0.35) + math.log(0.32)) / 3)


def test_bin_edge_convention():
    # bins are [b/B, (b+1)/B), the last one closed: 0.5 -> bin 5, 0.6 -> bin 6, 1.0 -> bin 9
    p = torch.tensor([[0.5, 0.5], [0.6, 0.4], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    y = torch.tensor([1, 0, 0, 0])
    t = calibration_bins(p, y)
    assert t["count"].tolist() == [0, 0, 0, 0, 0, 1, 1, 0, 0, 2]
    assert t["edges"].shape == (11,)
    # a tie predicts the lowest class: the 0.5/0.5 row predicts 0 and is wrong
    assert float(accuracy(p, y)) == pytest.approx(0.5)
    assert float(t["accuracy"][9]) == pytest.approx(0.5)
    assert float(ece(p, y, num_bins=4)) >= 0


def test_nll_zero_probability_is_finite():
    p = torch.tensor([[1.0, 0.0]], dtype=torch.float32)
    v = float(nll(p, torch.tensor([1])))
    assert math.isfinite(v) and v == pytest.approx(-math.log(torch.finfo(torch.float32).tiny), rel=1e-6)


def test_against_torchmetrics():
    tm = pytest.importorskip("torchmetrics.functional.classification", reason="torchmetrics not installable")
    g = torch.Generator().manual_seed(0)
    logits = 2 * torch.randn(500, 4, generator=g, dtype=torch.float64)
    p = logits.softmax(1)  # no confidence is exactly on a bin edge or 1.0 (torchmetrics' extra bin)
    y = torch.randint(0, 4, (500,), generator=g)
    for bins in (10, 15):  # torchmetrics returns float32: compare at float32 precision
        ref = tm.multiclass_calibration_error(p, y, num_classes=4, n_bins=bins, norm="l1")
        assert float(ece(p, y, num_bins=bins)) == pytest.approx(float(ref), rel=1e-6)
        ref = tm.multiclass_calibration_error(p, y, num_classes=4, n_bins=bins, norm="max")
        assert float(mce(p, y, num_bins=bins)) == pytest.approx(float(ref), rel=1e-6)
    ref = tm.multiclass_accuracy(p, y, num_classes=4, average="micro")
    assert float(accuracy(p, y)) == pytest.approx(float(ref))


def test_against_sklearn():
    metrics = pytest.importorskip("sklearn.metrics", reason="scikit-learn not installable")
    g = torch.Generator().manual_seed(1)
    p = torch.rand(300, generator=g, dtype=torch.float64) * 0.98 + 0.01
    y = (torch.rand(300, generator=g) < p).long()
    assert float(brier(p, y)) == pytest.approx(metrics.brier_score_loss(y.numpy(), p.numpy()), rel=1e-12)
    assert float(nll(p, y)) == pytest.approx(metrics.log_loss(y.numpy(), p.numpy()), rel=1e-12)
    P3 = torch.softmax(torch.randn(200, 3, generator=g, dtype=torch.float64), 1)
    y3 = torch.randint(0, 3, (200,), generator=g)
    assert float(nll(P3, y3)) == pytest.approx(metrics.log_loss(y3.numpy(), P3.numpy(), labels=[0, 1, 2]), rel=1e-12)
    assert float(accuracy(P3, y3)) == pytest.approx(metrics.accuracy_score(y3.numpy(), P3.argmax(1).numpy()))


def test_regression_metrics():
    mean = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    y = torch.tensor([1.5, 1.0, 3.0], dtype=torch.float64)
    var = torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64)
    assert float(mse(mean, y)) == pytest.approx((0.25 + 1.0) / 3)
    assert float(rmse(mean, y)) == pytest.approx(math.sqrt(1.25 / 3))
    hand = np.mean([0.5 * (math.log(2 * math.pi * v) + (t - m) ** 2 / v) for m, t, v in zip(mean, y, var)])
    assert float(gaussian_nll(mean, var, y)) == pytest.approx(hand)
    ref = torch.nn.functional.gaussian_nll_loss(mean, y, var, full=True)  # var > its eps clamp
    assert float(gaussian_nll(mean, var, y)) == pytest.approx(float(ref))
    assert set(regression_metrics(mean, var, y)) == {"mse", "rmse", "nll"}


def test_input_validation():
    with pytest.raises(ValueError):
        accuracy(P, torch.tensor([0, 1]))
    with pytest.raises(ValueError):
        accuracy(P, torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError):
        mse(torch.zeros(3), torch.zeros(4))
