"""Content digests and artifact ids.

An artifact id is ``sha256(step name, step version, canonical config JSON, ids of its inputs)``
(docs: Internals, "The artifact store"). Canonical JSON means sorted keys, no whitespace and UTF-8, so that
the same config written in a different key order or YAML style gives the same id.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20


def canonical_json(value: Any) -> str:
    """Serialise ``value`` deterministically. Floats must be finite: NaN has no stable JSON form."""
    return json.dumps(
        _check_finite(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _check_finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"config values must be finite numbers, got {value!r}")
    if isinstance(value, Mapping):
        return {str(k): _check_finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_check_finite(v) for v in value]
    return value


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, streamed in 1 MiB chunks (bounded memory for any file size)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def config_hash(config: Mapping[str, Any]) -> str:
    return sha256_bytes(canonical_json(config).encode("utf-8"))


def artifact_id(step: str, version: int, config: Mapping[str, Any], input_ids: Sequence[str]) -> str:
    """The content-derived id of a step output.

    ``input_ids`` keep their order: a step whose inputs are ordered (shards in source order) gets a
    different id when the order changes, which is what we want because its output changes too.
    """
    if not step or not isinstance(step, str):
        raise ValueError("step name must be a non-empty string")
    if not isinstance(version, int) or version < 0:
        raise ValueError(f"step version must be a non-negative int, got {version!r}")
    payload = {"step": step, "version": version, "config": dict(config), "inputs": list(input_ids)}
    return sha256_bytes(canonical_json(payload).encode("utf-8"))


def combine_digests(digests: Iterable[str]) -> str:
    """One digest standing for an ordered collection of digests (used for dataset digests in tracking)."""
    return sha256_bytes("\n".join(digests).encode("ascii"))
