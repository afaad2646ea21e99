"""ChainHistory: FIFO window with thinning, uniform draws, reservoir mode, storage dtype,
group-sorted layout and checkpoints."""

from __future__ import annotations

import torch

from structmc.structured import ChainHistory

F64 = torch.float64


def test_window_fifo_thinning_and_draw_is_a_gather():
    h = ChainHistory(3, thin=2)
    h.reset(torch.zeros(2, 4))
    for t in range(1, 8):
        h.push(torch.full((2, 4), float(t)))
    # stored: 0 (start), then every 2nd observed: 2, 4, 6 -> window of 3 keeps 2, 4, 6
    assert sorted(h.buffer[0, :, 0].tolist()) == [2.0, 4.0, 6.0]
    h2 = ChainHistory(5)
    h2.reset(torch.arange(8.0).view(1, 8))
    for t in range(1, 5):
        h2.push(torch.arange(8.0).view(1, 8) + 100 * t)
    ids = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    g = torch.Generator().manual_seed(0)
    draws = h2.draw(6, ids, 4, g)
    assert draws.shape == (1, 6, 8)
    times = (draws // 100).long()
    assert torch.equal(times[..., 0::2], times[..., 1::2])  # one time per group
    assert torch.equal(draws % 100, torch.arange(8.0).expand(1, 6, 8))  # values from the right columns


def test_draws_are_uniform_over_stored_samples_before_the_buffer_is_full():
    h = ChainHistory(100)
    h.reset(torch.zeros(1, 1))
    for t in range(1, 10):
        h.push(torch.full((1, 1), float(t)))
    g = torch.Generator().manual_seed(1)
    draws = h.draw(20000, torch.zeros(1, dtype=torch.long), 1, g).flatten().long()
    counts = torch.bincount(draws, minlength=10).double()
    expected = 20000 / 10
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 27.9  # chi-square, 9 degrees of freedom, p = 0.001


def test_reservoir_keeps_a_uniform_sample_of_the_whole_chain():
    counts = torch.zeros(50)
    g = torch.Generator().manual_seed(0)
    for _rep in range(400):
        h = ChainHistory(5, mode="reservoir")
        h.reset(torch.zeros(1, 1))
        for t in range(1, 50):
            h.push(torch.full((1, 1), float(t)), g)
        counts[h.buffer[0, :, 0].long()] += 1
    expected = 400 * 5 / 50
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 85.4  # 49 degrees of freedom, p = 0.001
    assert counts[40:].sum() > 0 and counts[:10].sum() > 0


def test_bfloat16_storage_and_state_roundtrip():
    h = ChainHistory(4, dtype=torch.bfloat16)
    h.reset(torch.randn(2, 3, dtype=F64))
    h.push(torch.randn(2, 3, dtype=F64))
    assert h.buffer.dtype == torch.bfloat16 and h.memory_bytes() == 2 * 4 * 3 * 2
    out = h.draw(2, torch.arange(3), 3, torch.Generator(), dtype=F64)
    assert out.dtype == F64
    h2 = ChainHistory(4, dtype=torch.bfloat16)
    h2.load_state_dict(h.state_dict())
    assert torch.equal(h2.buffer[:, :2], h.buffer[:, :2]) and h2.count == 2


def test_group_sorted_layout_gives_the_same_draws_and_survives_a_checkpoint():
    ids = torch.arange(11) % 3
    thetas = torch.randn(6, 2, 11, dtype=F64)
    plain, sorted_ = ChainHistory(4), ChainHistory(4)
    plain.reset(thetas[0])
    sorted_.reset(thetas[0], ids)
    for x in thetas[1:]:
        plain.push(x)
        sorted_.push(x)
    a = plain.draw(5, ids, 3, torch.Generator().manual_seed(3))
    b = sorted_.draw(5, ids, 3, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    back = ChainHistory(4)
    back.load_state_dict(sorted_.state_dict())
    assert torch.equal(back.draw(5, ids, 3, torch.Generator().manual_seed(3)), a)


def test_padded_row_layout_gives_the_same_draws_and_checkpoints_in_the_sorted_format(monkeypatch):
    """Groups of unequal length (round robin: 13 and 12 parameters), a full window that has
    wrapped around, several chains and copies: the padded-row layout draws exactly what the
    plain and group-sorted layouts draw, and its checkpoint loads into either."""
    P, M, W = 63, 5, 4
    ids = torch.arange(P) % M
    thetas = torch.randn(9, 3, P, dtype=F64)
    plain, sorted_, rows = ChainHistory(W), ChainHistory(W), ChainHistory(W)
    with monkeypatch.context() as m:
        m.setattr(ChainHistory, "MIN_ROW", 10**9)  # no padded rows: the group-sorted gather
        sorted_.reset(thetas[0], ids)
    rows.reset(thetas[0], ids)
    plain.reset(thetas[0])
    assert sorted_._rows is None and rows._rows is not None and rows.buffer.shape[-1] == M * 13
    for x in thetas[1:]:
        for h in (plain, sorted_, rows):
            h.push(x)
    draws = [h.draw(6, ids, M, torch.Generator().manual_seed(7)) for h in (plain, sorted_, rows)]
    assert torch.equal(draws[0], draws[1]) and torch.equal(draws[0], draws[2])
    # every draw of parameter j comes from one stored slot of its chain: values of thetas[5:9]
    stored = thetas[-W:]  # [W, C, P]
    assert bool((draws[2].unsqueeze(0) == stored.unsqueeze(2)).any(0).all())
    state = rows.state_dict()
    torch.testing.assert_close(state["buffer"], sorted_.state_dict()["buffer"], rtol=0, atol=0)
    for target in (ChainHistory(W), sorted_):
        target.load_state_dict(state)
        assert torch.equal(target.draw(6, ids, M, torch.Generator().manual_seed(7)), draws[0])
    back = ChainHistory(W)
    back.load_state_dict(sorted_.state_dict())
    assert back._rows is not None and torch.equal(back.draw(6, ids, M, torch.Generator().manual_seed(7)), draws[0])


def test_short_or_very_unequal_groups_keep_the_sorted_gather():
    h = ChainHistory(3)
    h.reset(torch.zeros(1, 40), torch.arange(40) % 8)  # groups of 5 < MIN_ROW
    assert h._rows is None
    h.reset(torch.zeros(1, 40), (torch.arange(40) >= 30).long())  # 30 and 10: padding 50%
    assert h._rows is None


def test_a_large_history_warns_with_its_size_before_it_is_allocated(monkeypatch):
    """The README's structured example (4 chains, ChainHistory(5000), a 784-100-10 MLP) took
    6.4 GB without a word; the buffer's size is now estimated up front and warned about."""
    import warnings

    import pytest

    C, P, W = 3, 100, 50
    size = C * W * P * 4  # float32
    monkeypatch.setattr(ChainHistory, "WARN_BYTES", size - 1)
    allocated = []
    real_zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: allocated.append(a) or real_zeros(*a, **k))
    with pytest.warns(UserWarning, match=r"capacity 50 x 3 chains x 100 parameters x 4 bytes") as rec:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # raise at the warning: nothing was allocated before it
            with pytest.raises(UserWarning):
                ChainHistory(W).reset(torch.zeros(C, P))
            assert allocated == [(C, P)]  # only the caller's theta
        ChainHistory(W).reset(torch.zeros(C, P))
    msg = str(rec[0].message)
    assert f"{size / 2**30:.3g} GiB" in msg and "ChainHistory(5, thin=10)" in msg and "reservoir" in msg
    assert "dtype=torch.bfloat16" in msg and "divides it by 2" in msg
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ChainHistory(W, dtype=torch.bfloat16).reset(torch.zeros(C, P))  # half the bytes: under the threshold
        ChainHistory(W - 1).reset(torch.zeros(C, P))
        monkeypatch.setattr(ChainHistory, "WARN_BYTES", 2 * 2**30)  # the default: 6.4 GB of the README warns
        with pytest.raises(UserWarning, match="5.92 GiB"):
            ChainHistory(5000)._check_memory(4, 79_510, 79_510, torch.float32)
