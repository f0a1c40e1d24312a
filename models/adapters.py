"""Switching LoRA adapters off and finding them (corpusforge.models.lora makes, saves and merges them).

Apart from models/lora.py because the objectives need only this: DPO's reference ``adapters_off`` is the policy with
its adapters switched off, and models/lora.py reads the model's family (its default targets), whose registry reads
the objectives."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn as nn

ADAPTER = "default"  # peft's adapter name; one adapter per model here


def norm_params(model: nn.Module) -> dict[str, nn.Parameter]:
    """Every LayerNorm's gain and bias, by full parameter name (``blocks.0.ln_1.weight``, ...)."""
    return {f"{name}.{k}" if name else k: p for name, m in model.named_modules() if isinstance(m, nn.LayerNorm)
            for k, p in m.named_parameters(recurse=False)}


def lora_layers(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    from peft.tuners.lora import LoraLayer

    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            yield name, module


def has_lora(model: nn.Module) -> bool:
    return next(lora_layers(model), None) is not None



@contextlib.contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block the model computes as the base model (every adapter switched off, trained LayerNorms back
    at their starting values); afterwards the adapters, the norms and every parameter's ``requires_grad`` are as
    they were. With no adapters it changes nothing."""
    layers = [layer for _, layer in lora_layers(model)]
    before = [layer.disable_adapters for layer in layers]
    grads = {id(p): p.requires_grad for p in model.parameters()}
    base_norms = getattr(model, "_lora_base_norms", {}) if layers else {}
    norms = norm_params(model) if base_norms else {}
    trained = {k: norms[k].detach().clone() for k in base_norms}
    for layer in layers:
        layer.enable_adapters(False)
    with torch.no_grad():
        for k, v in base_norms.items():
            norms[k].copy_(v.to(norms[k].device, norms[k].dtype))
    try:
        yield model
    finally:
        for layer, was_disabled in zip(layers, before):
            layer.enable_adapters(not was_disabled)
        with torch.no_grad():
            for k, v in trained.items():
                norms[k].copy_(v)
        for p in model.parameters():
            p.requires_grad = grads[id(p)]
