"""LoRA (Hu et al. 2021) on our own modules, through peft's custom-model support.

``W x`` becomes ``W x + (alpha / r) * B A x`` on the chosen ``nn.Linear`` layers: ``A`` (r x in) drawn as peft
draws it (kaiming-uniform, as nn.Linear's default), ``B`` (out x r) zero, so a fresh adapter model computes exactly
what the base model computes; only A and B train, every other weight is frozen. peft's
``inject_adapter_in_model`` swaps each target for a ``peft.tuners.lora.Linear`` wrapper in place and returns the
same object: the model keeps its class and its ``forward`` (the trainer, the objectives and decoding see no
difference), its state dict gains ``<target>.base_layer.weight`` and ``<target>.lora_{A,B}.default.weight``.

- :func:`add_lora` adds the adapters and freezes the rest, returning the parameter counts;
- :func:`adapter_state_dict` / :func:`load_adapter`: only the adapter tensors, under stable names
  (``<target>.lora_A.weight``, ``<target>.lora_B.weight``; no adapter name), for a small safetensors file;
- :func:`merge_lora`: a plain copy of the model with ``W + (alpha / r) B A`` folded in, state-dict keys equal to
  the base model's (what ``corpusforge.models.zoo.save_model`` writes and ``load_model`` reads);
- :func:`adapters_disabled`: the base model's forward for as long as the block lasts (the DPO reference when the
  policy is the base model plus adapters: no second copy of the weights).

Targets are module-name suffixes (``"attn.c_attn"`` matches ``blocks.0.attn.c_attn``, ``blocks.1.attn.c_attn``,
...). Unnamed, they are the model's family's (``FamilySpec.lora_targets``): the attention projections, as the LoRA
paper (section 7.1: adapting the attention weights is enough) and the texts that follow it advise; GPT's and the
BERT-bodied families' are ``attn.c_attn`` and ``attn.c_proj``, the encoder-decoder Transformer's ``W_q`` and ``W_v``.
``train_also`` names parameters that train fully beside the adapters: a classifier's fresh head (``HEAD``), as in
the LoRA paper's GLUE runs.

Our ``c_attn`` packs the q, k and v projections in one (3C x C) matrix, so an adapter on it adapts all three. The
paper's "W_q and W_v" apart would need split projections (separate (A_q, B_q) and (A_v, B_v)): a target such as
``"attn.c_attn:q,v"`` is refused. Masking the k rows of a shared B is not that (A would be shared by q and v, and
the masked rows would still count as trained parameters), and splitting the projection belongs to models/gpt.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

from corpusforge.models.adapters import ADAPTER, lora_layers, norm_params, adapters_disabled, has_lora
from corpusforge.models.configs import LORA_DEFAULT_TARGETS, LoraSettings

__all__ = ["ADAPTER", "DEFAULT_TARGETS", "adapter_state_dict", "adapters_disabled", "add_lora", "family_targets",
           "has_lora", "load_adapter", "lora_settings", "match_targets", "merge_lora"]

DEFAULT_TARGETS = LORA_DEFAULT_TARGETS  # GPT's (corpusforge.models.gpt.spec), kept for callers that name them


def _settings(cfg: Any) -> LoraSettings:
    """A :class:`LoraSettings` from itself, a mapping (JSON metadata) or any object with the same attributes."""
    if isinstance(cfg, LoraSettings):
        return cfg
    if isinstance(cfg, Mapping):
        return LoraSettings(**dict(cfg))
    return LoraSettings(targets=None if cfg.targets is None else tuple(cfg.targets), r=cfg.r, alpha=cfg.alpha, dropout=cfg.dropout,
                        train_norms=bool(getattr(cfg, "train_norms", False)))


def match_targets(model: nn.Module, targets: Sequence[str]) -> dict[str, list[str]]:
    """Each target suffix -> the full names of the ``nn.Linear`` modules it matches (a name equal to the target or
    ending in ``"." + target``). A target that matches no Linear is an error naming the Linears there are."""
    targets = _settings({"targets": tuple(targets)}).targets  # the same refusals as LoraSettings
    if not targets:
        raise ValueError("targets: name at least one Linear module to adapt")
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    found = {t: [n for n in linears if n == t or n.endswith("." + t)] for t in targets}
    missing = [t for t, names in found.items() if not names]
    if missing:
        suffixes = sorted({".".join(n.split(".")[-2:]) for n in linears})
        raise ValueError(f"LoRA targets {missing} match no nn.Linear in {type(model).__name__}; its Linear modules "
                         f"are {linears} (suffixes: {suffixes})")
    return found


def family_targets(model: nn.Module) -> tuple[str, ...]:
    """The Linear layers LoRA adapts in this model when none are named: its family's ``lora_targets``."""
    from corpusforge.models.family import family_of

    return LoraSettings().for_family(family_of(model)).targets


