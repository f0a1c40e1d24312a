"""A trained encoder-decoder as something that translates: :class:`Translator` (what ``Artifact.load()`` returns for
a seq2seq artifact, what the registered MLflow pyfunc wraps, and what ``corpusforge seq2seq translate/evaluate``
and the evaluation step call), plus the scores (sacreBLEU's BLEU and chrF, with their signatures).

A trained model's folder holds ``config.json`` (family and model config, as corpusforge.models.zoo saves it, plus
``tokenizer`` and ``translation``: the directions it learned, each with its task prefix) and ``model.safetensors``.
Sources are encoded as the training data was (the tokenizer's ids, no bos/eos; a direction's prefix ids before them)
and decoded with corpusforge.models.decoding (greedy when beam is 1, else beam search)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# what decoding does unless asked otherwise (tasks.seq2seq.config.DecodeConfig has the same defaults)
DEFAULT_BEAM, DEFAULT_LENGTH_PENALTY, DEFAULT_MAX_LEN, DEFAULT_BATCH = 5, 0.6, 128, 64


@dataclass(frozen=True)
class Direction:
    """One direction a model learned: from one field to another, with the task prefix its sources carry."""

    source: str
    target: str
    prefix: str
    prefix_ids: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"{self.source}-{self.target}"


class Translator:
    """A trained encoder-decoder and its tokenizer: ``translate(texts)`` gives one translation per text."""

    def __init__(self, model, tokenizer, spec: dict[str, Any]):
        self.model, self.tokenizer, self.spec = model, tokenizer, spec
        translation = spec.get("translation") or {}
        self.directions = [Direction(d["source"], d["target"], d.get("prefix", ""), tuple(d.get("prefix_ids") or ()))
                           for d in translation.get("directions") or [{"source": "src", "target": "tgt"}]]
        cfg = model.cfg
        self.pad_id, self.bos_id, self.eos_id = int(cfg.pad_id), int(cfg.bos_id), int(cfg.eos_id)
        self.model_max_len = getattr(cfg, "max_len", None)
        self.task = translation.get("task", "translate")
        # the source as training cut it: the stage's max_source_len (a summarizer's), at most the model's max_len
        given = translation.get("max_source_len")
        self.source_max_len = min(x for x in (given, self.model_max_len) if x) if (given or self.model_max_len) else None

    # --- directions ---------------------------------------------------------------------------------------------

    def direction(self, name: str | None = None) -> Direction:
        """A learned direction by name: None/"" (the first, the headline one), "forward"/"backward", or
        "<from>-<to>" with the corpus's field names (``src-tgt``, ``de-en``)."""
        if not name:
            return self.directions[0]
        for d in self.directions:
            if name == d.key:
                return d
        first = self.directions[0]
        wanted = {"forward": (first.source, first.target), "backward": (first.target, first.source)}.get(name)
        found = next((d for d in self.directions if (d.source, d.target) == wanted), None)
        if found is None:
            raise ValueError(f"direction {name!r}: this model translates {', '.join(d.key for d in self.directions)}")
        return found

    # --- translating --------------------------------------------------------------------------------------------

    def encode(self, texts: Sequence[str], direction: Direction) -> list[list[int]]:
        """Source ids as the model saw them in training: the prefix's ids, then the text's (no bos/eos)."""
        return [list(direction.prefix_ids) + list(ids) for ids in self.tokenizer.encode_batch([str(t) for t in texts])]

    def translate_ids(self, sources: Sequence[Sequence[int]], beam: int = DEFAULT_BEAM,
                      length_penalty: float = DEFAULT_LENGTH_PENALTY, max_len: int = DEFAULT_MAX_LEN,
                      batch_size: int = DEFAULT_BATCH, return_attention: bool = False, min_len: int = 0,
                      no_repeat_ngram_size: int = 0):
        """Target ids (no bos/eos) for each source id list, in order; batches of similar length are decoded together.
        With ``return_attention``: ``(ids, attentions)``, per sentence a (steps, heads, T_src) tensor, one row per
        returned token plus the eos's when it ended (corpusforge.models.decoding), or None. ``min_len`` and
        ``no_repeat_ngram_size``: corpusforge.models.decoding's options (0: off)."""
        import torch

        from corpusforge.models.batching import pad
        from corpusforge.models.decoding import beam_search, greedy

        if beam < 1 or max_len < 1 or batch_size < 1:
            raise ValueError("beam, max_len and batch size: must be >= 1")
        cap = min(max_len, self.model_max_len) if self.model_max_len else max_len
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        out: list[list[int] | None] = [None] * len(sources)
        maps: list[Any] = [None] * len(sources)
        device = next(self.model.parameters()).device
        self.model.eval()
        with torch.no_grad():
            for start in range(0, len(order), batch_size):
                chunk = order[start: start + batch_size]
                # the source as the objective builds it in training (corpusforge.models.objectives.Seq2Seq.collate):
                # the ids as they are, padded, cut to the model's max_len (the stage's max_source_len)
                src, mask = pad([list(sources[i]) for i in chunk], self.pad_id, self.source_max_len)
                src, mask = src.to(device), mask.to(device)
                if beam == 1:
                    found = greedy(self.model, src, mask, self.bos_id, self.eos_id, cap,
                                   return_attention=return_attention, min_len=min_len,
                                   no_repeat_ngram_size=no_repeat_ngram_size)
                else:
                    found = beam_search(self.model, src, mask, self.bos_id, self.eos_id, beam, cap, length_penalty,
                                        return_attention=return_attention, min_len=min_len,
                                        no_repeat_ngram_size=no_repeat_ngram_size)
                ids, attention = found if return_attention else (found, [None] * len(chunk))
                for i, hyp, att in zip(chunk, ids, attention):
                    out[i], maps[i] = [int(t) for t in hyp], att
        return (out, maps) if return_attention else out

    def summarize(self, texts: str | Sequence[str], **decode: Any) -> list[str]:
        """One summary per document (a summarization model's :meth:`translate`: the same decoding, read as what
        it does). A document's sentences may be given as a list of strings; they are read one per line, as the
        stage read them (reader.join_lists: "\\n")."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        docs = ["\n".join(s.strip() for s in t if str(s).strip()) if isinstance(t, (list, tuple)) else t for t in texts]
        return self.translate(docs, **decode)

    def translate(self, texts: str | Sequence[str], beam: int = DEFAULT_BEAM,
                  length_penalty: float = DEFAULT_LENGTH_PENALTY, max_len: int = DEFAULT_MAX_LEN,
                  direction: str | None = None, batch_size: int = DEFAULT_BATCH, min_len: int = 0,
                  no_repeat_ngram_size: int = 0) -> list[str]:
        """One detokenized translation per text (a single string gives a list of one)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            return []
        d = self.direction(direction)
        ids = self.translate_ids(self.encode(texts, d), beam, length_penalty, max_len, batch_size,
                                 min_len=min_len, no_repeat_ngram_size=no_repeat_ngram_size)
        return [self.tokenizer.decode(x) for x in ids]

    def alignment(self, text: str, beam: int = 1, direction: str | None = None, max_len: int = DEFAULT_MAX_LEN,
                  length_penalty: float = DEFAULT_LENGTH_PENALTY, min_len: int = 0, no_repeat_ngram_size: int = 0):
        """(source tokens, output tokens, attention (heads, T_out, T_src), the translation) of one sentence, decoded
        once (``beam`` 1: greedy): what the alignment heatmap draws, and the text ``translate`` gives for the same
        settings. The source tokens include the prefix's (cut to the model's max_len, as the model read them); the
        output tokens end with the eos when the translation ended with one."""
        d = self.direction(direction)
        source = self.encode([text], d)[0][: self.source_max_len]
        ids, maps = self.translate_ids([source], beam, length_penalty, max_len, 1, return_attention=True,
                                       min_len=min_len, no_repeat_ngram_size=no_repeat_ngram_size)
        if maps[0] is None:
            raise ValueError(f"a {self.spec.get('family')} model gives no attention map")
        attention = maps[0].permute(1, 0, 2)  # (heads, steps, T_src)
        output = [self.tokenizer.id_to_token(i) for i in ids[0]]
        if attention.shape[1] == len(output) + 1:  # the step that emitted the eos
            output.append(self.tokenizer.id_to_token(self.eos_id))
        return [self.tokenizer.id_to_token(i) for i in source], output, attention, self.tokenizer.decode(ids[0])


