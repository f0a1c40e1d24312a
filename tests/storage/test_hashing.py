"""Canonical JSON, artifact ids and file digests (storage/hashing.py)."""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from corpusforge.storage.hashing import artifact_id, canonical_json, sha256_file
from tests.conftest import write

BASE = {"step": "corpus", "version": 3, "config": {"lower": True, "min_chars": 5}, "inputs": ["aa11", "bb22"]}


def _id(**changes):
    args = {**BASE, **changes}
    return artifact_id(args["step"], args["version"], args["config"], args["inputs"])


def test_canonical_json_is_key_order_independent():
    a = {"b": 1, "a": {"y": [1, 2], "x": "é"}}
    b = {"a": {"x": "é", "y": [1, 2]}, "b": 1}
    assert list(a) != list(b)  # genuinely different insertion order
    assert canonical_json(a) == canonical_json(b)
    # Sorted keys, no whitespace, non-ASCII kept as UTF-8 (written out by hand).
    assert canonical_json(a) == '{"a":{"x":"é","y":[1,2]},"b":1}'


def test_artifact_id_matches_design_definition():
    payload = {"step": BASE["step"], "version": BASE["version"], "config": BASE["config"], "inputs": BASE["inputs"]}
    expected = hashlib.sha256(
        json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    ).hexdigest()
    assert _id() == expected
    assert len(_id()) == 64


def test_artifact_id_is_stable_for_equal_inputs():
    reordered_config = dict(reversed(list(BASE["config"].items())))
    assert list(reordered_config) != list(BASE["config"])
    assert _id() == _id()
    assert _id(config=reordered_config) == _id()
    assert _id(inputs=tuple(BASE["inputs"])) == _id()


@pytest.mark.parametrize(
    "changes",
    [
        {"step": "corpus2"},
        {"version": 4},
        {"config": {"lower": True, "min_chars": 6}},
        {"config": {"lower": False, "min_chars": 5}},
        {"config": {"lower": True, "min_chars": 5, "extra": None}},
        {"inputs": ["bb22", "aa11"]},  # order matters
        {"inputs": ["aa11"]},
    ],
    ids=["step", "version", "config-int", "config-bool", "config-extra-key", "input-order", "input-dropped"],
)
def test_artifact_id_changes_with_identity_fields(changes):
    assert _id(**changes) != _id()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -math.inf])
def test_non_finite_config_rejected(bad):
    with pytest.raises(ValueError):
        canonical_json({"a": bad})
    with pytest.raises(ValueError):
        canonical_json({"nested": {"list": [1.0, bad]}})
    with pytest.raises(ValueError):
        artifact_id("step", 1, {"lr": bad}, [])


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) * 2 + 12345])
def test_sha256_file_equals_hashlib(tmp_path, size):
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    path = write(tmp_path / "blob.bin", data)
    assert sha256_file(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha256_file(str(path)) == hashlib.sha256(data).hexdigest()
