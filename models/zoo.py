"""The model families by name: config classes, construction, and the (config, weights) round trip.

A saved LM is ``config.json`` ({"family": ..., "model": {...}}) plus ``model.safetensors``; loading
never unpickles anything.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch.nn as nn

from corpusforge.models.configs import FAMILY_CONFIGS
from corpusforge.models.encoder import TransformerEncoder
from corpusforge.models.gpt import GPT
from corpusforge.models.nplm import NPLM
from corpusforge.models.rnn import RNNLM

MODULES: dict[str, type[nn.Module]] = {"gpt": GPT, "rnn": RNNLM, "nplm": NPLM, "encoder": TransformerEncoder}
FAMILIES: dict[str, tuple[type, type[nn.Module]]] = {name: (FAMILY_CONFIGS[name], MODULES[name]) for name in FAMILY_CONFIGS}


def build_model(family: str, model_cfg: Any) -> nn.Module:
    if family not in FAMILIES:
        raise ValueError(f"family: one of {', '.join(FAMILIES)}, got {family!r}")
    cfg_cls, model_cls = FAMILIES[family]
    if not isinstance(model_cfg, cfg_cls):
        model_cfg = cfg_cls(**dict(model_cfg))
    return model_cls(model_cfg)


def model_config_dict(model: nn.Module) -> dict[str, Any]:
    family = next(name for name, (_, cls) in FAMILIES.items() if type(model) is cls)
    return {"family": family, "model": dataclasses.asdict(model.cfg)}


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


def load_state(model: nn.Module, tensors: dict[str, Any]) -> None:
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {n for n, p in model.named_parameters(remove_duplicate=False)} - {n for n, _ in model.named_parameters()}
    if unexpected or set(missing) - tied:
        raise ValueError(f"weights do not fit the model: missing {sorted(set(missing) - tied)}, unexpected {unexpected}")


def save_lm(model: nn.Module, directory: Path) -> None:
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(unique_state_dict(model), str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(model_config_dict(model), indent=2) + "\n", encoding="utf-8")


def load_lm(directory: Path, device: str = "cpu") -> nn.Module:
    from safetensors.torch import load_file

    directory = Path(directory)
    spec = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    model = build_model(spec["family"], spec["model"])
    load_state(model, load_file(str(directory / "model.safetensors"), device=device))
    return model.to(device).eval()
