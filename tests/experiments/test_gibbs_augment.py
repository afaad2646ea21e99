"""gibbs-augment (Papamarkou 2023, Sect. 5.8, Table 4): the verdict rules of "augmentation lowers
accuracy drastically, catastrophically for FMNIST" (the tiny preset end to end is in
test_gibbs_mnist.py)."""

import pytest

from structmc.experiments import gibbs_augment as ga

from .adversarial import constants, passes, reversed_ranks, shuffled

# accuracy[transform][data set]. Untransformed: the paper's Table 2 cells (Table 4's first column).
# Table 4's other cells are not in our copy of the text: these illustrate its words ("deteriorates
# drastically", "catastrophic ... for FMNIST"): MNIST keeps 40-70 % of its accuracy above chance,
# FMNIST 7-35 %.
PAPER = {
    "none": {"mnist": 0.9075, "fashion-mnist": 0.8089},
    "rotation": {"mnist": 0.60, "fashion-mnist": 0.30},
    "blur": {"mnist": 0.65, "fashion-mnist": 0.35},
    "inversion": {"mnist": 0.40, "fashion-mnist": 0.15},
}


def _passes(answer, cfg=None):
    return passes(ga.comparisons(cfg or ga.Config(), answer))


def test_wrong_answers_do_not_pass_the_verdicts():
    """Adversarial numbers (issue 26 §1): the paper's answer passes all 11 claim rows (2 untransformed
    values, 6 drops, 3 "worse for FMNIST"); constants and reversed orderings pass at most 1, the
    transforms' numbers shifted by one method at most 3 (two transforms keep a drastic drop below
    the untransformed chain when one transform's numbers go to another); a drop of a few points —
    which the old rule "ours < untransformed" passed — passes none of the drop rows."""
    assert _passes(PAPER) == (11, 11)
    for answer in constants(PAPER):
        assert _passes(answer)[0] <= 1  # at most one untransformed value row
    assert _passes(shuffled(PAPER))[0] <= 3
    assert _passes(reversed_ranks(PAPER))[0] == 0
    small = {t: {d: a - (0.03 if t != "none" else 0) for d, a in PAPER["none"].items()} for t in PAPER}
    assert _passes(small) == (2, 11)  # 3 pp lost is not drastic: only the untransformed values pass
    # FMNIST no worse than MNIST (a point less of its accuracy above chance lost): the "worse for
    # FMNIST" rows and FMNIST's catastrophic rows fail (inversion's MNIST loss is catastrophic in itself)
    base_m, base_f = PAPER["none"]["mnist"], PAPER["none"]["fashion-mnist"]
    even = {
        t: {
            "mnist": c["mnist"],
            "fashion-mnist": base_f - (ga.lost_fraction(c["mnist"], base_m) - 0.01) * (base_f - 0.1),
        }
        for t, c in PAPER.items()
    }
    rows = ga.comparisons(ga.Config(), even)
    worse = [r for r in rows if "FMNIST, MNIST" in r.quantity]
    assert len(worse) == 3 and not any(r.verdict.startswith("reproduced") for r in worse)
    assert _passes(even) == (2 + 3 + 1, 11)


def test_drop_margins_follow_the_papers_words():
    """ "Drastic": a quarter of the accuracy above chance lost (on the paper's MNIST 90.75 %: down to
    70.56 %); "catastrophic" (FMNIST): half (on 80.89 %: down to 45.45 %); the edges pass, a point
    less does not; a chain that learned nothing is not comparable."""
    cfg = ga.Config()
    assert (cfg.drastic_loss, cfg.catastrophic_loss) == (0.25, 0.5)
    edge_m = 0.9075 - 0.25 * (0.9075 - 0.1)
    edge_f = 0.8089 - 0.5 * (0.8089 - 0.1)
    assert edge_m == pytest.approx(0.705625) and edge_f == pytest.approx(0.45445)

    def verdicts(m, f):
        rows = ga.comparisons(cfg, {"none": PAPER["none"], "blur": {"mnist": m, "fashion-mnist": f}})
        return [r.verdict.split(":")[0] for r in rows if "[augmented, untransformed]" in r.quantity]

    assert verdicts(edge_m - 1e-9, edge_f - 1e-9) == ["reproduced", "reproduced"]
    assert verdicts(edge_m + 0.01, edge_f + 0.01) == ["not reproduced", "not reproduced"]
    rows = ga.comparisons(cfg, {"none": {"mnist": 0.1}, "blur": {"mnist": 0.05}})
    assert rows[1].verdict.startswith("not comparable") and "not above chance" in rows[1].verdict
    rows = ga.comparisons(cfg, {"blur": {"mnist": 0.5}})  # include_untransformed=False
    assert rows[0].verdict.startswith("not comparable")
    with pytest.raises(ValueError, match="drastic_loss"):
        ga.Config(drastic_loss=0.6, catastrophic_loss=0.5)
    with pytest.raises(ValueError, match="tolerance must lie in"):
        ga.Config(tolerance=0.1)
