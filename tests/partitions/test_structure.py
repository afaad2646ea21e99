"""Layer/unit structure on the parameter space and the partitions built from it.

The group ids of ``by_layer`` / ``by_neuron`` / ``by_finer_nodes`` / ``node_blocks`` must stay
exactly those of the earlier, name-based implementation (existing chains depend on them):
``_reference_*`` below is that implementation, kept verbatim in substance as an independent
check, and small cases are also written out by hand.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import OrderedDict

import pytest
import torch
from torch import nn

import structmc as sm
import structmc.partitions as P
from structmc.layers import LayerInfo
from structmc.models import MLP, ConvNet, layer_ids, layer_structure, resnet20, unit_ids


# ---------------------------------------------------------------------------------------
# the earlier name-based rule, as an independent reference
# ---------------------------------------------------------------------------------------
def _reference_layers(space):
    layers = OrderedDict()
    for info in space.params:
        prefix, _, leaf = info.name.rpartition(".")
        key = prefix if leaf in ("weight", "bias") and prefix else info.name
        layers.setdefault(key, []).append(info)
    return layers


def _reference_node_blocks(space, chunk_size=None):
    blocks = []
    for infos in _reference_layers(space).values():
        by_leaf = {i.name.rpartition(".")[2]: i for i in infos}
        w, b = by_leaf.get("weight"), by_leaf.get("bias")
        if w is None or len(w.shape) == 0 or (b is not None and b.shape != (w.shape[0],)) or len(infos) > 2:
            for info in infos:
                blocks.extend(torch.arange(info.offset, info.offset + info.numel).split(1))
            continue
        out = w.shape[0]
        rows = torch.arange(w.offset, w.offset + w.numel).view(out, w.numel // out)
        if b is not None:
            rows = torch.cat([rows, torch.arange(b.offset, b.offset + out).unsqueeze(1)], 1)
        for row in rows:
            if chunk_size is None:
                blocks.append(row)
            else:
                blocks.extend(torch.tensor_split(row, max(1, row.numel() // chunk_size)))
    return blocks


def _reference_ids(space, kind, chunk_size=None):
    ids = torch.full((space.dim,), -1, dtype=torch.long)
    if kind == "layer":
        for g, infos in enumerate(_reference_layers(space).values()):
            for info in infos:
                ids[info.slice] = g
        return ids
    for g, idx in enumerate(_reference_node_blocks(space, chunk_size)):
        ids[idx] = g
    return ids


def _seq_mlp(widths):
    layers = []
    for k, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers += [nn.Linear(a, b)] + ([nn.Sigmoid()] if k < len(widths) - 2 else [])
    return nn.Sequential(*layers)


def _spaces():
    out = {
        "mlp_seq": sm.ParamSpace.from_module(_seq_mlp([30, 10, 10, 3])),
        "mlp": sm.ParamSpace.from_module(MLP((7, 5, 4, 2))),
        "mlp_nobias": sm.ParamSpace.from_module(MLP((7, 5, 2), bias=False)),
        "cnn": sm.ParamSpace.from_module(ConvNet(channels=(4, 6), hidden=(12,))),
        "cnn_default": sm.ParamSpace.from_module(ConvNet()),
        "resnet20": sm.ParamSpace.from_module(resnet20()),
        "resnet20_group_B": sm.ParamSpace.from_module(resnet20(norm="group", shortcut="B")),
        "resnet20_nonorm": sm.ParamSpace.from_module(resnet20(norm=None)),
        "flat": sm.ParamSpace.flat(11),
        "hand": sm.ParamSpace(
            [
                ("w", (3, 2)),
                ("b", (2,)),
                ("log_sigma", ()),
                ("fc.weight", (3, 4)),
                ("fc.bias", (3,)),
                ("weight", (2, 2)),
                ("c.bias", (4,)),
                ("x.y.weight", (2, 3, 2)),
                ("x.y.bias", (2,)),
                ("bad.weight", (3, 2)),
                ("bad.bias", (2,)),
                ("s.weight", ()),
            ]
        ),
    }
    return out


SPACES = _spaces()


@pytest.mark.parametrize("name", list(SPACES))
def test_group_ids_identical_to_the_name_based_implementation(name):
    space = SPACES[name]
    assert torch.equal(P.by_layer(space).group_ids, _reference_ids(space, "layer"))
    assert torch.equal(P.by_neuron(space).group_ids, _reference_ids(space, "neuron"))
    big = space.dim > 10_000  # the reference loops over blocks in Python: few chunk sizes there
    for c in (3, 10, 100) if big else (1, 2, 3, 10):
        assert torch.equal(P.by_finer_nodes(space, c).group_ids, _reference_ids(space, "finer", c))
    for c in (None, 10, 100) if big else (None, 1, 3, 10):
        old, new = _reference_node_blocks(space, c), P.node_blocks(space, c)
        assert len(old) == len(new) and all(torch.equal(a, b) for a, b in zip(old, new))


def test_group_ids_written_out_for_an_mlp_2_3_1():
    # flat layout: w0 [3, 2] -> 0..5, b0 [3] -> 6..8, w1 [1, 3] -> 9..11, b1 [1] -> 12
    space = sm.ParamSpace.from_module(MLP((2, 3, 1)))
    assert P.by_layer(space).group_ids.tolist() == [0] * 9 + [1] * 4
    assert P.by_neuron(space).group_ids.tolist() == [0, 0, 1, 1, 2, 2, 0, 1, 2, 3, 3, 3, 3]
    assert P.by_finer_nodes(space, 2).group_ids.tolist() == [0, 0, 1, 1, 2, 2, 0, 1, 2, 3, 3, 4, 4]
    assert [b.tolist() for b in P.node_blocks(space)] == [[0, 1, 6], [2, 3, 7], [4, 5, 8], [9, 10, 11, 12]]
    # CNN: first conv's channel 0 is its 1*5*5 weights then its bias
    cnn = sm.ParamSpace.from_module(ConvNet())
    w, b = cnn["convs.0.weight"], cnn["convs.0.bias"]
    assert P.node_blocks(cnn)[0].tolist() == list(range(w.offset, w.offset + 25)) + [b.offset]
    flat = sm.ParamSpace.flat(3)
    assert P.by_layer(flat).num_groups == 1 and P.by_neuron(flat).group_ids.tolist() == [0, 1, 2]


def test_per_group_layer_and_unit_for_an_mlp_2_3_1():
    space = sm.ParamSpace.from_module(MLP((2, 3, 1)))
    neuron = P.by_neuron(space)
    assert neuron.layer.tolist() == [0, 0, 0, 1] and neuron.unit.tolist() == [0, 1, 2, 0]
    assert neuron.layer_names == ("layers.0", "layers.1") and neuron.layer_name(3) == "layers.1"
    layer = P.by_layer(space)
    assert layer.layer.tolist() == [0, 1] and layer.unit.tolist() == [-1, 0]  # the output layer is one unit
    finer = P.by_finer_nodes(space, 2)
    assert finer.layer.tolist() == [0, 0, 0, 1, 1] and finer.unit.tolist() == [0, 1, 2, 0, 0]
    rr = P.round_robin(space.dim, 4)
    assert rr.layer.tolist() == [-1] * 4 and rr.unit.tolist() == [-1] * 4 and rr.layer_names is None
    rr = rr.annotate(space)
    assert rr.layer.tolist() == [-1] * 4 and rr.layer_names == ("layers.0", "layers.1")
    fact = P.make_partition("factorized", space)
    assert fact.layer.tolist() == [0] * 9 + [1] * 4
    assert fact.unit.tolist() == [0, 0, 1, 1, 2, 2, 0, 1, 2, 0, 0, 0, 0]
    cust = P.custom(space, [["layers.1.*"], ["*"]])
    assert cust.layer.tolist() == [0, 1] and cust.unit.tolist() == [-1, 0]  # relabelled by first appearance
    # annotate reproduces what the structural builders fill in
    for part in (neuron, layer, finer):
        ann = P.Partition(part.group_ids, part.num_groups).annotate(space)
        assert torch.equal(ann.layer, part.layer) and torch.equal(ann.unit, part.unit)


def test_space_unit_and_layer_ids_match_the_models_helpers():
    for module in (MLP((4, 3, 2)), ConvNet(channels=(3, 4), hidden=(5,)), resnet20(norm="group")):
        space = sm.ParamSpace.from_module(module)
        assert torch.equal(space.unit_ids(), unit_ids(module)) and torch.equal(space.layer_ids(), layer_ids(module))
        assert space.num_units == int(space.unit_ids().max()) + 1
    space = sm.ParamSpace.from_module(MLP((2, 3, 1)))
    assert space.unit_ids(within_layer=True).tolist() == [0, 0, 1, 1, 2, 2, 0, 1, 2, 0, 0, 0, 0]
    assert space.layer_index("layers.1.bias") == 1


# ---------------------------------------------------------------------------------------
# module types vs names
# ---------------------------------------------------------------------------------------
def _summary(space):
    return [(l.kind, l.weight, l.bias, l.num_units, l.fan_in, l.other) for l in space.layers]


@pytest.mark.parametrize(
    "module",
    [
        MLP((5, 4, 3)),
        ConvNet(channels=(3, 4), hidden=(6,)),
        resnet20(norm="group"),
        resnet20(),
        nn.Sequential(nn.Conv1d(2, 3, 3), nn.Flatten(), nn.Linear(9, 2)),
    ],
    ids=["mlp", "cnn", "resnet_gn", "resnet_bn", "conv1d"],
)
def test_layers_from_types_and_from_names_agree_for_linear_and_conv(module):
    typed = sm.ParamSpace.from_module(module)
    named = sm.ParamSpace([(i.name, i.shape) for i in typed.params])
    assert _summary(typed) == _summary(named)
    assert [l.name for l in typed.layers] == [l.name for l in named.layers]
    assert [l.name for l in layer_structure(module, include_norm=True)] == [
        l.name for l in typed.layers if l.kind != "other"
    ]


class _Affine(nn.Module):
    """A linear map that is not an ``nn.Linear``: parameters named weight/bias."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(3, 4))
        self.bias = nn.Parameter(torch.zeros(3))


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.gain = nn.Parameter(torch.ones(3))


