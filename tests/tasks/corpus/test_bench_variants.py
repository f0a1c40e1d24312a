"""benchmarks/corpus_variants.py: how a variant is read (config overrides vs environment, values with commas)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def variants():
    sys.path.insert(0, str(BENCH))
    try:
        import corpus_variants

        yield corpus_variants
    finally:
        sys.path.remove(str(BENCH))


def test_a_variant_splits_config_overrides_from_environment(variants):
    name, sets, env = variants.parse_variant(
        "fast:shard_mb=16,env._RJEM_MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1,shard_compression=zstd")
    assert name == "fast"
    assert sets == {"shard_mb": "16", "shard_compression": "zstd"}
    assert env == {"_RJEM_MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"}  # the comma stays in the value
    assert variants.parse_variant("defaults:") == ("defaults", {}, {})


@pytest.mark.parametrize("bad", ["no-colon-or-name", ":shard_mb=1", "x:novalue"])
def test_a_malformed_variant_is_refused(variants, bad):
    with pytest.raises(SystemExit):
        variants.parse_variant(bad)
