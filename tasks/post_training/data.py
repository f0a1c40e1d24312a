"""The post_training step's data: the corpus's records read through the method's templates and encoded with the
start model's tokenizer.

- full / lora: each record's text field, encoded and joined with the end-of-text id into one token stream per split
  (what the lm stage trains on);
- sft: (prompt ids, response ids + end) per record: the prompt and response templates filled from the record;
- dpo: (prompt ids, chosen ids + end, rejected ids + end) per record.

Which of these a method reads is the method's (corpusforge.tasks.post_training.methods).

A record a template cannot fill (a missing field) is skipped and counted, never dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpusforge.tasks.post_training.templates import render

PostTrainingConfig = Any  # annotations only: the config imports the methods, which read records through this module

SPLITS = ("train", "valid", "test")


@dataclass
class Records:
    """One split's examples: ids for training and the texts they came from (answers are scored on the texts)."""

    ids: list[tuple[list[int], ...]] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)
    skipped: int = 0


def read_corpus(corpus_dir: Path, fields: list[str]) -> dict[str, list[dict[str, Any]] | None]:
    """Each split's records (the named fields only), None for a split the corpus lacks. A ValueError naming the
    fields the corpus has when one is missing."""
    import polars as pl

    out: dict[str, list[dict[str, Any]] | None] = {}
    for split in SPLITS:
        path = Path(corpus_dir) / f"{split}.parquet"
        if not path.is_file():
            out[split] = None
            continue
        columns = pl.read_parquet_schema(path)
        missing = [f for f in fields if f not in columns]
        if missing:
            have = [c for c in columns if c not in ("doc_id", "source", "locator", "split", "n_chars", "n_words",
                                                     "content_hash", "lang", "meta")]
            raise ValueError(f"the corpus has no field {', '.join(missing)} (its fields: {', '.join(have)}); name "
                             "them with reader.fields / reader.labels, or change the post_training templates")
        frame = pl.read_parquet(path, columns=fields)
        out[split] = frame.to_dicts() if frame.height else None
    return out


def end_id(tokenizer) -> int:
    """The id that ends a response or a document: the tokenizer's eos role, else its end-of-text token."""
    roles = tokenizer.role_ids
    for role in ("eos", "eot"):
        if roles.get(role) is not None:
            return int(roles[role])
    raise ValueError("the start model's tokenizer has neither an eos role nor an end-of-text token: a response "
                     "could not end")


def token_stream(records: list[dict[str, Any]], text: str, tokenizer):
    """Every record's text encoded, each followed by the end id, as one flat array (the lm objectives' data)."""
    from corpusforge.models.tokenization.base import document_stream

    return document_stream(tokenizer, [str(r[text] or "") for r in records], end_id(tokenizer))


def examples(records: list[dict[str, Any]], templates: list[str], values: dict[str, dict[str, str]], tokenizer,
             given: list[str] | None = None) -> Records:
    """Each record's templates filled and encoded: (prompt, answer + end, ...), the first template the prompt and
    every later one an answer that ends with the end id (sft: the response; dpo: the chosen and the rejected
    answer). ``given``, one text per record, stands in for the last template (dpo's rejected answers made from
    the start model)."""
    end = end_id(tokenizer)
    out = Records()
    kept: list[list[str]] = []
    for i, record in enumerate(records):
        try:
            filled = [render(t, record, values) for t in (templates[:-1] if given is not None else templates)]
        except KeyError:
            out.skipped += 1
            continue
        kept.append(filled + ([given[i]] if given is not None else []))
    if not kept:
        return out
    encoded = [tokenizer.encode_batch([k[j] for k in kept]) for j in range(len(kept[0]))]
    for j, texts in enumerate(kept):
        out.ids.append((encoded[0][j], *(column[j] + [end] for column in encoded[1:])))
        out.prompts.append(texts[0])
        out.responses.append(texts[1])
    return out


def wrong_answers(cfg: PostTrainingConfig, rows: list[dict[str, Any]], tokenizer, model) -> list[str]:
    """A rejected answer per record: the start model's greedy answer when it is not the gold one, else the next
    record's response that differs from the gold (a wrong label, for labelled data)."""
    from corpusforge.tasks.post_training.inference import answer, normalise

    gold, prompts = [], []
    for row in rows:
        try:
            gold.append(render(cfg.response, row, cfg.values))
            prompts.append(render(cfg.prompt, row, cfg.values))
        except KeyError:
            gold.append(None)
            prompts.append(None)
    longest = max((len(tokenizer.encode(g)) for g in gold if g), default=1)
    asked = [p for p in prompts if p is not None]
    said = iter(answer(model, tokenizer, asked, end_id(tokenizer), longest + 2))
    distinct = list(dict.fromkeys(g for g in gold if g is not None))
    out = []
    for i, g in enumerate(gold):
        if g is None:
            out.append("")
            continue
        mine = next(said)
        if normalise(mine) != normalise(g):
            out.append(mine)
            continue
        others = [d for d in distinct if normalise(d) != normalise(g)]
        out.append(others[i % len(others)] if others else "")
    return out
