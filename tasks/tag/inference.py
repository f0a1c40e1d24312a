"""A trained tagger as something that tags: :class:`TextTagger` (what ``Artifact.load()`` returns for a tag
artifact, what the registered MLflow pyfunc wraps, and what ``corpusforge tag predict/evaluate`` call).

A trained model's folder holds ``config.json`` (family and model config, as corpusforge.models.zoo saves it, plus
``tag``: the tag field, whether its tags are entities), ``vocab.json`` (words, characters, tags) and
``model.safetensors``. Raw text is split into words as tagged corpora split them (tasks/tag/data.py:
``split_words``), each word cleaned as the training corpus cleaned its words (``input.clean``, per word, so nothing
splits or merges), then tagged; the output keeps the words as written, with their character offsets."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corpusforge.tasks.tag.data import Vocab, is_entity_tags, load_vocab, scheme_of, split_words


def predict_words(model, vocab: Vocab, sentences: Sequence[Sequence[str]], batch_size: int = 128) -> list[list[str]]:
    """The tags of each sentence (a list of words), batched by length; an empty sentence gets no tag. A sentence
    longer than the model reads at once (model.max_len words; a BERT's block of sub-words) is tagged in pieces, the
    next one starting at the first word the last did not read: never cut."""
    import torch

    from corpusforge.models.objectives import evaluating

    limit = model.cfg.max_len
    found: list[list[str]] = [[] for _ in sentences]
    pending = [(i, 0) for i, ws in enumerate(sentences) if len(ws)]
    device = next(model.parameters()).device
    with evaluating(model), torch.no_grad():
        while pending:
            pending.sort(key=lambda p: min(limit, len(sentences[p[0]]) - p[1]))
            after = []
            for start in range(0, len(pending), batch_size):
                chunk = pending[start:start + batch_size]
                inputs = model.collate([vocab.encode(sentences[i][s:s + limit]) for i, s in chunk])
                inputs = tuple(t.to(device) for t in inputs)
                for (i, s), row in zip(chunk, model.decode(model(*inputs), inputs[-1])):
                    row = row[: len(sentences[i]) - s]
                    found[i].extend(vocab.tags[t] for t in row)
                    if s + len(row) < len(sentences[i]):
                        after.append((i, s + max(1, len(row))))
            pending = after
    return found


class TextTagger:
    """A trained tagger and its vocabularies: ``tag(texts)`` gives each text's words, tags and entity spans."""

    def __init__(self, model, vocab: Vocab, spec: dict[str, Any]):
        self.model, self.vocab, self.spec = model, vocab, spec
        self.field = (spec.get("tag") or {}).get("tags", "tags")
        self.entities = is_entity_tags(vocab.tags)
        self._clean = _word_cleaner(spec)

    @property
    def tags(self) -> list[str]:
        return list(self.vocab.tags)

    def predict_words(self, sentences: Sequence[Sequence[str]], batch_size: int = 128) -> list[list[str]]:
        """Tags of pre-split sentences (lists of words), each word cleaned as the training words were."""
        return predict_words(self.model, self.vocab, [self._clean(list(ws)) for ws in sentences], batch_size)

    def tag(self, texts: str | Sequence[str], batch_size: int = 128) -> list[dict[str, Any]]:
        """Per text: ``{"text", "words", "tags", "offsets", "spans"}`` (spans: the entities, with their type and
        character offsets, when the tags are entity tags; else [])."""
        texts = [texts] if isinstance(texts, str) else [str(t) for t in texts]
        split = [split_words(t) for t in texts]
        tags = self.predict_words([w for w, _ in split], batch_size)
        return [self._result(text, words, offsets, t) for text, (words, offsets), t in zip(texts, split, tags)]

    def _result(self, text: str, words: list[str], offsets: list[list[int]], tags: list[str]) -> dict[str, Any]:
        from corpusforge.models.tag_eval import spans

        return {"text": text, "words": words, "tags": tags, "offsets": offsets,
                "spans": spans(words, tags, offsets, text) if self.entities else []}

    def evaluate(self, words: Sequence[Sequence[str]], gold: Sequence[Sequence[str]],
                 train: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] | None = None,
                 strict: bool | None = None) -> dict[str, Any]:
        """Scores on tagged sentences (:func:`score`)."""
        pred = self.predict_words(words)
        return score(words, gold, pred, self.vocab.tags, train=train,
                     strict=bool((self.spec.get("tag") or {}).get("strict")) if strict is None else strict)


