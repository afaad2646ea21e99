"""Diagnostics for chains with many parameters: mixing (autocorrelation, IAC, ESS, R-hat),
summaries, Stein discrepancies (KSD, FSSD), predictive metrics, plots and ArviZ export.

All statistics are pure functions of tensors with layout ``(chains, draws, ...)``, vectorised
over parameters in torch (CPU or GPU, float32 or float64): no per-parameter Python loops, so
10^4-10^6 parameters take seconds. Each function's docstring names its estimator and reference.
Plotting needs matplotlib and ``to_arviz`` needs arviz; both are imported lazily.
"""

from .autocorr import autocorrelation, autocovariance, integrated_time
from .calibration import (
    accuracy,
    auroc,
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
from .ess import ess, ess_bulk, ess_equicorrelation, ess_from_correlation, ess_mean, ess_tail, ess_tfp
from .health import ConvergenceWarning, energy_stationarity, function_space, stuck_chains
from .interop import to_arviz
from .plots import (
    plot_acceptance,
    plot_autocorr,
    plot_calibration,
    plot_ksd_curve,
    plot_metric,
    plot_metric_vs_steps,
    plot_metric_vs_time,
    plot_pair,
    plot_predictive,
    plot_trace,
    save_figure,
)
from .report import diagnose_run
from .rhat import rhat
from .stein import (
    FSSDResult,
    fssd,
    fssd_optimize,
    fssd_test_locations,
    imq_stein_kernel,
    ksd,
    ksd_curve,
    median_bandwidth,
)
from .summary import Summary, mixing, param_labels, select_draws, select_random, select_top_variance, summary

__all__ = [
    "auroc",
    "ConvergenceWarning",
    "energy_stationarity",
    "function_space",
    "stuck_chains",
    "autocorrelation",
    "autocovariance",
    "integrated_time",
    "ess",
    "ess_bulk",
    "ess_tail",
    "ess_mean",
    "ess_tfp",
    "ess_equicorrelation",
    "ess_from_correlation",
    "rhat",
    "Summary",
    "summary",
    "mixing",
    "param_labels",
    "select_draws",
    "select_random",
    "select_top_variance",
    "imq_stein_kernel",
    "ksd",
    "ksd_curve",
    "fssd",
    "fssd_test_locations",
    "fssd_optimize",
    "FSSDResult",
    "median_bandwidth",
    "accuracy",
    "nll",
    "brier",
    "ece",
    "mce",
    "calibration_bins",
    "classification_metrics",
    "mse",
    "rmse",
    "gaussian_nll",
    "regression_metrics",
    "plot_trace",
    "plot_autocorr",
    "plot_pair",
    "plot_metric",
    "plot_metric_vs_time",
    "plot_metric_vs_steps",
    "plot_ksd_curve",
    "plot_acceptance",
    "plot_calibration",
    "plot_predictive",
    "save_figure",
    "to_arviz",
    "diagnose_run",
]
