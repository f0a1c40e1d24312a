"""A saved GPT as a Hugging Face ``transformers`` checkpoint: ``GPT2LMHeadModel``, with its tokenizer.

    export_hf(model_dir, out_dir)        # then AutoModelForCausalLM.from_pretrained(out_dir)

The layouts differ in three ways, all handled here:

- ``nn.Linear`` stores ``(out, in)``; GPT-2's ``Conv1D`` stores ``(in, out)``: the attention and MLP weights are
  transposed;
- GPT-2 always has biases: a model trained with ``bias=False`` gets zero biases (Linear and LayerNorm), the
  same function;
- our ``nn.GELU()`` is the exact (erf) GELU: ``activation_function="gelu"``, not GPT-2's ``gelu_new`` (tanh).

Only the GPT-2 shape exports: learned absolute positions, pre-LayerNorm, GELU. Any other variant is refused with the
field that rules it out (no ``transformers`` architecture computes the same function from these weights).

Special tokens: the tokenizer's roles by transformers' names. A missing role is mapped the way GPT-2 does it: the
end-of-text token stands for bos, eos and unk; pad reuses eos. ``eos_token_id`` of the model and its generation
config is the end-of-text id when the tokenizer has one (where our ``lm generate`` stops), so ``generate`` stops
where ours does. The summary's ``notes`` say what was mapped.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.tokenization.base import HF_FILE, TRANSFORMERS_FILE

ARCHITECTURE = "GPT2LMHeadModel"


class ExportRefused(ValueError):
    """The model (or its folder, or the target) cannot become a GPT-2 checkpoint; the message says why."""


def unsupported(cfg: GPTConfig) -> list[str]:
    """One line per config field that no ``GPT2LMHeadModel`` computes (empty: it exports)."""
    why = []
    if cfg.positional != "learned":
        why.append(f"positional: {cfg.positional} positions have no GPT-2 equivalent (GPT2LMHeadModel adds learned "
                   "absolute position embeddings only)")
    if cfg.norm != "pre":
        why.append(f"norm: {cfg.norm}-LayerNorm blocks have no GPT-2 equivalent (GPT2LMHeadModel normalises before "
                   "each sublayer, pre)")
    if cfg.activation != "gelu":
        why.append(f"activation: {cfg.activation} has no GPT-2 equivalent here (GPT2LMHeadModel's MLP is exported "
                   "with exact gelu)")
    return why


def gpt2_state_dict(cfg: GPTConfig, tensors: dict[str, Any]) -> dict[str, Any]:
    """Our saved tensors (``model.safetensors`` of a GPT) renamed and transposed to GPT-2's layout; zero biases
    where ours has none. The head is written only when it is not tied (tied: transformers ties it on load)."""
    import torch

    used: set[str] = set()

    def take(name: str):
        if name not in tensors:
            raise ExportRefused(f"model.safetensors: no tensor {name!r}; not a saved GPT of this config")
        used.add(name)
        return tensors[name]

    def bias(name: str, size: int, like):
        if cfg.bias:
            return take(name)
        return torch.zeros(size, dtype=like.dtype)

    C = cfg.n_embd
    wte = take("wte.weight")
    out: dict[str, Any] = {"transformer.wte.weight": wte, "transformer.wpe.weight": take("wpe.weight")}
    for i in range(cfg.n_layer):
        ours, theirs = f"blocks.{i}", f"transformer.h.{i}"
        for ln in ("ln_1", "ln_2"):
            w = take(f"{ours}.{ln}.weight")
            out[f"{theirs}.{ln}.weight"] = w
            out[f"{theirs}.{ln}.bias"] = bias(f"{ours}.{ln}.bias", C, w)
        for part, width in (("attn.c_attn", 3 * C), ("attn.c_proj", C), ("mlp.c_fc", 4 * C), ("mlp.c_proj", C)):
            w = take(f"{ours}.{part}.weight")
            out[f"{theirs}.{part}.weight"] = w.t()  # Linear (out, in) -> Conv1D (in, out)
            out[f"{theirs}.{part}.bias"] = bias(f"{ours}.{part}.bias", width, w)
    w = take("ln_f.weight")
    out["transformer.ln_f.weight"] = w
    out["transformer.ln_f.bias"] = bias("ln_f.bias", C, w)
    if not cfg.tie_weights:
        out["lm_head.weight"] = take("lm_head.weight")
    elif "lm_head.weight" in tensors:  # saved tied weights keep one name; a second copy must be the same tensor
        used.add("lm_head.weight")
        if not torch.equal(tensors["lm_head.weight"], wte):
            raise ExportRefused("tie_weights: true, but lm_head.weight differs from wte.weight in model.safetensors")
    left = sorted(set(tensors) - used)
    if left:
        raise ExportRefused(f"model.safetensors: tensors GPT-2 has no place for: {', '.join(left[:5])}"
                            f"{' ...' if len(left) > 5 else ''}")
    return {k: v.contiguous() for k, v in out.items()}


def special_tokens(tok) -> tuple[dict[str, str | None], list[str]]:
    """transformers' bos/eos/unk/pad tokens for ``tok`` (only tokens in its vocabulary: transformers would add any
    other one, with an id past the model's embedding) and notes on each role that was mapped, not given."""
    have = tok.role_tokens  # role -> token, only those in the vocabulary
    eot = have.get("eot")
    tokens: dict[str, str | None] = {}
    notes: list[str] = []
    for role in ("bos", "eos", "unk"):
        tokens[role] = have.get(role)
        if tokens[role] is None:
            tokens[role] = eot
            notes.append(f"{role}_token: the tokenizer has no {role} role; " +
                         (f"the end-of-text token {eot!r} stands for it (as in GPT-2)" if eot else
                          "left unset (no end-of-text token either)"))
    tokens["pad"] = have.get("pad") or tokens["eos"]
    if "pad" not in have:
        notes.append("pad_token: the tokenizer has no pad role; " +
                     (f"it reuses the eos token {tokens['eos']!r} (pad with attention_mask)" if tokens["eos"] else
                      "left unset"))
    return tokens, notes


