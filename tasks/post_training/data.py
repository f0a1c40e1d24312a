"""The post_training step's data: the corpus's records read through the method's templates and encoded with the
start model's tokenizer.

- full / lora: each record's text field, encoded and joined with the end-of-text id into one token stream per split
  (what the lm stage trains on);
- sft: (prompt ids, response ids + end) per record: the prompt and response templates filled from the record;
- dpo: (prompt ids, chosen ids + end, rejected ids + end) per record.

A record a template cannot fill (a missing field) is skipped and counted, never dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpusforge.tasks.post_training.config import PostTrainingConfig, render

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


def examples(records: list[dict[str, Any]], cfg: PostTrainingConfig, tokenizer,
             rejected: list[str] | None = None) -> Records:
    """sft: (prompt, response + end); dpo: (prompt, chosen + end, rejected + end) with the rejected answers
    given (``rejected``, one per record) or filled from the rejected template."""
    end = end_id(tokenizer)
    out = Records()
    kept: list[tuple[str, str, str | None]] = []
    for i, record in enumerate(records):
        try:
            prompt, response = render(cfg.prompt, record, cfg.values), render(cfg.response, record, cfg.values)
            worse = None
            if cfg.objective == "dpo":
                worse = rejected[i] if rejected is not None else render(cfg.rejected, record, cfg.values)
        except KeyError:
            out.skipped += 1
            continue
        kept.append((prompt, response, worse))
    if not kept:
        return out
    prompts = tokenizer.encode_batch([k[0] for k in kept])
    responses = tokenizer.encode_batch([k[1] for k in kept])
    worse_ids = tokenizer.encode_batch([k[2] for k in kept]) if cfg.objective == "dpo" else None
    for j, (prompt, response, _) in enumerate(kept):
        if cfg.objective == "dpo":
            out.ids.append((prompts[j], responses[j] + [end], worse_ids[j] + [end]))
        else:
            out.ids.append((prompts[j], responses[j] + [end]))
        out.prompts.append(prompt)
        out.responses.append(response)
    return out
