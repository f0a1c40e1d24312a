"""Training checkpoints as one safetensors file: no pickle anywhere.

Tensors: ``model.*`` (weights, a tied tensor stored once), ``optim.<param>.<key>`` (optimizer state),
``rng.*`` (torch, data-sampler and CUDA generator states), ``carry.*`` (the RNN state carried across
batches), ``best.*`` (the best evaluation's weights). Everything else (step, history, early-stopping
counters, optimizer param groups) is JSON in the file's metadata. Written to a temp name, then renamed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from corpusforge.models.zoo import load_state, unique_state_dict


def _state_tensors(state) -> list[torch.Tensor]:
    if state is None:
        return []
    return list(state) if isinstance(state, tuple) else [state]


def save_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, meta: dict[str, Any],
                    rng: dict[str, torch.Tensor], carried_state=None, best: dict[str, torch.Tensor] | None = None,
                    weights: dict[str, torch.Tensor] | None = None,
                    optimizer_state: dict[str, Any] | None = None) -> Path:
    """Write weights, optimizer state, RNG states and the carried RNN state; ``meta`` (JSON) holds the rest.
    ``weights`` and ``optimizer_state``, when given, are written instead of the model's and the optimizer's own
    (a sharded model's, gathered to whole tensors: corpusforge.models.sharding)."""
    from safetensors.torch import save_file

    tensors = {f"model.{k}": v for k, v in (weights if weights is not None else unique_state_dict(model)).items()}
    opt = optimizer_state if optimizer_state is not None else optimizer.state_dict()
    for pid, st in opt["state"].items():
        for key, value in st.items():
            t = value if torch.is_tensor(value) else torch.tensor(value)
            tensors[f"optim.{pid}.{key}"] = t.detach().contiguous().cpu()
    for name, t in rng.items():
        tensors[f"rng.{name}"] = t.contiguous().cpu()
    for i, t in enumerate(_state_tensors(carried_state)):
        tensors[f"carry.{i}"] = t.detach().contiguous().cpu()
    for k, v in (best or {}).items():
        tensors[f"best.{k}"] = v.contiguous().cpu()
    meta = {**meta, "param_groups": opt["param_groups"], "carry_kind": type(carried_state).__name__}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"corpusforge": json.dumps(meta)})
    digest, digest_tmp = digest_path(path), digest_path(tmp)
    digest_tmp.write_text(_sha256(tmp) + "\n", encoding="ascii")
    os.replace(tmp, path)  # atomic: a reader never sees half a checkpoint
    os.replace(digest_tmp, digest)  # a kill between the two renames leaves a mismatch: the resume starts over
    return path


def digest_path(path: Path) -> Path:
    """Where a checkpoint's SHA-256 is recorded when it is written: ``checkpoint.safetensors.sha256``."""
    return Path(path).with_name(Path(path).name + ".sha256")


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checkpoint_problem(path: Path) -> str | None:
    """Why the checkpoint at ``path`` must not be resumed (its recorded digest is missing or differs: it changed
    after it was written), or None when it is the file the trainer wrote."""
    digest = digest_path(path)
    try:
        recorded = digest.read_text(encoding="ascii").strip()
    except OSError:
        return f"no recorded digest ({digest.name})"
    actual = _sha256(path)
    if actual != recorded:
        return f"its SHA-256 {actual[:12]} is not the {recorded[:12]} recorded when it was written"
    return None


def checkpoint_meta(path: Path) -> dict[str, Any]:
    """A checkpoint's metadata (step, history, ...) without reading its tensors."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return json.loads(f.metadata()["corpusforge"])


def read_checkpoint(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = json.loads(f.metadata()["corpusforge"])
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    return tensors, meta


def restore_checkpoint(tensors, meta, model, optimizer, device, sharded: bool = False):
    """Load weights and optimizer state; return (carried RNN state, best weights, RNG states). ``sharded``: the
    model's layers are sharded over ranks (FSDP2): each rank loads its shards of the whole tensors."""
    weights = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    state: dict[int, dict[str, torch.Tensor]] = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            _, pid, key = k.split(".", 2)
            state.setdefault(int(pid), {})[key] = v.to(device) if key != "step" or device.type == "cuda" else v
    if sharded:
        from corpusforge.models.sharding import load_full, load_full_optimizer

        load_full(model, weights)
        load_full_optimizer(optimizer, {"state": state, "param_groups": meta["param_groups"]})
    else:
        load_state(model, weights)
        optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    carry = [tensors[f"carry.{i}"].to(device) for i in range(sum(k.startswith("carry.") for k in tensors))]
    carried = None if not carry else (tuple(carry) if meta["carry_kind"] == "tuple" else carry[0])
    best = {k[5:]: v for k, v in tensors.items() if k.startswith("best.")} or None
    rng = {k[4:]: v for k, v in tensors.items() if k.startswith("rng.")}
    return carried, best, rng
