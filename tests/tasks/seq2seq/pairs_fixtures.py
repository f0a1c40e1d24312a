"""Tiny parallel corpora made by a rule, and the stage's upstream built from them through the real corpus and
tokenizer cores (corpus -> joint tokenizer -> encoded ``src_ids``/``tgt_ids``), as a pipeline config validates it
(the seq2seq stage's ``adjust_upstream`` applied to the tokenizer section)."""

from __future__ import annotations

import glob
import random
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.step import StepResult

# a word-level joint vocabulary over the digits: every test pair's tokens are known
WORD_TOKENIZER = {"name": "digits", "kind": "word", "vocab_size": 100, "pre_tokenizer": "whitespace_split"}
# a small GRU with Bahdanau attention; the training settings learn the rules below in a few hundred steps
GRU = {"family": "seq2seq", "model": {"cell": "gru", "attention": "bahdanau", "n_embd": 32, "n_hidden": 64,
                                      "max_len": 16}}
TRAIN = {"max_iters": 300, "batch_size": 32, "lr": 5.0e-3, "min_lr": 5.0e-4, "warmup_iters": 10,
         "weight_decay": 0.0, "eval_interval": 150, "eval_iters": 0, "log_interval": 50, "cpu_threads": 1}


def reverse(words: list[str]) -> list[str]:
    return words[::-1]


def shift(words: list[str], by: int = 1) -> list[str]:
    return [str((int(w) + by) % 10) for w in words]


def digit_pairs(n: int, rule, seed: int, shortest: int = 3, longest: int = 6) -> list[tuple[str, str]]:
    """``n`` pairs (digits separated by spaces, the rule applied to them)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [str(rng.randrange(10)) for _ in range(rng.randint(shortest, longest))]
        out.append((" ".join(words), " ".join(rule(words))))
    return out


def write_pairs(folder: Path, stem: str, pairs: list[tuple[str, str]]) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = folder / f"{stem}.src", folder / f"{stem}.tgt"
    src.write_text("".join(a + "\n" for a, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(b + "\n" for _, b in pairs), encoding="utf-8")
    return src, tgt


def pipeline(folder: Path, splits: dict[str, list[tuple[str, str]]], seq2seq: dict[str, Any],
             tokenizer: dict[str, Any] | None = None) -> Any:
    """The validated pipeline config for these pairs: one line-aligned source per split, pinned to it."""
    from corpusforge.pipeline_config import pipeline_config_from_dict

    sources, by_source = [], {}
    for split, pairs in splits.items():
        src, tgt = write_pairs(folder, split, pairs)
        sources.append({"fields": {"src": str(src), "tgt": str(tgt)}})
        by_source[glob.escape(f"{src.name}+{tgt.name}")] = split
    return pipeline_config_from_dict({
        "name": "pairs",
        "corpus": {"name": "pairs", "sources": sources, "dedup": {"exact": False},
                   "split": {"valid": 0.0, "test": 0.0, "by_source": by_source}},
        "tokenizer": dict(tokenizer or WORD_TOKENIZER),
        "seq2seq": seq2seq,
    })


def encoded(cfg: Any, store: ArtifactStore) -> StepResult:
    """The corpus and the tokenizer stage (tokenizer + encode) through their cores; the encode artifact."""
    from corpusforge.tasks.corpus.merge import build_corpus, resolve_packs
    from corpusforge.tasks.corpus.shard import build_corpus_shard
    from corpusforge.tasks.tokenizer.train import run_tokenizer_stage

    corpus = build_corpus([build_corpus_shard(p, cfg.corpus, store) for p in resolve_packs(cfg.corpus)], cfg.corpus,
                          store)
    return run_tokenizer_stage(corpus, cfg.tokenizer, store)[-1]


def exact_match(hypotheses: list[str], references: list[str]) -> float:
    return sum(h == r for h, r in zip(hypotheses, references)) / len(references)
