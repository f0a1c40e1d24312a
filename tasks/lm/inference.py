"""Reading a trained ``lm`` artifact back: generate text, and inspect what the model does with a prompt.

Inspection draws what the teaching texts draw: one attention heatmap per layer, one panel per head
(rows: the query token, columns: the key token it attends to; the causal mask leaves the upper triangle
empty), and a table of the k most probable next tokens. Only families with the ``attention_maps`` capability have
heatmaps. For one that can ``fill_mask`` (an encoder) the matrices are full, and the table says what fills the
tokenizer's mask token appended to the prompt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corpusforge.tasks.textgen import generate_text, render_ids  # noqa: F401 - this module's API too


def load_tokenizer(path: str | Path):
    from corpusforge.models.tokenization import load_tokenizer as load

    return load(path)


def load_trained(lm_dir: str | Path, device: str = "cpu", tokenizer_dir: str | Path | None = None):
    """(model, tokenizer, spec) from an lm artifact directory. The tokenizer is the one recorded in
    config.json unless ``tokenizer_dir`` points at a copy (e.g. inside an MLflow model's artifacts); it cleans a prompt
    as the training text was cleaned (tasks/encoded.py reading_as_trained)."""
    from corpusforge.models.zoo import load_model

    lm_dir = Path(lm_dir)
    spec = json.loads((lm_dir / "config.json").read_text(encoding="utf-8"))
    from corpusforge.storage.store import resolve_recorded

    recorded = (spec.get("tokenizer") or {}).get("path")
    tok_path = str(tokenizer_dir) if tokenizer_dir else (str(resolve_recorded(recorded, lm_dir)) if recorded else None)
    if not tok_path or not Path(tok_path).exists():
        raise ValueError(f"{lm_dir}: its tokenizer ({tok_path}) is not in this store any more")
    from corpusforge.tasks.corpus.reading import reading_as_trained

    return load_model(lm_dir, device=device), reading_as_trained(load_tokenizer(tok_path), spec), spec


def load_artifact(lm_dir: Path, manifest: dict[str, Any]):
    """``Artifact.load()`` of an lm: ``(torch module, tokenizer)``, the tokenizer recorded in its config.json."""
    model, tok, _spec = load_trained(lm_dir)
    return model, tok


def generate_from(lm_dir: str | Path, prompt: str, max_new_tokens: int = 200, tokenizer_dir: str | Path | None = None,
                  **sampling: Any) -> str:

    model, tok, spec = load_trained(lm_dir, tokenizer_dir=tokenizer_dir)
    return generate_text(model, tok, prompt, max_new_tokens, eot_id=spec["tokenizer"].get("eot_id"), **sampling)


def _token_text(tok, token_id: int) -> str:
    """What a token looks like: its decoded text, or its name for specials that decode to nothing."""
    text = tok.decode([token_id])
    if not text:
        try:
            text = tok.id_to_token(token_id) or ""
        except Exception:  # noqa: BLE001 - a display nicety
            text = ""
    return text


def _label(tok, token_id: int) -> str:
    text = _token_text(tok, token_id)
    return {"\n": "\\n", " ": "␣", "\t": "\\t"}.get(text, text) or f"#{token_id}"


def inspect_lm(lm_dir: str | Path, prompt: str, out_dir: str | Path, k: int = 10,
               last_layer_only: bool = False) -> dict[str, Any]:
    """Write ``attention_layer<L>.png`` per layer (the last alone with ``last_layer_only``: the run report's one
    picture, without drawing the others) into out_dir; return the tokens, the top-k table, the files."""
    import torch

    from corpusforge.models.family import family
    from corpusforge.models.sampling import next_token_table

    model, tok, spec = load_trained(lm_dir)
    traits = family(spec["family"])
    ids = tok.encode(prompt)
    if not ids:
        raise ValueError("prompt: encodes to no tokens")
    ids = ids[-model.cfg.block_size:]
    labels = [_label(tok, i) for i in ids]
    if traits.can("fill_mask"):  # what fills the tokenizer's mask token appended to the prompt
        ids = ids[-(model.cfg.block_size - 1):] + [model.cfg.mask_id]
        labels = labels[-(model.cfg.block_size - 1):] + [_token_text(tok, model.cfg.mask_id) or "[MASK]"]
    ranked = next_token_table(model, ids, k + 1, recurrent=traits.recurrent)
    if traits.can("fill_mask"):  # what fills the mask: never the mask token itself
        ranked = [(i, p) for i, p in ranked if i != model.cfg.mask_id]
    table = [{"rank": r + 1, "id": i, "token": _token_text(tok, i), "prob": p} for r, (i, p) in enumerate(ranked[:k])]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    if traits.can("attention_maps"):
        with torch.no_grad():
            _, maps = model(torch.tensor([ids]), return_attention=True)
        for layer, weights in enumerate(maps):
            if last_layer_only and layer != len(maps) - 1:
                continue
            path = out_dir / f"attention_layer{layer}.png"
            plot_heads(weights[0].float().numpy(), labels, path, f"layer {layer}")
            files.append(str(path))
    return {"tokens": labels, "next_tokens": table, "heatmaps": files, "family": spec["family"],
            "fills_mask": traits.can("fill_mask")}


def plot_heads(weights, labels: list[str], path: Path, title: str) -> None:
    """weights (n_head, T, T) -> one PNG, a heatmap per head."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_head, T, _ = weights.shape
    cols = min(n_head, 4)
    rows = math.ceil(n_head / cols)
    size = max(2.5, 0.28 * T)
    fig, axes = plt.subplots(rows, cols, figsize=(size * cols, size * rows), squeeze=False, dpi=90)
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= n_head:
            ax.axis("off")
            continue
        ax.imshow(weights[h], cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xticks(range(T), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(T), labels, fontsize=7)
    fig.suptitle(f"{title}: row = query token, column = key token attended to")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
