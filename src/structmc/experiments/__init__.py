"""Experiments: a registry from name to a module with ``Config``, ``PRESETS`` and ``run``."""

from __future__ import annotations

import importlib

REGISTRY = {
    "demo": "structmc.experiments.demo",
    "structured_linreg": "structmc.experiments.structured_linreg",
}


def get(name: str):
    if name not in REGISTRY:
        raise ValueError(f"unknown experiment {name!r}; choose from {sorted(REGISTRY)}")
    return importlib.import_module(REGISTRY[name])