class _LoRALinear(nn.Linear):
    def __init__(self):
        super().__init__(4, 3)
        self.lora = nn.Parameter(torch.zeros(2, 4))


def test_type_based_rule_where_names_would_differ():
    # a custom module with weight/bias names: names would make it one linear layer; types
    # do not recognise it, so every element is a unit ("other"), one record per parameter
    space = sm.ParamSpace.from_module(nn.ModuleDict({"aff": _Affine(), "head": nn.Linear(3, 2)}))
    assert [(l.name, l.kind, l.other) for l in space.layers] == [
        ("aff.weight", "other", ("aff.weight",)),
        ("aff.bias", "other", ("aff.bias",)),
        ("head", "linear", ()),
    ]
    assert [l.kind for l in sm.ParamSpace([(i.name, i.shape) for i in space.params]).layers] == ["linear", "linear"]
    assert P.by_neuron(space).num_groups == 12 + 3 + 2 and P.by_layer(space).num_groups == 3
    # an nn.Linear with an extra parameter next to it (a module's own parameters come before
    # its children's), and a Linear subclass with one inside
    space = sm.ParamSpace.from_module(nn.Sequential(_Scaled(), _LoRALinear()))
    assert [(l.name, l.kind, l.params) for l in space.layers] == [
        ("0.gain", "other", ("0.gain",)),
        ("0.fc", "linear", ("0.fc.weight", "0.fc.bias")),
        ("1", "linear", ("1.weight", "1.bias")),
        ("1.lora", "other", ("1.lora",)),
    ]
    # Embedding (rows are not a layer's units) and ConvTranspose (an output channel is not
    # weight[u]) fall back to "other"; Bilinear and LayerNorm are recognised
    net = nn.ModuleDict(
        {
            "emb": nn.Embedding(5, 2),
            "up": nn.ConvTranspose1d(2, 3, 2),
            "bil": nn.Bilinear(2, 3, 4),
            "ln": nn.LayerNorm([2, 3]),
        }
    )
    space = sm.ParamSpace.from_module(net)
    kinds = {l.name: (l.kind, l.num_units, l.fan_in) for l in space.layers}
    assert kinds == {
        "emb.weight": ("other", 10, 1),
        "up.weight": ("other", 12, 1),
        "up.bias": ("other", 3, 1),
        "bil": ("linear", 4, 6),
        "ln": ("norm", 6, 1),
    }
    part = P.by_neuron(space)
    assert int(part.sizes().sum()) == space.dim
    bil = space.layer_index("bil.weight")
    assert part.sizes()[part.layer == bil].tolist() == [7] * 4  # 2*3 weights + bias per output unit
    # frozen parameters: the weight-less layer keeps its units (its biases)
    mlp = MLP((3, 2, 2))
    mlp.layers[1].weight.requires_grad_(False)
    rec = sm.ParamSpace.from_module(mlp).layers[1]
    assert (rec.kind, rec.weight, rec.bias, rec.num_units) == ("linear", None, "layers.1.bias", 2)


