"""UCI regression sets used by the structured-SGMCMC paper's partition study (and friends).

| name | file (format) | rows | target |
|---|---|---|---|
| ``boston`` | ``boston.csv`` (CSV, header; R MASS::Boston export) or UCI ``housing.data`` (whitespace) | 506 | ``medv`` |
| ``concrete`` | ``concrete.csv`` (CSV, header; R modeldata export) or UCI ``Concrete_Data.xls`` (needs xlrd) | 1030 | ``compressive_strength`` |
| ``wine-red`` / ``wine-white`` | ``winequality-{red,white}.csv`` (``;``-separated, quoted header) | 1599 / 4898 | ``quality`` |
| ``airfoil`` | ``airfoil_self_noise.dat`` (tab-separated, no header) | 1503 | ``scaled_sound_pressure_level`` |
| ``energy`` | ``ENB2012_data.xlsx`` (or a CSV export ``ENB2012_data.csv``) | 768 | ``heating_load`` (or ``cooling_load``) |
| ``yacht`` | ``yacht_hydrodynamics.data`` (whitespace, no header) | 308 | ``residuary_resistance`` |
| ``seoul-bike`` | ``SeoulBikeData.csv`` (CSV, header, Latin-1) | 8760 | ``Rented Bike Count`` |
| ``obesity`` | ``ObesityDataSet_raw_and_data_sinthetic.csv`` (CSV, header; in a zip upstream) | 2111 | ``NObeyesdad`` as ordinal 0–6 (or a numeric column such as ``Weight``) |

Preprocessing: numeric columns as they are; categorical columns (Seoul bike's Seasons,
Holiday, Functioning Day; obesity's Gender, CAEC, MTRANS, ...) one-hot, or one 0/1 column
when there are two values; Seoul bike's ``Date`` is dropped (time enters through Hour and
Seasons); for ``energy`` the other load is dropped. Split: a random permutation (seeded)
cut 75 % / 10 % / 15 % into train / validation / test, as in the structured-SGMCMC paper.
Features and target are standardised with the mean and standard deviation of the training
part only (``meta['y_mean']``, ``meta['y_std']`` convert errors back to original units).
The obesity target is a class label; using it as an ordinal regression target is our reading
of the paper (which reports MSE for it).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass

import numpy as np
import torch

from . import checksums
from .base import Dataset, fit_standardizer, permutation, split_sizes
from .files import DataError, Source
from .tabular import decode, encode_columns, read_delimited, read_xls, read_xlsx

OBESITY_LEVELS = (
    "Insufficient_Weight",
    "Normal_Weight",
    "Overweight_Level_I",
    "Overweight_Level_II",
    "Obesity_Type_I",
    "Obesity_Type_II",
    "Obesity_Type_III",
)

_HOUSING = ["crim", "zn", "indus", "chas", "nox", "rm", "age", "dis", "rad", "tax", "ptratio", "black", "lstat", "medv"]
_CONCRETE = [
    "cement",
    "blast_furnace_slag",
    "fly_ash",
    "water",
    "superplasticizer",
    "coarse_aggregate",
    "fine_aggregate",
    "age",
    "compressive_strength",
]
_AIRFOIL = [
    "frequency",
    "angle_of_attack",
    "chord_length",
    "free_stream_velocity",
    "suction_side_displacement_thickness",
    "scaled_sound_pressure_level",
]
_ENERGY = [
    "relative_compactness",
    "surface_area",
    "wall_area",
    "roof_area",
    "overall_height",
    "orientation",
    "glazing_area",
    "glazing_area_distribution",
    "heating_load",
    "cooling_load",
]
_YACHT = [
    "longitudinal_position",
    "prismatic_coefficient",
    "length_displacement_ratio",
    "beam_draught_ratio",
    "length_beam_ratio",
    "froude_number",
    "residuary_resistance",
]


@dataclass(frozen=True)
class _Set:
    files: tuple[str, ...]  # checksums.UCI keys, preferred first
    target: str
    drop: tuple[str, ...] = ()


SETS = {
    "boston": _Set(("boston.csv", "housing.data"), "medv"),
    "concrete": _Set(("concrete.csv", "Concrete_Data.xls"), "compressive_strength"),
    "wine-red": _Set(("winequality-red.csv",), "quality"),
    "wine-white": _Set(("winequality-white.csv",), "quality"),
    "airfoil": _Set(("airfoil_self_noise.dat",), "scaled_sound_pressure_level"),
    "energy": _Set(("ENB2012_data.xlsx", "ENB2012_data.csv"), "heating_load"),
    "yacht": _Set(("yacht_hydrodynamics.data",), "residuary_resistance"),
    "seoul-bike": _Set(("SeoulBikeData.csv",), "Rented Bike Count", drop=("Date",)),
    "obesity": _Set(("ObesityDataSet_raw_and_data_sinthetic.csv", "obesity.zip"), "NObeyesdad"),
}
ALIASES = {"housing": "boston", "wine": "wine-red", "bike": "seoul-bike", "energy-efficiency": "energy"}
UCI_REGRESSION = tuple(SETS)


def _obesity_from_zip(path) -> bytes:
    try:
        with zipfile.ZipFile(path) as z:
            members = [n for n in z.namelist() if n.endswith(".csv")]
            if not members:
                raise DataError(f"{path}: no CSV file in the archive")
            return z.read(members[0])
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise DataError(f"{path}: not a readable zip archive ({err})") from err


def read_table(name: str, key: str, path) -> tuple[list[str], list[list[str]]]:
    """Header and string rows of one of the canonical files (``key`` in ``checksums.UCI``)."""
    where = str(path)
    if key in ("Concrete_Data.xls", "ENB2012_data.xlsx"):
        rows = read_xls(path) if key.endswith(".xls") else read_xlsx(path)
        names = _CONCRETE if name == "concrete" else _ENERGY
        rows = [r[: len(names)] for r in rows[1:]]  # the spreadsheets' own headers are long-winded
        for i, r in enumerate(rows):
            if len(r) != len(names) or any(v == "" for v in r):
                raise DataError(f"{where}: data row {i + 1} is incomplete (truncated or corrupted?)")
        return list(names), rows
    text = decode(path.read_bytes() if key != "obesity.zip" else _obesity_from_zip(path), where)
    if key == "housing.data":
        return read_delimited(text, sep=None, header=False, names=_HOUSING, where=where)
    if key == "airfoil_self_noise.dat":
        return read_delimited(text, sep=None, header=False, names=_AIRFOIL, where=where)
    if key == "yacht_hydrodynamics.data":
        return read_delimited(text, sep=None, header=False, names=_YACHT, where=where)
    if key.startswith("winequality"):
        return read_delimited(text, sep=";", header=True, where=where)
    if key == "ENB2012_data.csv":
        return read_delimited(text, sep=",", header=True, names=_ENERGY, where=where)
    head, rows = read_delimited(text, sep=",", header=True, where=where)
    if head and head[0] in ("", "rownames"):  # an R export with a row-name column
        head, rows = head[1:], [r[1:] for r in rows]
    return head, rows


def load_uci(
    name: str,
    *,
    target: str | None = None,
    data_dir=None,
    cache_dir=None,
    download: bool = True,
    verify: bool = True,
    split=(0.75, 0.10, 0.15),
    seed: int = 0,
    standardize_x: bool = True,
    standardize_y: bool = True,
    dtype=torch.float32,
) -> Dataset:
    """One UCI regression set (see the module docstring), split and standardised.

    ``split`` gives the train / validation / test fractions (validation may be 0); ``seed``
    fixes the permutation. ``target`` overrides the default target column.
    """
    key = ALIASES.get(name, name)
    if key not in SETS:
        raise ValueError(f"unknown UCI set {name!r}; choose from {UCI_REGRESSION}")
    spec = SETS[key]
    src = Source(data_dir, cache_dir, download, verify)
    file_spec, path = src.fetch_first([checksums.UCI[f] for f in spec.files])
    file_key = next(f for f in spec.files if checksums.UCI[f] == file_spec)
    header, rows = read_table(key, file_key, path)
    tgt = target or spec.target
    drop = list(spec.drop)
    if key == "energy":
        drop += [c for c in ("heating_load", "cooling_load") if c != tgt]
    target_map = {v: i for i, v in enumerate(OBESITY_LEVELS)} if (key == "obesity" and tgt == "NObeyesdad") else None
    x, y, names = encode_columns(header, rows, tgt, drop=drop, target_map=target_map, where=str(path))

    n = len(y)
    n_tr, n_va, n_te = split_sizes(n, split)
    if n_tr == 0:
        raise ValueError(
            f"split={tuple(split)} leaves no training rows of the {n} in {key}: give a larger training "
            "fraction (the first entry)"
        )
    perm = permutation(n, seed).numpy()
    parts = np.split(perm, [n_tr, n_tr + n_va])
    x_t = torch.from_numpy(x).to(dtype)
    y_t = torch.from_numpy(y).to(dtype)
    xs = [x_t[p] if len(p) else None for p in parts]
    ys = [y_t[p] if len(p) else None for p in parts]
    meta = {
        "source": str(path),
        "split": tuple(split),
        "seed": seed,
        "target": tgt,
        "num_rows": n,
        "x_mean": None,
        "x_std": None,
        "y_mean": 0.0,
        "y_std": 1.0,
    }
    if standardize_x:
        assert xs[0] is not None  # n_tr >= 1
        mean, std = fit_standardizer(xs[0])
        xs = [None if v is None else (v - mean) / std for v in xs]
        meta["x_mean"], meta["x_std"] = mean.squeeze(0), std.squeeze(0)
    if standardize_y:
        assert ys[0] is not None  # n_tr >= 1
        mean, std = fit_standardizer(ys[0])
        ys = [None if v is None else (v - mean) / std for v in ys]
        meta["y_mean"], meta["y_std"] = float(mean), float(std)
    x_tr, y_tr = xs[0], ys[0]
    assert x_tr is not None and y_tr is not None  # n_tr >= 1
    return Dataset(key, "regression", x_tr, y_tr, xs[2], ys[2], xs[1], ys[1], feature_names=names, meta=meta)


def _named(key: str, doc: str):
    def loader(**kw) -> Dataset:
        return load_uci(key, **kw)

    loader.__name__ = f"load_{key.replace('-', '_')}"
    loader.__doc__ = f"{doc} Keyword arguments as :func:`load_uci`."
    return loader


load_boston = _named("boston", "Boston housing (506 × 13, target medv).")
load_concrete = _named("concrete", "Concrete compressive strength (1030 × 8).")
load_airfoil = _named("airfoil", "Airfoil self-noise (1503 × 5).")
load_energy = _named("energy", "Energy efficiency (768 × 8, heating load; target='cooling_load' for the other).")
load_yacht = _named("yacht", "Yacht hydrodynamics (308 × 6).")
load_seoul_bike = _named("seoul-bike", "Seoul bike sharing demand (8760 rows, hourly rented bike count).")
load_obesity = _named("obesity", "Obesity levels (2111 rows, ordinal obesity level 0-6).")


def load_wine_quality(color: str = "red", **kw) -> Dataset:
    """Wine quality, ``color`` ``"red"`` (1599) or ``"white"`` (4898). Keyword arguments as
    :func:`load_uci`."""
    if color not in ("red", "white"):
        raise ValueError(f"color must be 'red' or 'white', got {color!r}")
    return load_uci(f"wine-{color}", **kw)