def tokenizer_files(tok, tokenizer_dir: Path, out_dir: Path, tokens: dict[str, str | None]) -> list[str]:
    """Copy ``tokenizer.json`` and write ``tokenizer_config.json`` (hf_export.transformers_config with ``tokens``
    as bos/eos/unk/pad); the files written."""
    from corpusforge.models.tokenization.hf_export import transformers_config

    source = tokenizer_dir / HF_FILE
    if not source.is_file():
        raise ExportRefused(f"{tokenizer_dir}: the tokenizer has no {HF_FILE}, which transformers reads")
    shutil.copyfile(source, out_dir / HF_FILE)
    config = transformers_config(tok)
    for role, token in tokens.items():
        config.pop(f"{role}_token", None)
        if token is not None:
            config[f"{role}_token"] = token
    named = {t for t in tokens.values() if t}
    config["additional_special_tokens"] = [t for t in config.get("additional_special_tokens", []) if t not in named]
    # GPT2Model adds wte(token_type_ids) to its input when given them: a tokenizer must never hand them over
    config["model_input_names"] = ["input_ids", "attention_mask"]
    (out_dir / TRANSFORMERS_FILE).write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return [HF_FILE, TRANSFORMERS_FILE]


def _recorded_tokenizer(model_dir: Path, spec: dict[str, Any]) -> Path:
    """The tokenizer folder ``config.json`` records: store-relative (``tokenizer/<dir>``, against the store that
    holds ``model_dir``) or absolute. (The CLI resolves it with corpusforge.tasks.encoded and passes it in.)"""
    recorded = (spec.get("tokenizer") or {}).get("path")
    if recorded:
        path = Path(recorded)
        found = path if path.is_absolute() else model_dir.resolve().parent.parent / path
        if found.is_dir():
            return found
    raise ExportRefused(f"{model_dir}: its tokenizer ({recorded or 'none recorded in config.json'}) is missing; "
                        "pass tokenizer_dir")