class Extractor:
    """A trained extractive summarizer (family extractive) and its tokenizer: ``summarize(documents)`` gives each
    document's best-scored sentences, in document order, joined by a space. A document is a list of sentences, or a
    text whose lines are its sentences (as the stage read them: reader.join_lists). ``translate`` is the same call
    with a translator's keywords (beam, length penalty... mean nothing here and are ignored), so the CLI and the
    registered pyfunc treat every seq2seq model alike."""

    task = "extract"

    def __init__(self, model, tokenizer, spec: dict[str, Any]):
        self.model, self.tokenizer, self.spec = model, tokenizer, spec
        translation = spec.get("translation") or {}
        self.directions = [Direction(translation.get("source", "src"), translation.get("target", "tgt"), "", ())]
        self.source_max_len = None

    def direction(self, name: str | None = None) -> Direction:
        if name and name not in ("forward", self.directions[0].key):
            raise ValueError(f"direction {name!r}: this model summarizes {self.directions[0].key}")
        return self.directions[0]

    def scores(self, documents: Sequence[Sequence[str]], batch_size: int = DEFAULT_BATCH) -> list[list[float]]:
        """Each sentence's score (a logit: higher is more summary-like), per document."""
        import torch

        from corpusforge.models.objectives.extractive import pad_documents

        cfg = self.model.cfg
        out: list[list[float]] = []
        device = next(self.model.parameters()).device
        self.model.eval()
        with torch.no_grad():
            for start in range(0, len(documents), batch_size):
                chunk = [list(d) for d in documents[start: start + batch_size]]
                ids = [[list(x) for x in self.tokenizer.encode_batch([str(s) for s in d])] if d else [] for d in chunk]
                batch = pad_documents([d or [[]] for d in ids], int(cfg.pad_id), cfg.max_sentences, cfg.max_len)
                logits = self.model(*(t.to(device) for t in batch)).float().cpu()
                for d, row in zip(chunk, logits):
                    out.append([float(x) for x in row[: min(len(d), cfg.max_sentences)]])
        return out

    def summarize(self, texts: str | Sequence[Any], sentences: int = 1, max_words: int = 0,
                  batch_size: int = DEFAULT_BATCH, **_: Any) -> list[str]:
        """The ``sentences`` best-scored sentences of each document, in document order; with ``max_words``, a
        sentence that would pass the budget is skipped for the next best (the first chosen is always kept)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        documents = [[str(s).strip() for s in t if str(s).strip()] if isinstance(t, (list, tuple))
                     else [line.strip() for line in str(t).split("\n") if line.strip()] for t in texts]
        summaries = []
        for doc, scores in zip(documents, self.scores(documents, batch_size)):
            chosen, words = [], 0
            for i in sorted(range(len(scores)), key=lambda i: (-scores[i], i)):
                n = len(doc[i].split())
                if chosen and max_words and words + n > max_words:
                    continue
                chosen.append(i)
                words += n
                if len(chosen) == sentences:
                    break
            summaries.append(" ".join(doc[i] for i in sorted(chosen)))
        return summaries

    def translate(self, texts: str | Sequence[Any], direction: str | None = None, **decode: Any) -> list[str]:
        self.direction(direction)
        return self.summarize(texts, **decode)

    def alignment(self, *args: Any, **kwargs: Any):
        raise ValueError("an extractive summarizer chooses sentences: it has no attention map to draw")


def load_translator(model_dir: str | Path, tokenizer_dir: str | Path | None = None,
                    device: str = "cpu") -> Translator | Extractor:
    """The model saved in ``model_dir`` with its tokenizer (the one its config.json records, store-relative, unless
    ``tokenizer_dir`` is given: the registered MLflow model carries its own copy): a :class:`Translator`, or an
    :class:`Extractor` for a family that extracts sentences."""
    from corpusforge.models.family import family
    from corpusforge.tasks.corpus.reading import reading_as_trained
    from corpusforge.tasks.encoded import load_with_tokenizer

    model, tokenizer, spec = load_with_tokenizer(model_dir, tokenizer_dir, device, reading=reading_as_trained)
    return (Extractor if family(spec["family"]).can("extract") else Translator)(model, tokenizer, spec)


def load_artifact(artifact_dir: Path, manifest: dict[str, Any]) -> Translator:
    """``Artifact.load()`` of a seq2seq artifact (declared as the seq2seq step's loader)."""
    return load_translator(artifact_dir)


# --- scores ---------------------------------------------------------------------------------------------------------

def score(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """sacreBLEU on detokenized text, one reference per sentence: ``bleu`` (its default: 13a tokenization, cased),
    ``chrf`` (chrF2, character 6-grams) and ``bleu_tok_lc``, the figure the PyTorch seq2seq tutorials report (BLEU
    on lowercased tokens; sacreBLEU's 13a tokenizer stands in for their spaCy tokens), each with its signature."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} translations for {len(references)} references")
    hyps, refs = [str(h) for h in hypotheses], [[str(r) for r in references]]
    out: dict[str, Any] = {}
    for key, metric in (("bleu", BLEU()), ("chrf", CHRF()), ("bleu_tok_lc", BLEU(lowercase=True, tokenize="13a"))):
        result = metric.corpus_score(hyps, refs)
        out[key] = float(result.score)
        out[f"{key}_signature"] = str(metric.get_signature())
    out["sentences"] = len(hyps)
    return out
