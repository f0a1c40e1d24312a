"""A model reads new text as its training text was read (issue 44, item 5). Every model a stage trains on a corpus
records the corpus's clean config in its config.json as ``input.clean`` (:func:`record_training_text`, from the
encode artifact's lineage), and the loaders give it a tokenizer that cleans each text it encodes that way first
(:func:`reading_as_trained`): predict, evaluate, generate, translate, embed, the API, the registered MLflow model
and ``mlflow models serve`` all read text through it. So a classifier trained on SST-2's lowercased, treebank-split
text (``it 's a charming journey .``) reads ``It's a charming journey.`` as that text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from corpusforge.storage.store import read_manifest


def training_text(encoded_dir: Path) -> dict[str, Any]:
    """How the text a model trains on was cleaned, from the encode artifact's lineage: ``{"clean": the corpus
    shard's clean config}`` (what a model's config.json keeps as ``input``), or {} when the lineage does not say
    (the encode artifact or its shard is not in the store)."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    encoded_dir = Path(encoded_dir).resolve()
    manifest = read_manifest(encoded_dir)
    if not manifest:
        return {}
    shard = Catalog(ArtifactStore(encoded_dir.parent.parent)).nearest(manifest, "corpus_shard")
    clean = ((shard or {}).get("config") or {}).get("clean")
    return {"clean": clean} if clean is not None else {}


def record_training_text(spec_json: dict[str, Any], encoded_dir: Path) -> None:
    """Keep :func:`training_text` in a model's config.json (``spec_json``) as ``input``, when the lineage says."""
    found = training_text(encoded_dir)
    if found:
        spec_json["input"] = found


def reading_as_trained(tokenizer, spec: Mapping[str, Any]):
    """``tokenizer``, cleaning what it encodes with the clean config ``spec`` (a model's config.json) records as
    ``input.clean``; the tokenizer itself when none is recorded or its ops change nothing (preset raw)."""
    clean = (spec.get("input") or {}).get("clean")
    if clean is None:
        return tokenizer
    from corpusforge.tasks.config import from_dict
    from corpusforge.tasks.corpus.clean import CleanConfig

    cfg = from_dict(CleanConfig, dict(clean), "input.clean")
    return CleaningTokenizer(tokenizer, cfg) if cfg.effective_ops else tokenizer


class CleaningTokenizer:
    """A model's tokenizer that first cleans each text as the corpus stage cleaned the model's training text (the
    same polars ops, tasks/corpus/clean.py), so that ``It's great!`` reaches a model trained on SST-2 as
    ``it 's great !``. A text's trailing whitespace is kept: a prompt is the start of a document, and the cleaner
    strips the end of a whole one. Everything else is the tokenizer's own (``decode``, the vocabulary, ids)."""

    def __init__(self, tokenizer, clean) -> None:
        self.tokenizer, self.clean_config = tokenizer, clean

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizer, name)

    def clean(self, texts: Sequence[str]) -> list[str]:
        from corpusforge.tasks.corpus.clean import clean_texts

        texts = [str(t) for t in texts]
        out = []
        for raw, cleaned in zip(texts, clean_texts(list(texts), self.clean_config)):
            cleaned = cleaned or ""
            tail = raw[len(raw.rstrip()):]
            if tail and not cleaned[-1:].isspace():
                cleaned += "\n" if ("\n" in tail or "\r" in tail) else " "
            out.append(cleaned)
        return out

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        return self.tokenizer.encode(self.clean([text])[0], *args, **kwargs)

    def encode_batch(self, texts: Sequence[str], *args: Any, **kwargs: Any) -> list[list[int]]:
        return self.tokenizer.encode_batch(self.clean(texts), *args, **kwargs)

    def encode_pair(self, a: str, b: str, *args: Any, **kwargs: Any):
        return self.tokenizer.encode_pair(*self.clean([a, b]), *args, **kwargs)

    def tokenize(self, text: str) -> list[str]:
        return self.tokenizer.tokenize(self.clean([text])[0])


def as_loaded(tokenizer):
    """The tokenizer itself, without the cleaning :func:`reading_as_trained` put in front of it (for text that was
    cleaned already, as ``lm evaluate`` reads its files)."""
    return tokenizer.tokenizer if isinstance(tokenizer, CleaningTokenizer) else tokenizer
