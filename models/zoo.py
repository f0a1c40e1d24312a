"""Models by family (corpusforge.models.family): construction, and the (config, weights) round trip.

A saved model is ``config.json`` ({"family": ..., "model": {...}}) plus ``model.safetensors``; loading never
unpickles anything. Weights move in two ways: exactly (``load_state``: a saved model, a checkpoint's exact
resume) and as a start (``load_weights``: a stage's ``init``, a backbone under a new head, what did not fit reported).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch.nn as nn

from corpusforge.models.family import family, family_of  # family_of: also read from here


def build_model(name: str, model_cfg: Any) -> nn.Module:
    """The family's module built from its config (a dataclass, or a dict of its fields), the family recorded on it
    (``family_of`` reads it)."""
    spec = family(name)
    if not isinstance(model_cfg, spec.config):
        from corpusforge.models.objectives import legacy_keys

        model_cfg = spec.config(**legacy_keys(spec, dict(model_cfg)))
    model = spec.module_class()(model_cfg)
    model.family_name = spec.name  # a plain attribute: not a parameter, not in the state dict
    return model


def objective_for(model: nn.Module, splits: dict[str, Any], settings: Any = None) -> Any:
    """The objective ``settings`` name (default: the family's default kind and settings) for this model on these
    splits (corpusforge.models.objectives.build)."""
    from corpusforge.models.objectives import build, default_settings

    return build(settings or default_settings(family_of(model)), model.cfg, splits)


def model_config_dict(model: nn.Module) -> dict[str, Any]:
    return {"family": family_of(model).name, "model": dataclasses.asdict(model.cfg)}


def unique_state_dict(model: nn.Module) -> dict[str, Any]:
    """The state dict without the second name of a tied tensor (safetensors refuses shared storage).

    A tensor is the same as one seen before only if it is the same view of the same storage: cuDNN packs all of
    a fused RNN's weights into one flat buffer on GPU, so sharing a storage alone does not make two weights one."""
    seen: set[tuple] = set()
    out = {}
    for name, tensor in model.state_dict(keep_vars=False).items():
        key = ((tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()))
               if tensor.numel() else (id(tensor),))
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().contiguous().cpu()
    return out


def _tied_names(model: nn.Module) -> set[str]:
    """Second names of tied tensors, which unique_state_dict leaves out of saved weights."""
    return {n for n, _ in model.named_parameters(remove_duplicate=False)} - {n for n, _ in model.named_parameters()}


def _upgraded(model: nn.Module, tensors: Mapping[str, Any]) -> Mapping[str, Any]:
    """``tensors`` under the model's parameter names of today (its family's ``upgrade_weights`` hook, if any)."""
    from corpusforge.models import contracts

    upgrade = contracts.hook(model, "upgrade_weights")
    return upgrade(tensors) if upgrade is not None else tensors


def load_state(model: nn.Module, tensors: dict[str, Any]) -> None:
    """Exactly these weights (a saved model, a checkpoint): a missing or unexpected key is an error."""
    tensors = _upgraded(model, tensors)
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if unexpected or set(missing) - _tied_names(model):
        raise ValueError(f"weights do not fit the model: missing {sorted(set(missing) - _tied_names(model))}, "
                         f"unexpected {unexpected}")


def load_weights(model: nn.Module, tensors: dict[str, Any]) -> dict[str, list[str]]:
    """Start ``model`` from another model's weights (a stage's ``init``): every tensor whose name and shape fit is
    loaded; the rest is reported, never silently dropped. Returns ``loaded`` (names), ``missing`` (the model's
    tensors the weights lack: a new head keeps its fresh init), ``unexpected`` (tensors the model has no place
    for: the parent's old head) and ``mismatched`` (same name, another shape: kept fresh, named with both
    shapes). Raises when nothing fits, which is never what was meant."""
    own = model.state_dict()
    tensors = _upgraded(model, tensors)
    fitting = {k: v for k, v in tensors.items() if k in own and tuple(own[k].shape) == tuple(v.shape)}
    mismatched = sorted(f"{k} {tuple(tensors[k].shape)} -> {tuple(own[k].shape)}" for k in tensors
                        if k in own and k not in fitting)
    if not fitting:
        raise ValueError(f"init: none of the {len(tensors)} tensors fits this model (names or shapes differ)")
    model.load_state_dict(fitting, strict=False)
    tied = _tied_names(model)
    return {"loaded": sorted(fitting),
            "missing": sorted(k for k in own if k not in fitting and k not in tied and k not in tensors),
            "unexpected": sorted(k for k in tensors if k not in own),
            "mismatched": mismatched}


def save_model(model: nn.Module, directory: Path, extra: Mapping[str, Any] | None = None) -> None:
    """``model.safetensors`` and ``config.json`` (family and model config, then ``extra``: what the stage that
    trained it records, its tokenizer, data and training config) in one write."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(unique_state_dict(model), str(directory / "model.safetensors"))
    spec = {**model_config_dict(model), **(extra or {})}
    (directory / "config.json").write_text(json.dumps(spec, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def load_model(directory: Path, device: str = "cpu") -> nn.Module:
    from safetensors.torch import load_file

    directory = Path(directory)
    spec = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    model = build_model(spec["family"], spec["model"])
    load_state(model, load_file(str(directory / "model.safetensors"), device=device))
    return model.to(device).eval()
