"""Reading post-trained models back: a model folder (config.json + model.safetensors: an lm, a fully fine-tuned
post_training artifact, a lora_merge) or an adapter folder (config.json with ``lora`` and ``base`` +
``adapter.safetensors``), whose base is loaded first (checked against its digests), the adapters added and
merged. Nothing is unpickled.

Answers: greedy continuations of prompts, stopped at the end id, compared with gold responses (``answer_accuracy``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_spec(model_dir: Path) -> dict[str, Any]:
    return json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))


def base_dir(adapter_dir: Path, spec: dict[str, Any]) -> Path:
    """The base model folder an adapter artifact names, checked against its recorded digests."""
    from corpusforge.storage.store import ArtifactStore, read_manifest, resolve_recorded

    base = resolve_recorded(spec["base"]["path"], Path(adapter_dir))
    if not Path(base).is_dir():
        raise ValueError(f"{adapter_dir}: its base model {spec['base'].get('id', '')[:12]} is not in the store "
                         f"({base})")
    manifest = read_manifest(Path(base))
    if manifest is not None:
        ArtifactStore(Path(base).parent.parent).check_intact(Path(base), manifest)
    return Path(base)


def is_adapter(model_dir: Path) -> bool:
    return "lora" in read_spec(model_dir) and (Path(model_dir) / "adapter.safetensors").is_file()


def load_plain(model_dir: Path, device: str = "cpu"):
    """(plain model, its config.json) of a model or adapter folder: adapters are added to their base and merged."""
    from corpusforge.models.zoo import load_model

    model_dir = Path(model_dir)
    spec = read_spec(model_dir)
    if "lora" not in spec:
        return load_model(model_dir, device=device), spec
    from safetensors.torch import load_file

    from corpusforge.models.lora import load_adapter, merge_lora

    base, _ = load_plain(base_dir(model_dir, spec), device=device)
    load_adapter(base, load_file(str(model_dir / "adapter.safetensors"), device=device), spec["lora"])
    return merge_lora(base).eval(), spec


def load_with_adapters(model_dir: Path, device: str = "cpu"):
    """An adapter folder as its base with the adapters attached (not merged): what `lm merge` folds."""
    from safetensors.torch import load_file

    from corpusforge.models.lora import load_adapter

    spec = read_spec(model_dir)
    base, _ = load_plain(base_dir(model_dir, spec), device=device)
    load_adapter(base, load_file(str(Path(model_dir) / "adapter.safetensors"), device=device), spec["lora"])
    return base.eval(), spec


def load_post_trained(model_dir: str | Path, device: str = "cpu", tokenizer_dir: str | Path | None = None):
    """(plain model, tokenizer, config.json) of a post_training or lora_merge artifact (or an lm)."""
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.tasks.encoded import model_tokenizer_dir

    model, spec = load_plain(Path(model_dir), device=device)
    tok = load_tokenizer(tokenizer_dir if tokenizer_dir is not None else model_tokenizer_dir(Path(model_dir)))
    return model, tok, spec


def load_artifact(model_dir: Path, manifest: dict[str, Any]):
    """``Artifact.load()``: ``(torch module, tokenizer)``; an adapter artifact comes merged into its base."""
    model, tok, _ = load_post_trained(model_dir)
    return model, tok


def answer(model, tokenizer, prompts: list[str], end: int, max_new_tokens: int) -> list[str]:
    """Each prompt's greedy continuation up to the end id (or max_new_tokens), decoded."""
    import torch

    from corpusforge.models.sampling import generate
    from corpusforge.models.zoo import family_of

    recurrent = family_of(model).recurrent
    out = []
    with torch.no_grad():
        for prompt in prompts:
            new = generate(model, tokenizer.encode(prompt) or [end], max_new_tokens, greedy=True, stop_id=end,
                           recurrent=recurrent)
            out.append(tokenizer.decode(new[:-1] if new and new[-1] == end else new))
    return out


def normalise(text: str) -> str:
    return " ".join(text.split()).lower()


def answer_accuracy(model, tokenizer, prompts: list[str], gold: list[str], end: int,
                    max_new_tokens: int) -> tuple[float, list[dict[str, str]]]:
    """The fraction of prompts whose greedy answer equals the gold response (whitespace and case folded), and
    the first answers for reading."""
    answers = answer(model, tokenizer, prompts, end, max_new_tokens)
    right = [normalise(a) == normalise(g) for a, g in zip(answers, gold)]
    rows = [{"prompt": p, "gold": g, "answer": a} for p, g, a in list(zip(prompts, gold, answers))[:20]]
    return (sum(right) / len(right) if right else 0.0), rows