def export_hf(model_dir: str | Path, out_dir: str | Path, tokenizer_dir: str | Path | None = None) -> dict[str, Any]:
    """Write the GPT saved in ``model_dir`` (zoo.save_model's folder) to ``out_dir`` (new or empty) as a
    ``GPT2LMHeadModel`` checkpoint with its tokenizer: config.json, model.safetensors, generation_config.json,
    tokenizer.json, tokenizer_config.json. ``tokenizer_dir``: the tokenizer folder (default: the one config.json
    records). Raises ExportRefused (a ValueError) naming the field of a variant GPT-2 cannot express.
    Returns a summary: id, family, path, files, architecture, tokens, notes."""
    from safetensors.torch import load_file, save_file
    from transformers import GenerationConfig, GPT2Config

    from corpusforge.models.tokenization import load_tokenizer

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ExportRefused(f"{out_dir}: exists and is not an empty folder; export writes a new (or empty) one")
    spec = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if spec.get("family") != "gpt":
        raise ExportRefused(f"family: {spec.get('family')!r} is not gpt; this exporter writes GPT models only")
    cfg = GPTConfig(**spec["model"])
    why = unsupported(cfg)
    if why:
        raise ExportRefused(f"cannot export to {ARCHITECTURE}: {'; '.join(why)}")
    tok_dir = Path(tokenizer_dir) if tokenizer_dir is not None else _recorded_tokenizer(model_dir, spec)
    tok = load_tokenizer(tok_dir)
    if tok.vocab_size > cfg.vocab_size:
        raise ExportRefused(f"vocab_size: the tokenizer has {tok.vocab_size} ids, the model only {cfg.vocab_size}")
    weights = gpt2_state_dict(cfg, load_file(str(model_dir / "model.safetensors")))
    dtype = weights["transformer.wte.weight"].dtype

    tokens, notes = special_tokens(tok)
    ids = {role: (tok.token_to_id(t) if t else None) for role, t in tokens.items()}
    eot_id = tok.role_ids.get("eot")
    stop_id = eot_id if eot_id is not None else ids["eos"]  # where our generate stops: the end-of-text token
    if stop_id != ids["eos"]:
        notes.append(f"eos_token_id: {stop_id} (the end-of-text token {tok.eot_token!r}, where our generation "
                     f"stops), not the tokenizer's eos token {tokens['eos']!r}")
    notes.append("activation_function: gelu (exact erf GELU, as trained), not GPT-2's gelu_new")
    if not cfg.bias:
        notes.append("bias: false; GPT-2 always has biases, written as zeros (the same function)")

    out_dir.mkdir(parents=True, exist_ok=True)
    hf_config = GPT2Config(
        vocab_size=cfg.vocab_size, n_positions=cfg.block_size, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
        n_head=cfg.n_head, n_inner=None, activation_function="gelu", resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout, layer_norm_epsilon=1e-5, initializer_range=0.02,
        scale_attn_weights=True, tie_word_embeddings=cfg.tie_weights, bos_token_id=ids["bos"],
        eos_token_id=stop_id, pad_token_id=ids["pad"], architectures=[ARCHITECTURE],
        dtype=str(dtype).removeprefix("torch."))
    hf_config.save_pretrained(out_dir)
    save_file(weights, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    GenerationConfig(bos_token_id=ids["bos"], eos_token_id=stop_id, pad_token_id=ids["pad"]).save_pretrained(out_dir)
    tokenizer_files(tok, tok_dir, out_dir, tokens)

    hf_vocab = json.loads((out_dir / HF_FILE).read_text(encoding="utf-8"))
    vocab = hf_vocab.get("model", {}).get("vocab") or {}
    added = [t["id"] for t in hf_vocab.get("added_tokens", [])]
    hf_ids = [len(vocab) - 1, *added] if isinstance(vocab, list) else [*vocab.values(), *added]  # unigram: a list
    if hf_ids and max(hf_ids) >= cfg.vocab_size:
        notes.append(f"tokenizer.json has ids up to {max(hf_ids)}, past the model's {cfg.vocab_size}: the helper "
                     "tokens of a classic-bpe export; text that yields them cannot be fed to the model")
    manifest = model_dir / "manifest.json"
    aid = json.loads(manifest.read_text(encoding="utf-8")).get("id") if manifest.is_file() else None
    return {"id": aid, "family": "gpt", "path": str(out_dir), "files": sorted(p.name for p in out_dir.iterdir()),
            "architecture": ARCHITECTURE,
            "tokens": {role: ({"token": t, "id": ids[role]} if t else None) for role, t in tokens.items()},
            "notes": notes}
