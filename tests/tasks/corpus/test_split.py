"""corpusforge.tasks.corpus.split: deterministic, per-document train/valid/test assignment."""

from __future__ import annotations

from collections import Counter

import pytest

from corpusforge.tasks.corpus.split import SPLITS, SplitConfig, assign_split, assign_splits

IDS = [f"doc-{i:06d}" for i in range(20_000)]


def test_deterministic_across_calls():
    cfg = SplitConfig(valid=0.1, test=0.1, seed=3)
    first = assign_splits(IDS[:2000], cfg)
    assert assign_splits(IDS[:2000], cfg) == first
    assert assign_splits(iter(IDS[:2000]), SplitConfig(valid=0.1, test=0.1, seed=3)) == first
    assert set(first) <= set(SPLITS)


def test_fractions_roughly_honored():
    # 20,000 ids at 5% each: a binomial count has std sqrt(0.05 * 0.95 / 20000) ~ 0.15 percentage points,
    # so +-1pp is ~6.5 standard deviations. The ids and the hash are fixed, so the outcome is
    # deterministic anyway: this test either always passes or always fails, it cannot flake.
    for cfg in (SplitConfig(valid=0.05, test=0.05, seed=0), SplitConfig(valid=0.05, test=0.05, seed=11)):
        counts = Counter(assign_splits(IDS, cfg))
        n = len(IDS)
        assert abs(counts["valid"] / n - cfg.valid) <= 0.01, counts
        assert abs(counts["test"] / n - cfg.test) <= 0.01, counts
        assert abs(counts["train"] / n - (1 - cfg.valid - cfg.test)) <= 0.01, counts


def test_larger_fractions_roughly_honored():
    # valid 20%, test 30%: std ~0.28pp and ~0.32pp at n=20,000, so +-1pp is > 3 std (and deterministic).
    cfg = SplitConfig(valid=0.2, test=0.3, seed=5)
    counts = Counter(assign_splits(IDS, cfg))
    assert abs(counts["valid"] / len(IDS) - 0.2) <= 0.01, counts
    assert abs(counts["test"] / len(IDS) - 0.3) <= 0.01, counts


def test_zero_fractions_put_everything_in_train():
    assert set(assign_splits(IDS[:1000], SplitConfig(valid=0.0, test=0.0))) == {"train"}


def test_assignment_does_not_depend_on_other_docs():
    cfg = SplitConfig(valid=0.3, test=0.3, seed=1)
    together = assign_splits(IDS[:500], cfg)
    alone = [assign_split(d, cfg) for d in IDS[:500]]
    assert together == alone
    reversed_ = assign_splits(list(reversed(IDS[:500])), cfg)
    assert list(reversed(reversed_)) == together
    # Appending other documents never moves an existing one.
    grown = assign_splits(IDS[:500] + [f"new-{i}" for i in range(500)], cfg)
    assert grown[:500] == together
    # With these fractions all three splits occur, so the comparison above is not vacuous.
    assert set(together) == set(SPLITS)


def test_changing_seed_changes_assignments():
    a = assign_splits(IDS[:5000], SplitConfig(valid=0.1, test=0.1, seed=0))
    b = assign_splits(IDS[:5000], SplitConfig(valid=0.1, test=0.1, seed=1))
    changed = sum(x != y for x, y in zip(a, b))
    # Independent draws differ with probability 1 - (0.8^2 + 0.1^2 + 0.1^2) = 0.34.
    assert changed / len(a) > 0.2
    held_out_a = {d for d, s in zip(IDS, a) if s == "valid"}
    held_out_b = {d for d, s in zip(IDS, b) if s == "valid"}
    assert held_out_a != held_out_b


@pytest.mark.parametrize(
    "kwargs",
    [{"valid": -0.1}, {"valid": 1.0}, {"test": 1.5}, {"test": -1e-9}, {"valid": 0.5, "test": 0.5},
     {"valid": 0.7, "test": 0.6}, {"valid": float("nan")}],
)
def test_invalid_fractions_raise(kwargs):
    with pytest.raises(ValueError):
        SplitConfig(**kwargs)