def add_lora(model: nn.Module, targets: Sequence[str] | None = None, r: int = 8, alpha: float = 16.0,
             dropout: float = 0.0, train_norms: bool = False, train_also: Sequence[str] = ()) -> dict[str, Any]:
    """Add LoRA adapters to the ``nn.Linear`` modules named by ``targets`` (suffixes; None: the model's family's),
    in place, and freeze every other parameter but those whose names start with one of ``train_also`` (a task
    head trained fully). ``B`` starts at 0 (the model computes exactly what it did), ``A`` as peft draws it
    (kaiming-uniform). Returns ``trainable``, ``total`` (parameters, tied ones once), ``percent`` (100 *
    trainable / total), ``per_target`` ({suffix: trainable parameters}, r * (in + out) per matched Linear),
    ``also`` (the ``train_also`` parameters, when named) and ``settings`` (a :class:`LoraSettings` dict, for
    :func:`load_adapter`).

    With ``train_norms`` every LayerNorm's gain and bias trains too (their starting values are kept aside, so
    :func:`adapters_disabled` still gives the base model); ``norms`` then counts them.

    An adapter on our fused ``attn.c_attn`` adapts q, k and v together (see the module docstring)."""
    from peft import LoraConfig, inject_adapter_in_model

    if has_lora(model):
        raise ValueError("the model already carries LoRA adapters (merge_lora or a fresh model first)")
    if targets is None:
        targets = family_targets(model)
    settings = LoraSettings(targets=tuple(targets), r=r, alpha=alpha, dropout=dropout, train_norms=train_norms)
    found = match_targets(model, settings.targets)
    also = tuple(train_also)
    if also and not any(n.startswith(also) for n, _ in model.named_parameters()):
        raise ValueError(f"train_also {list(also)}: no parameter of {type(model).__name__} starts with these")
    names = sorted({n for ns in found.values() for n in ns})
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=names, bias="none",
                        init_lora_weights=True)
    inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    for p_name, p in model.named_parameters():  # peft does this too; here it is a stated guarantee
        p.requires_grad = ".lora_A." in p_name or ".lora_B." in p_name or (bool(also) and p_name.startswith(also))
    norms = norm_params(model) if train_norms else {}
    if train_norms and not norms:
        raise ValueError(f"train_norms: {type(model).__name__} has no LayerNorm to train")
    for p in norms.values():
        p.requires_grad = True
    model._lora_settings = settings  # noqa: SLF001  (plain attribute: not a parameter, not in the state dict)
    # the base model's norms, for adapters_disabled (plain attribute: not in the state dict)
    model._lora_base_norms = {k: p.detach().clone() for k, p in norms.items()}  # noqa: SLF001
    modules = dict(model.named_modules())
    per_target = {t: sum(p.numel() for n in ns for k, p in modules[n].named_parameters()
                         if k.startswith(("lora_A.", "lora_B."))) for t, ns in found.items()}
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return {"trainable": trainable, "total": total, "percent": 100.0 * trainable / total,
            "per_target": per_target, "norms": sum(p.numel() for p in norms.values()),
            **({"also": sum(p.numel() for n, p in model.named_parameters() if n.startswith(also))} if also else {}),
            "settings": settings.to_dict()}


