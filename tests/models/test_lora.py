"""LoRA on our own modules through peft (corpusforge.models.lora)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.model import GPT
from corpusforge.models.lora import (
    DEFAULT_TARGETS,
    adapter_state_dict,
    adapters_disabled,
    add_lora,
    load_adapter,
    merge_lora,
)
from corpusforge.models.zoo import load_model, save_model

CFG = GPTConfig(vocab_size=50, block_size=32, n_layer=2, n_head=2, n_embd=32)


def tiny(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(CFG)


def ids(seed: int = 1, shape=(3, 12)) -> torch.Tensor:
    return torch.randint(0, CFG.vocab_size, shape, generator=torch.Generator().manual_seed(seed))


def logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(x)[0]


def train_a_little(model: nn.Module, steps: int = 5) -> None:
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for s in range(steps):
        x = ids(100 + s, (4, 16))
        out, _ = model(x[:, :-1])
        loss = nn.functional.cross_entropy(out.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()


def base_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k.replace(".base_layer", ""): v.clone() for k, v in model.state_dict().items() if ".lora_" not in k}


def test_fresh_adapters_change_nothing_and_count_what_trains():
    x = ids()
    model = tiny()
    before = logits(model, x)
    counts = add_lora(model, DEFAULT_TARGETS, r=4, alpha=8, dropout=0.0)
    assert type(model) is GPT
    assert torch.equal(logits(model, x), before)  # B = 0: exactly the base model
    C, r = CFG.n_embd, 4
    per_layer = {"attn.c_attn": r * (C + 3 * C), "attn.c_proj": r * (C + C)}
    assert counts["per_target"] == {t: CFG.n_layer * n for t, n in per_layer.items()}
    assert counts["trainable"] == CFG.n_layer * sum(per_layer.values())
    assert counts["total"] == sum(p.numel() for p in tiny().parameters()) + counts["trainable"]
    assert counts["percent"] == pytest.approx(100 * counts["trainable"] / counts["total"])
    for name, p in model.named_parameters():
        assert p.requires_grad == (".lora_A." in name or ".lora_B." in name), name
    for layer in range(CFG.n_layer):
        lora_b = model.blocks[layer].attn.c_attn.lora_B["default"].weight
        assert torch.count_nonzero(lora_b) == 0


def test_training_moves_only_the_adapters():
    x = ids()
    model = tiny()
    add_lora(model, r=4, alpha=8)
    frozen = base_weights(model)
    before = logits(model, x)
    train_a_little(model)
    assert not torch.allclose(logits(model, x), before)
    after = base_weights(model)
    assert frozen.keys() == after.keys()
    for k in frozen:
        assert torch.equal(frozen[k], after[k]), k


def test_merge_folds_the_update_into_a_plain_model(tmp_path):
    x = ids()
    model = tiny()
    base_keys = list(tiny().state_dict())
    add_lora(model, r=4, alpha=8)
    train_a_little(model)
    merged = merge_lora(model)
    assert type(merged) is GPT
    assert list(merged.state_dict()) == base_keys
    assert all(type(m) in (nn.Linear,) for n, m in merged.named_modules() if n.endswith(("c_attn", "c_proj")))
    assert torch.allclose(logits(merged, x), logits(model, x), atol=1e-5)
    assert merged.lm_head.weight is merged.wte.weight  # the tie survives the copy
    save_model(merged, tmp_path / "m")  # the zoo saves and loads it as any GPT
    assert torch.allclose(logits(load_model(tmp_path / "m"), x), logits(model, x), atol=1e-5)
    assert ".lora_B." in "".join(model.state_dict())  # the adapter model itself is untouched


def test_adapter_file_round_trip(tmp_path):
    from safetensors.torch import load_file, save_file

    x = ids()
    model = tiny()
    counts = add_lora(model, ("attn.c_attn",), r=2, alpha=4)
    train_a_little(model)
    tensors = adapter_state_dict(model)
    assert set(tensors) == {f"blocks.{i}.attn.c_attn.lora_{p}.weight" for i in range(CFG.n_layer) for p in "AB"}
    save_file(tensors, str(tmp_path / "adapter.safetensors"))

    fresh = tiny()  # the same base weights
    load_adapter(fresh, load_file(str(tmp_path / "adapter.safetensors")), counts["settings"])
    assert torch.equal(logits(fresh, x), logits(model, x))

    with pytest.raises(ValueError, match="missing"):
        load_adapter(tiny(), {k: v for k, v in tensors.items() if "blocks.1" not in k}, counts["settings"])
    with pytest.raises(ValueError, match="unexpected"):
        load_adapter(tiny(), {**tensors, "blocks.0.mlp.c_fc.lora_A.weight": tensors["blocks.0.attn.c_attn.lora_A.weight"]},
                     counts["settings"])


def test_adapters_disabled_is_the_base_model():
    x = ids()
    model = tiny()
    base = logits(model, x)
    add_lora(model, r=4, alpha=8)
    train_a_little(model)
    adapted = logits(model, x)
    grads = {n: p.requires_grad for n, p in model.named_parameters()}
    with adapters_disabled(model):
        assert torch.equal(logits(model, x), base)
    assert torch.equal(logits(model, x), adapted)
    assert {n: p.requires_grad for n, p in model.named_parameters()} == grads


def test_bad_targets_name_the_candidates():
    with pytest.raises(ValueError, match=r"attn\.c_qkv.*blocks\.0\.attn\.c_attn.*mlp\.c_fc"):
        add_lora(tiny(), ("attn.c_qkv",))
    with pytest.raises(ValueError, match="q, k, v in one matrix"):
        add_lora(tiny(), ("attn.c_attn:q,v",))
    model = tiny()
    add_lora(model)
    with pytest.raises(ValueError, match="already"):
        add_lora(model)


def test_paper_example_trains_under_one_percent():
    """Hu et al.: d = 1000, r = 4 on a 1000 x 1000 matrix trains 2 * 1000 * 4 = 8000 of 1e6 weights: 0.8%."""
    model = nn.Sequential()
    model.add_module("proj", nn.Linear(1000, 1000, bias=False))
    counts = add_lora(model, ("proj",), r=4, alpha=4)
    assert counts["trainable"] == 8000
    assert 100 * counts["trainable"] / 1_000_000 == pytest.approx(0.8)
    assert counts["percent"] == pytest.approx(100 * 8000 / 1_008_000)


def test_train_norms_trains_layernorms_saves_merges_and_switches_off(tmp_path):
    """lora.train_norms: the LayerNorms' gains and biases train beside A and B, travel in the adapter file, fold
    into the merge, and adapters_disabled still gives the base model (the DPO reference)."""
    from safetensors.torch import load_file, save_file

    x = ids()
    model = tiny()
    base = logits(model, x)
    base_state = {k: v.clone() for k, v in tiny().state_dict().items()}
    counts = add_lora(model, ("attn.c_attn",), r=2, alpha=4, train_norms=True)
    norm_names = [n for n, m in model.named_modules() if isinstance(m, nn.LayerNorm)]
    norm_params = {f"{n}.{k}": p for n in norm_names for k, p in model.get_submodule(n).named_parameters()}
    assert len(norm_names) == 2 * CFG.n_layer + 1 and norm_params  # ln_1, ln_2 per block and ln_f
    assert counts["norms"] == sum(p.numel() for p in norm_params.values())
    assert counts["trainable"] == sum(counts["per_target"].values()) + counts["norms"]
    assert counts["settings"]["train_norms"] is True
    assert torch.equal(logits(model, x), base)  # B = 0 and the norms untouched: still the base model
    train_a_little(model)
    moved = [n for n in norm_names if not torch.equal(model.get_submodule(n).weight, base_state[f"{n}.weight"])]
    assert moved == norm_names
    adapted = logits(model, x)
    with adapters_disabled(model):
        assert torch.equal(logits(model, x), base)
    assert torch.equal(logits(model, x), adapted)

    tensors = adapter_state_dict(model)
    assert set(norm_params) <= set(tensors)
    save_file(tensors, str(tmp_path / "adapter.safetensors"))
    fresh = tiny()
    load_adapter(fresh, load_file(str(tmp_path / "adapter.safetensors")), counts["settings"])
    assert torch.equal(logits(fresh, x), adapted)
    with adapters_disabled(fresh):  # the loaded model's reference is its base, not the trained norms
        assert torch.equal(logits(fresh, x), base)
    merged = merge_lora(model)
    assert list(merged.state_dict()) == list(base_state)
    assert torch.allclose(logits(merged, x), adapted, atol=1e-5)


def test_train_norms_is_left_out_of_old_configs():
    """Adapters made before the option keep their config.json (and so their ids)."""
    from corpusforge.models.configs import LoraSettings

    gpt = LoraSettings(targets=DEFAULT_TARGETS)
    assert "train_norms" not in gpt.to_dict()
    assert LoraSettings(**{**gpt.to_dict(), "train_norms": True}).to_dict()["train_norms"] is True


def test_unnamed_targets_are_the_familys_and_a_family_without_them_is_told():
    """Issue 45, item 8: LoRA targets live on the FamilySpec; every family that names some has Linear layers they
    match, and the ids of configs that leave them unnamed are those of the old default (GPT's)."""
    from corpusforge.models.configs import LoraSettings
    from corpusforge.models.family import families, family
    from corpusforge.models.lora import family_targets, match_targets
    from corpusforge.models.zoo import build_model
    from corpusforge.tasks.config import identity

    small = {"gpt": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8},
             "encoder": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "mask_id": 1},
             "bert": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "mask_id": 1},
             "bert_classifier": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "cls_id": 1, "sep_id": 2,
                                 "pad_id": 0},
             "sbert": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "cls_id": 1, "sep_id": 2, "pad_id": 0},
             "bert_tagger": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "cls_id": 1, "sep_id": 2,
                             "pad_id": 0},
             "bert_reader": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "cls_id": 1, "sep_id": 2,
                             "pad_id": 0},
             "transformer": {"n_enc_layer": 1, "n_dec_layer": 1, "n_head": 2, "d_model": 16, "d_ff": 32, "pad_id": 0, "bos_id": 1,
                             "eos_id": 2}}
    named = {name for name, spec in families().items() if spec.lora_targets}
    assert named == set(small)  # the Transformer families; the recurrent ones name none
    for name in sorted(named):
        model = build_model(name, small[name])
        assert family_targets(model) == family(name).lora_targets
        found = match_targets(model, family(name).lora_targets)
        assert all(found.values()), (name, found)
    with pytest.raises(ValueError, match="rnn family names no LoRA targets"):
        LoraSettings().for_family(family("rnn"))
    assert LoraSettings().for_family(family("transformer")).targets == ("W_q", "W_v")
    assert identity(LoraSettings()) == identity(LoraSettings(targets=DEFAULT_TARGETS))
