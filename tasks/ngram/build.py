"""Step ``ngram``: count n-grams in DuckDB, estimate a smoothed n-gram LM, evaluate it, export ARPA.

Glue only: the counting SQL is storage/ngram_counts.py, the smoothing math models/ngram.py, the ARPA
format models/ngram_arpa.py. The artifact holds:

- ``counts.duckdb``: vocabulary and raw n-gram counts per order (see corpusforge.storage.ngram_counts);
- ``model/``: the estimated model (``model.npz`` plain arrays, ``words.json``, ``model.json``);
- ``model.arpa.gz``: the same model as KenLM-readable ARPA (probability models only, when ``arpa``);
- ``stats.json``: distinct n-grams and singleton ratios per order, discounts, and every evaluation;
- ``zipf.png``: rank/frequency of the training words, log-log.

Evaluation sets are the corpus's own non-empty ``eval_splits`` and the text files in ``eval`` (one sentence
per line, whitespace tokens), whose content digests are inputs of the step. Perplexity follows KenLM:
every word and ``</s>`` is scored, ``<s>`` is not, OOVs get p(<unk>); it is reported with and without OOVs,
where an OOV is what KenLM's ``query`` counts as one: a token that maps to <unk>, a literal ``<unk>`` included.

``partitions`` > 0 distributes the counting over the flow's task runner (see :func:`count_partitioned`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from corpusforge.storage.hashing import sha256_file
from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.corpus.shard import recorded_source_path
from corpusforge.tasks.ngram.config import NgramConfig, identity_config, ngram_config_from_dict
from corpusforge.tasks.orchestration import prefect_task
from corpusforge.tasks.step import (StepResult, artifact_input, log_step_outcome, resolve_references, run_step,
                                   slug)

NGRAM_STEP = "ngram"
NGRAM_VERSION = 4  # 2: counts.duckdb holds ngrams_padded + views; model.arpa.gz has a fixed gzip header
# 3: the manifest keeps the store's file table (sha256 per file); the role -> file map is `outputs`
# 4: OOVs are KenLM's (a literal <unk> is one): `oov`, `oov_rate` and `perplexity_without_oov` in stats.json and
#    the metrics change for texts holding a literal <unk>
LIBRARIES = ("duckdb", "numpy", "matplotlib")
Progress = Callable[[str, int, int], None]  # (stage, done, total)

def read_sentences(path: str | Path) -> Iterator[list[str]]:
    """One sentence per line, whitespace tokens (Python's str.split), blank lines skipped."""
    with open(path, encoding="utf-8", newline="") as f:
        for line in f.read().splitlines():
            toks = line.split()
            if toks:
                yield toks


def _parquet_sentences(files: Sequence[Path], sentence: str) -> Iterator[list[str]]:
    import pyarrow.parquet as pq

    for f in files:
        if not f.exists():
            continue
        for text in pq.read_table(f, columns=["text"]).column("text").to_pylist():
            pieces = text.splitlines() if sentence == "line" else [text]
            for piece in pieces:
                toks = piece.split()
                if toks:
                    yield toks


def build_ngram(corpus: StepResult, cfg: NgramConfig, store: ArtifactStore,
                progress: Progress | None = None, refs: Mapping[str, StepResult] | None = None) -> StepResult:
    """Pure core: count, estimate, evaluate, export. Same corpus + config + eval files (+ tokenizer) -> same id
    (reused). ``progress(stage, done, total)`` hears how counting, estimation and ARPA writing advance.
    ``refs`` holds the tokenizer artifact the pipeline resolved for ``cfg.tokenizer``; called without it, an id
    or prefix there is looked up in the store."""
    missing = [p for p in cfg.eval if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"ngram.eval: no such file: {missing[0]}")
    inputs = [artifact_input(corpus)] + [
        {"id": sha256_file(Path(p)), "kind": "source", "name": Path(p).name, "path": recorded_source_path(p),
         "size": Path(p).stat().st_size} for p in cfg.eval]
    refs = resolve_references(cfg, store, section="ngram", given=refs)
    tokenizer_dir = Path(refs["tokenizer"].path) if "tokenizer" in refs else None
    return run_step(store, step=NGRAM_STEP, version=NGRAM_VERSION, name=cfg.artifact_name,
                    config=identity_config(cfg), inputs=inputs, references=refs,
                    build=lambda out: _build(out, corpus, cfg, tokenizer_dir, progress), libraries=LIBRARIES)


def _token_text(tokenizer, text: str, sentence: str) -> str:
    """A text re-written as space-separated tokens, keeping line breaks when lines are sentences."""
    import re

    pieces = text.splitlines() if sentence == "line" else [text]
    return "\n".join(" ".join(re.sub(r"\s", "\u2581", t) for t in tokenizer.tokenize(p)) for p in pieces)


def tokenize_corpus(corpus_dir: Path, tokenizer_dir: Path, out_dir: Path, sentence: str) -> Path:
    """Copies of the corpus's split files whose ``text`` is the tokenizer's tokens, for counting."""
    import polars as pl

    from corpusforge.models.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        src = corpus_dir / f"{split}.parquet"
        if src.exists():
            texts = pl.read_parquet(src, columns=["text"])["text"].to_list()
            pl.DataFrame({"text": [_token_text(tok, t, sentence) for t in texts]},
                         schema={"text": pl.Utf8}).write_parquet(out_dir / f"{split}.parquet")
    return out_dir


def estimate_from_corpus(corpus_dir: Path, out: Path, cfg: NgramConfig, on_progress=None,
                         progress: Progress | None = None):
    """Corpus artifact -> counts.duckdb + the estimated model (in memory). Returns (model, count summary,
    count tables). The counter hands its arrays straight to the estimator (sorted, with each n-gram's
    context row), so nothing is read back from counts.duckdb and nothing is sorted twice.

    ``on_progress(done, 3)`` marks the end of counting and of estimation; ``progress(stage, done, total)``
    gets "counting" (per partition; 0/1 then 1/1 in one process), "merging" (per partition) and "estimating"
    (per order) events. ``cfg.partitions`` > 0 counts with the tasks of :func:`count_partitioned`."""
    from corpusforge.models.ngram import estimate
    from corpusforge.storage.ngram_counts import DuckSettings, count_ngram_tables

    settings = DuckSettings(memory_limit=cfg.memory_limit, temp_directory=cfg.temp_directory or str(out / ".spill"),
                            threads=cfg.threads)
    if cfg.partitions:
        counted = count_partitioned(corpus_dir / "train.parquet", out, cfg, settings, progress)
    else:
        if progress:
            progress("counting", 0, 1)
        counted = count_ngram_tables([corpus_dir / "train.parquet"], out / "counts.duckdb", cfg.order, cfg.sentence,
                                     settings)
        if progress:
            progress("counting", 1, 1)
    if counted.summary["sentences"] == 0:
        raise ValueError("ngram: the corpus's train split has no sentence to count")
    if on_progress:
        on_progress(1, 3)
    model = estimate(counted.words, counted.tables, cfg.smoothing, k=cfg.k, vocab_size=cfg.vocab_size,
                     alpha=cfg.alpha, contexts=counted.contexts, prune=cfg.prune,
                     on_progress=(lambda done, total: progress("estimating", done, total)) if progress else None)
    if on_progress:
        on_progress(2, 3)
    return model, counted.summary, counted.tables


def count_partitioned(train: Path, out: Path, cfg: NgramConfig, settings, progress: Progress | None = None):
    """Distributed counting (``cfg.partitions`` = P): P :func:`ngram_count_task` runs each count 1/P of the
    documents into P hash partitions, P :func:`ngram_merge_task` runs each sum one partition over the workers,
    then the merged partitions are read into ``out/counts.duckdb`` (corpusforge.storage.ngram_counts.tables_from_partitions).
    Inside a flow the tasks go to its task runner; outside one (the core called directly) they run inline.
    Scratch files live in ``out/.partitions`` (in the store, so that workers on other hosts see them)."""
    import shutil
    from dataclasses import asdict

    from corpusforge.storage.ngram_counts import document_slices, tables_from_partitions

    P = cfg.partitions
    scratch = out / ".partitions"
    duck = asdict(settings)
    slices = document_slices(train, P)

    def own_spill(name: str) -> dict[str, Any]:  # DuckDB processes do not share a spill directory
        return {**duck, "temp_directory": str(Path(duck["temp_directory"]) / name)} if duck["temp_directory"] else duck

    counted = _run_tasks(ngram_count_task, [
        {"parquet_file": str(train), "rows": list(rows), "out_dir": str(scratch / f"slice-{i}"), "order": cfg.order,
         "partitions": P, "sentence": cfg.sentence, "settings": own_spill(f"slice-{i}")}
        for i, rows in enumerate(slices)],
        (lambda done, total: progress("counting", done, total)) if progress else None)
    merged = [str(scratch / f"merged-{p}.parquet") for p in range(P)]
    _run_tasks(ngram_merge_task, [
        {"files": [c["files"][p] for c in counted], "out_path": merged[p], "order": cfg.order,
         "settings": own_spill(f"merge-{p}")} for p in range(P)],
        (lambda done, total: progress("merging", done, total)) if progress else None)
    try:
        return tables_from_partitions(merged, out / "counts.duckdb", cfg.order, cfg.sentence,
                                      sum(c["sentences"] for c in counted), sum(c["tokens"] for c in counted),
                                      settings)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_tasks(task, calls: list[dict[str, Any]], on_done=None) -> list[Any]:
    """Run ``task`` once per kwargs dict: submitted to the current flow's task runner when there is one (results
    in call order), else called inline. ``on_done(done, total)`` after each one finishes (and 0 first)."""
    flow_ctx = None
    try:
        from prefect.context import FlowRunContext

        flow_ctx = FlowRunContext.get()
    except ImportError:  # pragma: no cover - prefect is a dependency
        pass
    total = len(calls)
    if on_done:
        on_done(0, total)
    if flow_ctx is None or getattr(flow_ctx, "task_runner", None) is None:
        results = []
        for kwargs in calls:
            results.append(task.fn(**kwargs))
            if on_done:
                on_done(len(results), total)
        return results
    from prefect.futures import as_completed

    futures = [task.submit(**kwargs) for kwargs in calls]
    index = {id(f): i for i, f in enumerate(futures)}
    done: dict[int, Any] = {}
    for future in as_completed(futures):
        done[index[id(future)]] = future.result()
        if on_done:
            on_done(len(done), total)
    return [done[i] for i in range(total)]


def _build(out: Path, corpus: StepResult, cfg: NgramConfig, tokenizer_dir: Path | None = None,
           progress: Progress | None = None) -> dict[str, Any]:
    import shutil
    import tempfile

    corpus_dir = Path(corpus.path)
    # partitioned counting: the workers read the tokenized copy, so it goes where they see it (the build dir)
    scratch = out / ".tokens" if cfg.partitions else Path(tempfile.mkdtemp(prefix="ngram-tokens-"))
    try:
        if tokenizer_dir is not None:
            corpus_dir = tokenize_corpus(corpus_dir, Path(tokenizer_dir), scratch, cfg.sentence)
        return _estimate_and_report(out, corpus_dir, cfg, tokenizer_dir, progress)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _estimate_and_report(out: Path, corpus_dir: Path, cfg: NgramConfig, tokenizer_dir: Path | None,
                         progress: Progress | None = None) -> dict[str, Any]:
    import shutil

    from corpusforge.models.ngram import save_model
    from corpusforge.models.ngram_arpa import write_arpa

    model, summary, tables = estimate_from_corpus(corpus_dir, out, cfg, progress=progress)
    shutil.rmtree(out / ".spill", ignore_errors=True)
    save_model(model, out / "model")
    files = {"counts": "counts.duckdb", "model": "model"}
    if cfg.arpa and model.is_probability:
        write_arpa(model, out / "model.arpa.gz",
                   on_progress=(lambda done, total: progress("writing ARPA", done, total)) if progress else None)
        files["arpa"] = "model.arpa.gz"
    metrics: dict[str, float] = {"sentences": summary["sentences"], "tokens": summary["tokens"],
                                 "vocab_size": summary["vocab"]}
    per_order = {}
    for n, (_, counts) in enumerate(tables, start=1):
        distinct = int(len(counts))
        singletons = int((counts == 1).sum())
        per_order[n] = {"distinct": distinct, "singletons": singletons,
                        "singleton_ratio": singletons / distinct if distinct else 0.0}
        metrics[f"distinct_{n}grams"] = distinct
        metrics[f"singleton_ratio_{n}"] = per_order[n]["singleton_ratio"]
    evaluations = {}
    sets: list[tuple[str, str, Iterator[list[str]]]] = []
    for split in cfg.eval_splits:
        sets.append((split, split, _parquet_sentences([corpus_dir / f"{split}.parquet"], cfg.sentence)))
    tokenizer = None
    if tokenizer_dir is not None:
        from corpusforge.models.tokenization import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_dir)
    for i, path in enumerate(cfg.eval):
        lines = read_sentences(path) if tokenizer is None else (
            _token_text(tokenizer, " ".join(words), "document").split() for words in read_sentences(path))
        # the file's name, as in the id (its content digest is an input): the artifact's bytes never say where it lay
        sets.append((f"eval{i}_{slug(Path(path).stem, 32)}", Path(path).name, lines))
    for key, label, sentences in sets:
        sents = list(sentences)
        if not sents:
            continue
        result = model.evaluate(sents)
        encoded = [model.encode(s)[0] for s in sents]
        result["unseen_ngram_fraction"] = {str(n): f for n, f in model.unseen_fractions(encoded).items()}
        result["source"] = label
        evaluations[key] = result
        for name in ("perplexity", "perplexity_without_oov", "oov", "oov_rate", "sentences"):
            metrics[f"{key}.{name}"] = result[name]
        for n, f in result["unseen_ngram_fraction"].items():
            metrics[f"{key}.unseen_{n}gram_fraction"] = f
    stats = {"summary": summary, "per_order": per_order, "model": {"method": model.method,
             "is_probability": model.is_probability, **model.info}, "evaluations": evaluations}
    (out / "stats.json").write_text(json.dumps(_finite(stats), indent=2, default=_json_default), encoding="utf-8")
    _plot_zipf(tables[0], out / "zipf.png", f"{cfg.artifact_name}: Zipf plot")
    # MLflow and canonical JSON take finite numbers only: an infinite perplexity (MLE) stays out of metrics
    # and reads null in the manifest (stats.json says "inf").
    metrics = {k: float(v) for k, v in metrics.items() if math.isfinite(float(v))}
    return {"nondeterministic": {"counts.duckdb": "a DuckDB database file: its block layout depends on thread "
                                                  "timing (the counts in it are the same)"},
            "metrics": metrics, "outputs": files, "scores_are_probabilities": model.is_probability,
            "evaluations": _finite({k: {"source": v["source"], "perplexity": v["perplexity"], "oov": v["oov"],
                                        "sentences": v["sentences"]} for k, v in evaluations.items()}, None)}


