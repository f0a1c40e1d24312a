"""Stage ``tokenizer``: train a tokenizer on a corpus's train split, evaluate it, encode the corpus.

Two steps:
- ``tokenizer`` (input: the corpus): trains on ``train.parquet`` (documents in corpus order), saves
  ``tokenizer.json`` (every kind; for classic-bpe an exact-as-documented export next to
  ``classic_bpe.json``) and ``tokenizer_meta.json``, and evaluates on the valid split (train when the
  valid split is empty): ``metrics.json`` and the manifest's metrics, logged to MLflow. Classic BPE
  with ``trace: true`` also writes ``trace.txt`` (as the teaching texts print it) and ``trace.json``.
- ``encode`` (inputs: the corpus and the tokenizer; tasks/tokenizer/encode.py): token-id shards per split.

The Prefect task returns both StepResult dicts; the encode artifact is the stage's main output.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.orchestration import prefect_task
from corpusforge.tasks.step import StepResult, artifact_input, log_step_outcome, run_step
from corpusforge.tasks.tokenizer.config import TokenizerConfig, identity_config, tokenizer_config_from_dict
from corpusforge.tasks.tokenizer.encode import check_columns

TOKENIZER_STEP = "tokenizer"
TOKENIZER_VERSION = 2  # 2: metrics.json holds no timings (the same bytes on every rebuild)
LIBRARIES = ("tokenizers", "polars")

def read_split_texts(corpus_path: str | Path, split: str, fields: Sequence[str] = ()) -> list[str]:
    """The split's texts in corpus order: the ``text`` column, or with ``fields`` each record's fields in turn
    (``src, tgt`` of record 1, then of record 2, ...: one vocabulary for all of them)."""
    import polars as pl

    path = Path(corpus_path) / f"{split}.parquet"
    if not path.exists():
        return []
    columns = list(fields) or ["text"]
    check_columns(path, columns)
    frame = pl.read_parquet(path, columns=columns)
    if len(columns) == 1:
        return frame[columns[0]].to_list()
    return [t for row in frame.iter_rows() for t in row if t is not None]


Progress = Callable[[int, int], None]


def train_tokenizer(texts: list[str], cfg: TokenizerConfig, on_progress: Progress | None = None,
                    show_progress: bool = False):
    """Train the configured tokenizer on ``texts`` (pure: no store, no Prefect).

    Progress: classic-bpe calls ``on_progress(merges_done, merges_total)`` before the first merge, every 100
    merges and at the end; the Hugging Face kinds draw the trainer's own bars on stderr when ``show_progress``.
    """
    from corpusforge.models.tokenization import make_tokenizer

    tok = make_tokenizer(cfg.kind, cfg.unk_token, cfg.eot_token, cfg.special_tokens, cfg.normalizers,
                         cfg.pre_tokenizer, cfg.roles)
    if cfg.kind == "classic-bpe":
        tok.train(texts, vocab_size=None if cfg.merges is not None else cfg.vocab_size, merges=cfg.merges,
                  min_frequency=max(cfg.effective_min_frequency, 1), trace=cfg.trace, trace_top=cfg.trace_top,
                  on_progress=on_progress)
    else:
        tok.train(texts, vocab_size=cfg.vocab_size, min_frequency=cfg.effective_min_frequency,
                  show_progress=show_progress)
    return tok


def build_tokenizer(corpus: StepResult, cfg: TokenizerConfig, store: ArtifactStore,
                    on_progress: Progress | None = None, show_progress: bool = False) -> StepResult:
    return run_step(store, step=TOKENIZER_STEP, version=TOKENIZER_VERSION, name=cfg.name,
                    config=identity_config(cfg), inputs=[artifact_input(corpus)],
                    build=lambda out: _build_tokenizer(out, corpus, cfg, on_progress, show_progress),
                    libraries=LIBRARIES)


def _build_tokenizer(out: Path, corpus: StepResult, cfg: TokenizerConfig, on_progress: Progress | None = None,
                     show_progress: bool = False) -> dict[str, Any]:
    from corpusforge.models.tokenization.evaluation import evaluate_tokenizer

    train = read_split_texts(corpus.path, "train", cfg.fields)
    if not train:
        raise ValueError(f"corpus {corpus.id[:12]} has an empty train split: nothing to train the tokenizer on")
    start = time.perf_counter()
    tok = train_tokenizer(train, cfg, on_progress, show_progress)
    train_seconds = time.perf_counter() - start
    tok.save(out)
    extra: dict[str, Any] = {}
    if cfg.kind == "classic-bpe":
        extra["merges"] = len(tok.merges)
        if cfg.trace:
            (out / "trace.txt").write_text(tok.trace_text() + "\n", encoding="utf-8")
            trace = {"initial_corpus": [{"word": w, "count": c} for w, c in tok.initial_words],
                     "iterations": tok.trace}
            (out / "trace.json").write_text(json.dumps(trace, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    valid = read_split_texts(corpus.path, "valid", cfg.fields)
    eval_split = "valid" if valid else "train"
    metrics = evaluate_tokenizer(tok, valid or train)
    metrics.update(train_seconds=train_seconds, train_docs=len(train), **extra)
    timings = ("train_seconds", "encode_mb_per_s")  # vary run to run: manifest metrics and MLflow only
    (out / "metrics.json").write_text(json.dumps({"eval_split": eval_split, "kind": cfg.kind,
                                                  **{k: v for k, v in metrics.items() if k not in timings}},
                                                 indent=2) + "\n", encoding="utf-8")
    fields = {"metrics": metrics, "eval_split": eval_split, "kind": cfg.kind, "vocab_size": tok.vocab_size,
              "special_tokens": tok.special_tokens, "tokenizer_file": "tokenizer.json"}
    if tok.roles:  # only then: a tokenizer without roles keeps the manifest it had before roles
        fields["roles"] = tok.role_ids
    return fields


def run_tokenizer_stage(corpus: StepResult, cfg: TokenizerConfig, store: ArtifactStore,
                        on_progress: Progress | None = None, show_progress: bool = False) -> list[StepResult]:
    """The stage's core: the tokenizer step, then (with ``encode``) the encode step, which is the main output.
    ``on_progress``/``show_progress``: training progress (see :func:`train_tokenizer`)."""
    from corpusforge.tasks.tokenizer.encode import build_encode

    tok = build_tokenizer(corpus, cfg, store, on_progress, show_progress)
    if not cfg.encode:
        return [tok]
    return [tok, build_encode(corpus, tok, cfg, store)]


@contextlib.contextmanager
def _no_bar():
    yield None


@prefect_task(name="tokenizer")
def tokenizer_task(upstream: dict[str, Any], config: dict[str, Any], store_root: str) -> list[dict[str, Any]]:
    """On a terminal, training shows progress on stderr: a bar of merges for classic-bpe (the corpus shards' bar
    style, tasks/progress.py), the trainer's own bars for the Hugging Face kinds. Elsewhere (pipes, logs, CI,
    worker processes) nothing is drawn, as for the corpus bars."""
    from corpusforge.tasks.progress import shard_progress

    cfg = tokenizer_config_from_dict(config)
    terminal = sys.stderr.isatty()
    with shard_progress(f"tokenizer {cfg.name}: merges") if cfg.kind == "classic-bpe" else _no_bar() as update:
        results = run_tokenizer_stage(StepResult.from_dict(upstream), cfg, ArtifactStore(store_root),
                                      on_progress=update, show_progress=terminal and cfg.kind != "classic-bpe")
    for r in results:
        log_step_outcome(r)
    return [r.to_dict() for r in results]
