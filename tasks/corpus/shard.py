"""Step ``corpus_shard``: one source file -> clean, validated Parquet plus quarantine and drop tables.

Sharding by source file makes runs incremental: a changed file changes its own content digest, so only
its shard id changes and only that shard is recomputed.

Within a shard, in order: read (corpusforge.storage.readers, strict UTF-8) -> clean (polars expressions) ->
filter empty documents -> exact dedup (first occurrence wins) -> split -> GX validation (row failures
to quarantine). Every record read ends in exactly one of kept / quarantined / filtered / deduplicated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corpusforge.storage.hashing import sha256_bytes, sha256_file
from corpusforge.storage.readers import SourceFile, read_batches
from corpusforge.storage.records import RAW_CAP, RecordBatch
from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.config import identity
from corpusforge.tasks.corpus.accounting import accounting_from_tables
from corpusforge.tasks.corpus.clean import clean_expr, word_counts
from corpusforge.tasks.corpus.filters import apply_filters
from corpusforge.tasks.corpus.identity import add_identity
from corpusforge.tasks.corpus.validate import COLUMNS, validate_frame
from corpusforge.tasks.orchestration import prefect_task
from corpusforge.tasks.step import StepResult, log_step_outcome, run_step, slug

SHARD_STEP = "corpus_shard"
SHARD_VERSION = 4  # 4: cleaning ops and quality filters; 3: md5 hashes, control chars, more formats
EXAMPLES_PER_REASON = 5
DROPPED_SCHEMA = ["source", "locator", "stage", "reason", "detail"]
LIBRARIES = ("polars", "pyarrow", "great_expectations", "xxhash")
PARQUET_ZSTD_LEVEL = 1  # ~1.7x faster to write than polars' default level (3), files ~8% larger


@dataclass(frozen=True)
class SourceRef:
    """A discovered source file plus its content digest (the shard's input id)."""

    name: str
    path: str
    digest: str
    size: int | None
    refused: str | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def digest_source(sf: SourceFile) -> SourceRef:
    """Hash a source's bytes. Refused or unreadable files get a digest of their name and reason."""
    if sf.refused is None:
        try:
            return SourceRef(sf.name, str(sf.path), sha256_file(sf.path), sf.path.stat().st_size)
        except OSError as exc:
            sf = SourceFile(sf.name, sf.path, "unreadable", exc.strerror or str(exc))
    marker = f"refused\0{sf.name}\0{sf.refused}\0{sf.detail}".encode()
    return SourceRef(sf.name, str(sf.path), sha256_bytes(marker), None, sf.refused, sf.detail)


def shard_config(corpus_cfg, source_name: str) -> dict[str, Any]:
    """The parts of the corpus config that change a shard's output (plus the source's name)."""
    return {"source": source_name, **identity(corpus_cfg, "corpus_shard")}  # near-dedup runs in the merge


def build_corpus_shard(ref: SourceRef, corpus_cfg, store: ArtifactStore) -> StepResult:
    """Pure core of the shard step: publish (or reuse) the shard artifact for one source file."""
    inputs = [{"id": ref.digest, "kind": "source", "name": ref.name, "path": ref.path, "size": ref.size}]
    return run_step(
        store,
        step=SHARD_STEP,
        version=SHARD_VERSION,
        name=slug(ref.name),
        config=shard_config(corpus_cfg, ref.name),
        inputs=inputs,
        build=lambda out: _build(out, ref, corpus_cfg),
        libraries=LIBRARIES,
    )


def _build(out: Path, ref: SourceRef, cfg) -> dict[str, Any]:
    import polars as pl

    source = SourceFile(ref.name, Path(ref.path), ref.refused, ref.detail)
    frames, quarantine = [], []
    records_read = 0
    for item in read_batches(source, cfg.reader):
        if isinstance(item, RecordBatch):
            records_read += len(item)
            frames.append(item.frame())
        else:
            records_read += 1
            quarantine.append({"source": ref.name, "locator": item.locator, "stage": "read", "reason": item.reason,
                               "detail": item.detail, "raw": item.raw})
    df = pl.concat(frames) if frames else pl.DataFrame(
        schema={"locator": pl.Utf8, "text": pl.Utf8, "meta": pl.Utf8})

    # NUL and other C0/C1 control characters (but tab, LF, CR) never reach the cleaned text; counted.
    controls = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
    control_chars = int(df["text"].str.count_matches(controls).sum() or 0)
    if control_chars:
        df = df.with_columns(pl.col("text").str.replace_all(controls, ""))
    df = df.with_columns(clean_expr("text", cfg.clean).alias("text"))
    df = df.with_columns(pl.lit(None, dtype=pl.Utf8).alias("lang"))  # filled by the language-id filter
    df, filtered = apply_filters(df, cfg.filters)
    dropped = [filtered.select("locator", pl.lit("filter").alias("stage"), "reason", "detail")]

    df = add_identity(df, ref.name, ref.digest, cfg.split)
    fixed = cfg.split.split_for_source(ref.name)
    if fixed is not None:  # e.g. a dedicated valid file: all its documents go to that split
        df = df.with_columns(pl.lit(fixed).alias("split"))
    if cfg.dedup.exact:
        from corpusforge.tasks.corpus.dedup import exact_duplicates

        first, dups = exact_duplicates(df)
        dropped.append(_drops(dups, "dedup", "exact", "duplicate_of=" + pl.col("duplicate_of")))
        df = df.filter(first)

    df = df.with_columns(
        pl.lit(ref.name).alias("source"),
        pl.col("text").str.len_chars().cast(pl.Int64).alias("n_chars"),
        word_counts(df["text"]).alias("n_words"),
    ).select(COLUMNS)

    validation: dict[str, Any] = {"enabled": cfg.validate.enabled, "skipped": "no rows"}
    data_docs = None
    q = pl.DataFrame(quarantine, schema={**dict.fromkeys(DROPPED_SCHEMA, pl.Utf8), "raw": pl.Binary})
    if df.height:
        outcome = validate_frame(df.to_pandas(), cfg.validate, out)
        validation, data_docs = outcome.summary, outcome.data_docs
        if outcome.row_failures:
            failures = pl.DataFrame({"doc_id": list(outcome.row_failures), "reason": list(outcome.row_failures.values())})
            bad = df.join(failures, on="doc_id", how="inner", maintain_order="left")
            q = pl.concat([q, bad.select(
                "source", "locator", pl.lit("validate").alias("stage"), "reason",
                ("doc_id=" + pl.col("doc_id")).alias("detail"),
                pl.col("text").str.slice(0, RAW_CAP).cast(pl.Binary).alias("raw"),
            )])
            df = df.join(failures, on="doc_id", how="anti", maintain_order="left")

    d = pl.concat(dropped).with_columns(pl.lit(ref.name).alias("source")).select(DROPPED_SCHEMA)
    for frame, file in ((df, "data.parquet"), (q, "quarantine.parquet"), (d, "dropped.parquet")):
        frame.write_parquet(out / file, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL)
    (out / "validation.json").write_text(json.dumps(validation, indent=2) + "\n", encoding="utf-8")

    accounting = accounting_from_tables({ref.name: records_read}, df, q, d)
    return {
        "accounting": accounting,
        "drop_examples": drop_examples(q, d),
        "metrics": {"docs": df.height, "chars": int(df["n_chars"].sum() or 0), "words": int(df["n_words"].sum() or 0),
                    "control_chars_removed": control_chars},
        "validation": validation,
        "data_docs": data_docs,
        # everything else is the same bytes on every rebuild (tests/flows/test_demo_verify.py)
        **({"nondeterministic": {data_docs: "GX's Data Docs page shows the validation's run time and random "
                                            "element ids"}} if data_docs else {}),
    }


def _drops(frame, stage: str, reason: str, detail):
    """Rows of ``frame`` as drop-table rows (locator, stage, reason, detail)."""
    import polars as pl

    detail = pl.lit(detail) if isinstance(detail, str) else detail
    return frame.select("locator", pl.lit(stage).alias("stage"), pl.lit(reason).alias("reason"),
                        detail.alias("detail"))


def drop_examples(quarantine, dropped) -> dict[str, list[str]]:
    """A few ``source:locator`` examples per reason, so `artifacts show` can point at real records."""
    import polars as pl

    out: dict[str, list[str]] = {}
    for table in (quarantine, dropped):
        firsts = (table.select("reason", (pl.col("source") + ":" + pl.col("locator")).alias("where"))
                  .group_by("reason", maintain_order=True).head(EXAMPLES_PER_REASON))
        for reason, where in zip(firsts["reason"], firsts["where"]):
            bucket = out.setdefault(reason, [])
            if len(bucket) < EXAMPLES_PER_REASON:
                bucket.append(where)
    return out


def _retry_on_io_error(task, task_run, state) -> bool:
    """Retry transient I/O failures only; a bad config or failed validation will not fix itself."""
    try:
        state.result()
    except OSError:
        return True
    except Exception:  # noqa: BLE001 - anything else is not transient
        return False
    return False


@prefect_task(name="corpus_shard", retries=2, retry_delay_seconds=1, retry_condition_fn=_retry_on_io_error,
              task_run_name="corpus_shard[{source[name]}]")
def corpus_shard_task(source: dict[str, Any], corpus_config: dict[str, Any], store_root: str) -> dict[str, Any]:
    from corpusforge.tasks.corpus.config import corpus_config_from_dict

    result = build_corpus_shard(SourceRef(**source), corpus_config_from_dict(corpus_config), ArtifactStore(store_root))
    log_step_outcome(result)
    return result.to_dict()
