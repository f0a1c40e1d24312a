"""The lm stage's plots for the run report, drawn from a trained model (declared as the lm step's report_plots)."""

from __future__ import annotations

from pathlib import Path


PROMPT_TOKENS = 24  # the heatmap's prompt: enough tokens to read a pattern, few enough to read the labels
FALLBACK_PROMPT = "the"


def attention_plot(lm_dir: Path, out_dir: Path) -> Path | None:
    """The last layer's attention heatmap of a trained attention lm, drawn for the report on a prompt long enough
    to read (:func:`report_prompt`: a held-out document of its own data); None for a model without attention or when
    it cannot be drawn."""
    import json
    import logging

    try:
        from corpusforge.models.family import family

        spec = json.loads((Path(lm_dir) / "config.json").read_text(encoding="utf-8"))
        if not family(spec["family"]).can("attention_maps"):
            return None
        from corpusforge.tasks.lm.inference import inspect_lm

        block = int(spec["model"].get("block_size") or PROMPT_TOKENS)
        prompt = report_prompt(Path(lm_dir), min(PROMPT_TOKENS, block - 1 if family(spec["family"]).can("fill_mask")
                                                     else block))
        files = inspect_lm(lm_dir, prompt, out_dir, k=3, last_layer_only=True)["heatmaps"]
        return Path(files[-1]) if files else None
    except Exception as exc:  # noqa: BLE001 - the report goes on without this plot
        logging.getLogger("corpusforge").warning("no attention heatmap for the run report: %s", exc)
        return None


def report_prompt(lm_dir: Path, tokens: int = PROMPT_TOKENS) -> str:
    """The first ``tokens`` tokens of the first document of the lm's encoded data (its valid split, else test, else
    train) with at least that many, else of its longest, as text: what the model was trained to read. The encode
    artifact is the lm's input in the same store; without it (a copied lm), :data:`FALLBACK_PROMPT`."""
    import json

    import numpy as np

    from corpusforge.storage.store import ArtifactStore, read_manifest, resolve_recorded
    from corpusforge.tasks.lm.inference import load_tokenizer

    manifest = read_manifest(lm_dir) or {}
    encode = next((i for i in manifest.get("inputs") or [] if i.get("step") == "encode"), None)
    found = ArtifactStore(lm_dir.parents[1]).find_by_prefix(encode["id"]) if encode else []
    if not found:
        return FALLBACK_PROMPT
    encoded = found[0][0]
    meta = json.loads((encoded / "meta.json").read_text(encoding="utf-8"))
    eot = meta.get("eot_id")
    for split in ("valid", "test", "train"):
        path = encoded / f"{split}.bin"
        if not path.is_file() or not path.stat().st_size:
            continue
        ids = np.fromfile(path, dtype=meta["dtype"], count=64 * tokens).tolist()
        docs, doc = [], []
        for i in ids:
            if i == eot:
                docs.append(doc)
                doc = []
            else:
                doc.append(i)
        docs = [d for d in docs + [doc] if d]
        if docs:
            best = next((d for d in docs if len(d) >= tokens), max(docs, key=len))
            tok = load_tokenizer(resolve_recorded(meta["tokenizer_path"], encoded))
            return tok.decode(best[:tokens]) or FALLBACK_PROMPT
    return FALLBACK_PROMPT


def report_plots(lm_dir: Path, scratch: Path) -> list[tuple[str, Path]]:
    """(caption, png) for the run report: the attention heatmap of an attention lm."""
    heat = attention_plot(lm_dir, scratch)
    return [] if heat is None else [(f"Attention heatmap ({heat.stem.replace('_', ' ')}, one panel per head)", heat)]