def lora_settings(model: nn.Module) -> LoraSettings:
    settings = getattr(model, "_lora_settings", None)
    if settings is None:
        raise ValueError("the model carries no LoRA adapters (add_lora first)")
    return settings


def _stable(name: str) -> str:
    """``blocks.0.attn.c_attn.lora_A.default.weight`` -> ``blocks.0.attn.c_attn.lora_A.weight``."""
    return name.replace(f".lora_A.{ADAPTER}.", ".lora_A.").replace(f".lora_B.{ADAPTER}.", ".lora_B.")


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the adapter tensors, detached, contiguous, on the CPU, named ``<module>.lora_A.weight`` and
    ``<module>.lora_B.weight`` (no peft adapter name), plus the LayerNorms' gains and biases under their own names
    when the settings train them: what a safetensors adapter file holds."""
    out = {}
    if has_lora(model) and lora_settings(model).train_norms:
        out.update({k: p.detach().contiguous().cpu() for k, p in norm_params(model).items()})
    for layer_name, layer in lora_layers(model):
        for part in ("lora_A", "lora_B"):
            for key, tensor in getattr(layer, part)[ADAPTER].state_dict().items():
                out[f"{layer_name}.{part}.{key}"] = tensor.detach().contiguous().cpu()
    if not out:
        raise ValueError("the model carries no LoRA adapters")
    return out


def load_adapter(model: nn.Module, tensors: Mapping[str, torch.Tensor],
                 lora_cfg: LoraSettings | Mapping[str, Any]) -> dict[str, Any]:
    """Add adapters as ``lora_cfg`` says (unless the model already has them) and load ``tensors`` into them
    exactly: a missing or unexpected tensor, or one of another shape, is an error. Returns :func:`add_lora`'s
    counts (or, for a model that already had adapters, just the settings)."""
    settings = _settings(lora_cfg)
    if has_lora(model):
        if lora_settings(model) != settings:
            raise ValueError(f"the model carries other adapters ({lora_settings(model)}) than {settings}")
        counts: dict[str, Any] = {"settings": settings.to_dict()}
    else:
        counts = add_lora(model, settings.targets, settings.r, settings.alpha, settings.dropout, settings.train_norms)
    own = adapter_state_dict(model)
    missing, unexpected = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
    shapes = sorted(f"{k} {tuple(tensors[k].shape)} != {tuple(own[k].shape)}" for k in own
                    if k in tensors and tuple(tensors[k].shape) != tuple(own[k].shape))
    if missing or unexpected or shapes:
        raise ValueError(f"adapter tensors do not fit the model: missing {missing}, unexpected {unexpected}, "
                         f"shapes {shapes}")
    with torch.no_grad():
        for layer_name, layer in lora_layers(model):
            for part in ("lora_A", "lora_B"):
                for key, p in getattr(layer, part)[ADAPTER].named_parameters():
                    p.copy_(tensors[f"{layer_name}.{part}.{key}"].to(p.device, p.dtype))
        if settings.train_norms:
            for key, p in norm_params(model).items():
                p.copy_(tensors[key].to(p.device, p.dtype))
    return counts


def merge_lora(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with each adapter folded in (``W + (alpha / r) B A``) and the peft wrappers replaced by
    plain ``nn.Linear`` again: the same class, state-dict keys equal to the base model's, every parameter
    trainable. ``model`` itself is left as it was (adapters and all)."""
    if not has_lora(model):
        raise ValueError("the model carries no LoRA adapters to merge")
    merged = copy.deepcopy(model)
    for layer_name, layer in list(lora_layers(merged)):
        if layer.merged:
            layer.unmerge()
        layer.merge(safe_merge=True, adapter_names=[ADAPTER])
        base = layer.get_base_layer()
        parent_name, _, child = layer_name.rpartition(".")
        parent = merged.get_submodule(parent_name) if parent_name else merged
        setattr(parent, child, base)
    for attr in ("_lora_settings", "_lora_base_norms"):  # trained norms stay as trained: they are plain weights
        if hasattr(merged, attr):
            delattr(merged, attr)
    for p in merged.parameters():
        p.requires_grad = True
    return merged