def score(words, gold, pred, tags: Sequence[str], train=None, strict: bool = False) -> dict[str, Any]:
    """Token accuracy, the most-frequent-tag baseline (given the training split's words and tags), entity
    precision/recall/F1 per type (entity tags: seqeval), the confusion counts (other tags) and the most frequent
    errors: one split's ``evaluation.json`` entry."""
    from corpusforge.models import tag_eval

    out: dict[str, Any] = {"sentences": len(words), "words": sum(len(w) for w in words),
                           "accuracy": tag_eval.token_accuracy(gold, pred)}
    if train is not None:
        out["baseline_accuracy"] = tag_eval.token_accuracy(gold, tag_eval.most_frequent_tag(*train, words))
    if is_entity_tags(tags):
        scheme = scheme_of(tags)
        found = tag_eval.entity_scores(gold, pred, strict=strict, scheme=scheme)
        out.update(precision=found["precision"], recall=found["recall"], f1=found["f1"], entities=found["support"],
                   per_type=found["per_type"], scheme=scheme, strict=strict)
    else:
        names, counts = tag_eval.confusion(gold, pred, list(tags))
        out["confusion"] = {"tags": names, "counts": counts}
    out["frequent_errors"] = tag_eval.frequent_errors(words, gold, pred)
    return out


def _word_cleaner(spec: dict[str, Any]):
    """Each word cleaned as the training corpus cleaned its words (``input.clean``), one word at a time; a word the
    cleaning would empty keeps its form (a tag per word, whatever the cleaning does)."""
    clean = (spec.get("input") or {}).get("clean")
    if clean is None:
        return lambda words: words
    from corpusforge.tasks.config import from_dict
    from corpusforge.tasks.corpus.clean import CleanConfig, clean_texts

    cfg = from_dict(CleanConfig, dict(clean), "input.clean")
    if not cfg.effective_ops:
        return lambda words: words

    def run(words: list[str]) -> list[str]:
        cleaned = clean_texts(words, cfg) if words else []
        return [c if c and not any(ch.isspace() for ch in c) else w for w, c in zip(words, cleaned)]
    return run


def load_tagger(model_dir: str | Path, tokenizer_dir: str | Path | None = None, device: str = "cpu") -> TextTagger:
    """The tagger saved in ``model_dir`` (config.json, vocab.json, model.safetensors; nothing unpickled), with the
    tokenizer its config.json records when it reads sub-words (``tokenizer_dir`` when given: a registered model
    carries its own copy)."""
    from corpusforge.models.zoo import load_model

    model_dir = Path(model_dir)
    spec = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    vocab = load_vocab(model_dir, Path(tokenizer_dir) if tokenizer_dir else None)
    return TextTagger(load_model(model_dir, device=device), vocab, spec)


def load_artifact(artifact_dir: Path, manifest: dict[str, Any]) -> TextTagger:
    """``Artifact.load()`` of a tag artifact (declared as the tag step's loader)."""
    return load_tagger(artifact_dir)


def highlights(model_dir: Path) -> list[str]:
    """What the run's summary shows under the stage: each scored split's accuracy (and entity F1) beside the
    most-frequent-tag baseline."""
    data = json.loads((Path(model_dir) / "evaluation.json").read_text(encoding="utf-8"))
    lines = []
    for split, s in data["splits"].items():
        line = f"{split} ({s['sentences']} sentences, {s['words']} words): accuracy {s['accuracy']:.4f}"
        if "baseline_accuracy" in s:
            line += f" (most frequent tag {s['baseline_accuracy']:.4f})"
        if "f1" in s:
            line += f", entity F1 {s['f1']:.4f} (P {s['precision']:.4f}, R {s['recall']:.4f}, {s['entities']} entities)"
        lines.append(line)
    example = data.get("example")
    if example:
        lines.append("tagged: " + " ".join(f"{w}/{t}" for w, t in zip(example["words"], example["tags"])))
    return lines