# ---------------------------------------------------------------------------------------
# CSR members / blocks
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_members_and_blocks_equal_the_direct_definition(seed):
    g = torch.Generator().manual_seed(seed)
    dim = 257
    parts = [
        P.random_partition(dim, 13, seed=seed),
        P.custom(dim, torch.randint(0, 40, (dim,), generator=g)),
        P.round_robin(dim, 5),
        P.fully_joint(dim),
        P.fully_factorized(dim),
        P.by_finer_nodes(SPACES["hand"], 2),
    ]
    for part in parts:
        blocks = part.blocks()
        assert len(blocks) == part.num_groups
        for k in range(part.num_groups):
            direct = torch.nonzero(part.group_ids == k).flatten()
            assert torch.equal(part.members(k), direct) and torch.equal(blocks[k], direct)
        assert torch.equal(part.sizes(), torch.bincount(part.group_ids, minlength=part.num_groups))
        assert torch.equal(torch.cat(blocks), part.order)
        assert part.offsets.tolist() == [0] + part.sizes().cumsum(0).tolist()
    with pytest.raises(IndexError):
        parts[0].members(13)


def test_partition_copies_and_moves_keep_everything():
    part = P.by_neuron(SPACES["mlp"])
    part.blocks()
    for other in (copy.copy(part), copy.deepcopy(part), part.to("cpu")):
        assert torch.equal(other.group_ids, part.group_ids) and other.num_groups == part.num_groups
        assert torch.equal(other.layer, part.layer) and torch.equal(other.unit, part.unit)
        assert other.layer_names == part.layer_names and other.kind == part.kind
        assert all(torch.equal(a, b) for a, b in zip(other.blocks(), part.blocks()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        part.num_groups = 3
    with pytest.raises(ValueError, match="layer must have shape"):
        P.Partition(torch.tensor([0, 1]), 2, layer=torch.tensor([0]))
    assert sm.structured.Partition is P.Partition and sm.structured.by_neuron is P.by_neuron


# ---------------------------------------------------------------------------------------
# config round trip
# ---------------------------------------------------------------------------------------
def test_space_config_round_trip_keeps_the_layers():
    net = nn.ModuleDict({"aff": _Affine(), "conv": nn.Conv2d(1, 2, 3), "bn": nn.BatchNorm2d(2), "fc": nn.Linear(3, 2)})
    space = sm.ParamSpace.from_module(net)
    cfg = json.loads(json.dumps(space.to_config()))
    back = sm.ParamSpace.from_config(cfg)
    assert back.layers == space.layers and [(i.name, i.shape, i.offset) for i in back.params] == [
        (i.name, i.shape, i.offset) for i in space.params
    ]
    for build in (P.by_layer, P.by_neuron, lambda s: P.by_finer_nodes(s, 4)):
        assert torch.equal(build(back).group_ids, build(space).group_ids)
    # without the layers (and in the older [(name, shape)] format): names decide
    legacy = sm.ParamSpace.from_config([(i.name, i.shape) for i in space.params])
    assert legacy.layers == sm.ParamSpace.from_config(space.to_config(layers=False)).layers
    assert [l.kind for l in legacy.layers] == ["linear", "conv", "norm", "linear"]
    assert LayerInfo.from_config(space.layers[0].to_config()) == space.layers[0]


def test_invalid_layer_records_are_rejected():
    shapes = [("fc.weight", (3, 4)), ("fc.bias", (3,)), ("s", (2,))]
    fc = LayerInfo("fc", "linear", "fc.weight", "fc.bias", 3, 4)
    s = LayerInfo("s", "other", None, None, 2, 1, ("s",))
    assert sm.ParamSpace(shapes, [s, fc]).layers == (fc, s)  # put in flat-vector order
    with pytest.raises(ValueError, match="belong to no layer"):
        sm.ParamSpace(shapes, [fc])
    with pytest.raises(ValueError, match="does not fit"):
        sm.ParamSpace(shapes, [LayerInfo("fc", "linear", "fc.weight", "fc.bias", 4, 3), s])
    with pytest.raises(ValueError, match="two layers"):
        sm.ParamSpace(shapes, [fc, s, LayerInfo("b", "other", None, None, 3, 1, ("fc.bias",))])
    with pytest.raises(ValueError, match="kind"):
        LayerInfo("x", "dense", "x.weight", None, 1, 1)
