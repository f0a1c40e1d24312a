"""Perplexity of a trained language model on new text files (``corpusforge lm evaluate``, ``cf.lm.evaluate``).

A file is read and scored the way the lm stage reads and scores its own valid/test split, so that evaluating the
file that was held out gives the figure the lm reported for it:

- documents: the file is read with the reader mode (one document per line, per paragraph or per file) and the
  clean preset of the corpus the model was trained on, found in its lineage (model -> encode -> corpus ->
  corpus_shard); without one (or with ``documents`` given), one document per line and the text unaltered;
- tokens: each document encoded with the model's own tokenizer, followed by its end-of-text id when the tokenizer
  has one, as the encode step writes the token stream (with its ``add_special_tokens``);
- scoring: the objective of the model's family over that stream (corpusforge.models.objectives): consecutive
  non-overlapping windows of the model's block size for a GPT or an NPLM (a trailing part shorter than a window is
  not scored), contiguous streams with the state carried for a recurrent model, the fixed masking of evaluation for
  a masked LM; a text shorter than one window is scored as one window of its length.

Per file: ``documents``, ``tokens`` (the predictions scored), ``nll`` (their mean negative log-likelihood in nats,
the lm stage's loss) and ``perplexity`` (exp(nll), its ppl).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DOCUMENT_MODES = ("line", "paragraph", "file")


def text_settings(catalog, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """How the model's training text was read and encoded, from its lineage: ``txt_mode``, ``clean`` (the corpus's
    clean config, or None) and ``add_special_tokens``. A post-trained model's settings are its base lm's."""
    import json

    lm = catalog.nearest(manifest, "lm") if manifest.get("step") != "lm" else manifest
    settings: dict[str, Any] = {"txt_mode": "line", "reader": None, "clean": None, "add_special_tokens": False}
    if lm is None:
        return settings
    encode = catalog.nearest(lm, "encode")
    if encode is None:
        return settings
    meta = catalog.get(encode["id"]).path / "meta.json"
    if meta.is_file():
        settings["add_special_tokens"] = bool(json.loads(meta.read_text(encoding="utf-8")).get("add_special_tokens"))
    shard = catalog.nearest(encode, "corpus_shard")
    if shard is not None:
        config = shard.get("config") or {}
        settings["reader"] = config.get("reader")
        settings["txt_mode"] = (config.get("reader") or {}).get("txt_mode", "line")
        settings["clean"] = config.get("clean")
    return settings


def read_documents(path: str | Path, txt_mode: str = "line", clean: Mapping[str, Any] | None = None,
                   reader: Mapping[str, Any] | None = None) -> list[str]:
    """The documents of a text file as the corpus stage reads them (storage/readers.py with the corpus's ``reader``
    config, ``txt_mode`` and ``clean`` preset), empty ones dropped. A name without a known suffix is plain text."""
    from corpusforge.storage.readers import ReaderConfig, SourceFile, read_records
    from corpusforge.tasks.config import from_dict

    if txt_mode not in DOCUMENT_MODES:
        raise ValueError(f"documents: use one of {', '.join(DOCUMENT_MODES)}, not {txt_mode!r}")
    path = Path(path)
    cfg = from_dict(ReaderConfig, dict(reader), "reader") if reader else ReaderConfig()
    records = list(read_records(SourceFile(path.name, path), cfg, txt_mode=txt_mode))
    bad = next((r for r in records if not r.ok), None)
    if bad is not None:
        raise ValueError(f"{path}: {bad.locator}: {bad.reason} {bad.detail}".strip())
    texts = [r.text or "" for r in records]
    if clean:
        from corpusforge.tasks.corpus.clean import CleanConfig, clean_texts

        texts = [t or "" for t in clean_texts(texts, from_dict(CleanConfig, dict(clean), "clean"))]
    return [t for t in texts if t.strip()]


def encode_documents(tok, documents: list[str], add_special_tokens: bool = False):
    """The token stream the encode step would write for these documents (each followed by the eot id)."""
    from corpusforge.models.tokenization.base import document_stream

    return document_stream(tok, documents, tok.eot_id, add_special_tokens)


def score_stream(model, spec: Mapping[str, Any], ids, batch_size: int | None = None,
                 device: str = "cpu") -> dict[str, Any]:
    """{"tokens", "nll", "perplexity"} of a token stream under ``model``, with its family's objective."""
    from corpusforge.models.family import family
    from corpusforge.models.objectives import KINDS, TokenStream, TruncatedBPTT, build, default_settings, recorded

    traits = family(str(spec.get("family")))
    if len(ids) < 3:
        raise ValueError(f"the text encodes to {len(ids)} token(s); at least 3 are needed to score it")
    settings = recorded(traits, spec)  # what it was trained with (a post-trained model: its family's stream loss)
    if settings.kind in KINDS and KINDS[settings.kind].reads != "tokens":
        settings = default_settings(traits)
    objective = build(settings, model.cfg, {"train": ids})
    if not isinstance(objective, TokenStream):
        raise ValueError(f"a {traits.name} model is not scored on a token stream ({type(objective).__name__}); "
                         "lm evaluate scores causal LMs (gpt, nplm, rnn) and masked LMs (encoder)")
    # a text shorter than one window (a recurrent model: than one stream of > block tokens) is one window
    objective.block = min(objective.block, len(ids) - (2 if isinstance(objective, TruncatedBPTT) else 1))
    size = int(batch_size or (spec.get("train") or {}).get("batch_size") or 32)
    model = model.to(device)
    metrics = objective.evaluate(model, "train", size, 0, device)
    return {"tokens": int(objective.scored_tokens), "nll": float(metrics["loss"]),
            "perplexity": float(math.exp(metrics["loss"])) if metrics["loss"] < 700 else float("inf")}


def evaluate_files(model, tok, spec: Mapping[str, Any], files: Mapping[str, str | Path],
                   settings: Mapping[str, Any] | None = None, batch_size: int | None = None,
                   device: str = "cpu") -> dict[str, dict[str, Any]]:
    """{key: {"documents", "tokens", "nll", "perplexity"}} for each file of ``files`` ({key: path}); ``settings``
    as :func:`text_settings` gives them (default: a document per line, unaltered, no special tokens)."""
    settings = dict(settings or {})
    results = {}
    for key, path in files.items():
        docs = read_documents(path, settings.get("txt_mode", "line"), settings.get("clean"), settings.get("reader"))
        ids = encode_documents(tok, docs, bool(settings.get("add_special_tokens")))
        try:
            scored = score_stream(model, spec, ids, batch_size, device)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
        results[key] = {"documents": len(docs), **scored}
    return results