def _finite(value: Any, replacement: Any = "inf") -> Any:
    """Replace non-finite floats (nested) so that strict JSON accepts the structure."""
    if isinstance(value, dict):
        return {k: _finite(v, replacement) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, replacement) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return replacement if replacement != "inf" else str(value)
    return value


def _json_default(value: Any) -> Any:
    try:
        return value.item()
    except AttributeError:
        return str(value)


def _plot_zipf(unigrams, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    ids, counts = unigrams
    # <s> is a marker, not a word (the table holds only the ids seen, so its row is found by id)
    counts = np.asarray(counts, dtype=np.float64)[np.asarray(ids)[:, 0] != 1]
    freq = np.sort(counts[counts > 0])[::-1]
    fig, ax = plt.subplots(figsize=(6, 4))
    if len(freq):
        ranks = np.arange(1, len(freq) + 1)
        ax.loglog(ranks, freq, ".", markersize=2, label="words")
        ax.loglog(ranks, freq[0] / ranks, "--", linewidth=1, label="f ∝ 1/rank")
        ax.legend()
    ax.set_xlabel("rank")
    ax.set_ylabel("frequency")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def load_ngram_model(artifact_dir: str | Path):
    """The estimated model of an ngram artifact (corpusforge.models.ngram.BackoffModel)."""
    from corpusforge.models.ngram import load_model

    return load_model(Path(artifact_dir) / "model")


@prefect_task(name="ngram_count")
def ngram_count_task(parquet_file: str, rows: list[int], out_dir: str, order: int, partitions: int, sentence: str,
                     settings: dict[str, Any]) -> dict[str, Any]:
    """Map side of partitioned counting: one slice of the documents into ``partitions`` Parquet files."""
    from corpusforge.storage.ngram_counts import DuckSettings, count_slice_partitions

    return count_slice_partitions(parquet_file, (rows[0], rows[1]), out_dir, order, partitions, sentence,
                                  DuckSettings(**settings))


@prefect_task(name="ngram_merge")
def ngram_merge_task(files: list[str], out_path: str, order: int, settings: dict[str, Any]) -> int:
    """Reduce side of partitioned counting: one partition's files summed into one."""
    from corpusforge.storage.ngram_counts import DuckSettings, merge_partition

    return merge_partition(files, out_path, order, DuckSettings(**settings))


@prefect_task(name="ngram")
def ngram_task(upstream: dict[str, Any], config: dict[str, Any], store_root: str,
               refs: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    from corpusforge.tasks.progress import stage_progress

    cfg = ngram_config_from_dict(config)
    with stage_progress(f"ngram {cfg.artifact_name}") as progress:
        result = build_ngram(StepResult.from_dict(upstream), cfg, ArtifactStore(store_root), progress=progress,
                             refs={k: StepResult.from_dict(v) for k, v in (refs or {}).items()})
    log_step_outcome(result)
    return result.to_dict()


def load_ngram_artifact(artifact_dir: Path, manifest: dict[str, Any]):
    """``Artifact.load()`` of an ngram artifact: the n-gram model (``prob``, ``score_sentence``, ``perplexity``)."""
    return load_ngram_model(artifact_dir)
