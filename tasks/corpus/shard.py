"""Step ``corpus_shard``: source files -> clean, validated Parquet plus quarantine and drop tables.

A shard is one source file, or several small ones packed together (:func:`pack_sources`): each shard is one
task, one GX validation and one set of Parquet files, which cost ~0.13-0.16 CPU-s whatever the shard's size,
so a directory of many small files is read in a few shards instead of one per file. Runs stay incremental:
a changed file changes its own content digest, so only the id of the shard that holds it changes and only
that shard is recomputed. Which files share a shard depends on each file's own name and size, not on its
neighbours (content-defined boundaries), so adding or removing a file changes only the shard around it.

Within a shard, in order: read (corpusforge.storage.readers, strict UTF-8; each file hashed as it is read and
checked against the digest the shard's id was made from, see build_corpus_shard) -> clean (polars expressions) ->
filter -> doc ids, content hashes and splits, a chunk of ~``CHUNK_BYTES`` of text at a time (so their
intermediate columns never hold a large shard at once) -> exact dedup (first occurrence wins) -> GX
validation (row failures to quarantine) on the whole shard. Every record read ends in exactly one of kept /
quarantined / filtered / deduplicated.

Named fields (``reader.fields``/``labels``, line-aligned files; :attr:`CorpusConfig.field_spec`): a record is one
row with a column per field, named after it (the encode step reads them by name). Every text field is stripped of
control characters, cleaned and filtered (the first failing field drops the record, its detail naming the field);
``content_hash`` is the md5 of the text fields joined by U+001F (a control character, so never inside a field
after cleaning), so exact dedup keys on all of them together; labels are carried as they were read (int or str),
not part of the key: a later record with the same texts and another label than the first is dropped as
``conflicting_label`` (the first is kept). ``n_chars``/``n_words`` are sums over the text fields. A corpus
without named fields has ``text`` and hashes, ids and bytes as before fields existed.

Tagged records (``reader.tags``): the text field is ``tokens`` (a sentence's words joined by one space) and each tag
field is a text label (its tags joined so). Cleaning goes word by word (tasks/corpus/clean.py :func:`clean_words`):
a sentence in which a word came out empty or holding whitespace is dropped as ``alignment_changed`` (a filter drop,
its detail naming the word) before the filters run on ``tokens``. Exact dedup keys on the words; the same words
with other tags are ``conflicting_label``. GX checks that every tag field has one tag per word.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from corpusforge.storage.aligned import read_aligned
from corpusforge.storage.hashing import sha256_bytes, sha256_file
from corpusforge.storage.readers import SourceChanged, SourceFile, read_batches
from corpusforge.storage.records import RAW_CAP, FieldSpec, RecordBatch
from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.config import identity
from corpusforge.tasks.corpus.accounting import accounting_from_tables
from corpusforge.tasks.corpus.clean import clean_expr, clean_words, word_counts
from corpusforge.tasks.corpus.filters import apply_filters
from corpusforge.tasks.corpus.identity import SEP, add_identity
from corpusforge.tasks.corpus.validate import columns_for, validate_frame
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
    # line-aligned files read as this one source: key -> {"name", "path", "digest", "size"} of each file
    aligned: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        if self.aligned is None:
            del out["aligned"]
        return out


def digest_source(sf: SourceFile) -> SourceRef:
    """Hash a source's bytes. Refused or unreadable files get a digest of their name and reason."""
    if sf.refused is None:
        try:
            return SourceRef(sf.name, str(sf.path), sha256_file(sf.path), sf.path.stat().st_size)
        except OSError as exc:
            sf = SourceFile(sf.name, sf.path, "unreadable", exc.strerror or str(exc))
    marker = f"refused\0{sf.name}\0{sf.refused}\0{sf.detail}".encode()
    return SourceRef(sf.name, str(sf.path), sha256_bytes(marker), None, sf.refused, sf.detail)


def aligned_ref(files: dict[str, SourceRef]) -> SourceRef:
    """Line-aligned files (key -> each file's SourceRef, as :func:`digest_source` made it) as one source, named
    ``a.de+a.en``. Its digest is of the keys and the files' digests (the records' doc ids derive from it); a file
    that is refused refuses the whole source, its detail naming the key."""
    name = "+".join(ref.name for ref in files.values())
    for key, ref in files.items():
        if ref.refused:
            return digest_source(SourceFile(name, Path(ref.path), ref.refused, f"{key} ({ref.name}): {ref.detail}"))
    marker = "aligned" + "".join(f"\0{key}\0{ref.digest}" for key, ref in files.items())
    return SourceRef(name, next(iter(files.values())).path, sha256_bytes(marker.encode("utf-8", "surrogatepass")),
                     sum(ref.size or 0 for ref in files.values()),
                     aligned={key: {"name": ref.name, "path": ref.path, "digest": ref.digest, "size": ref.size}
                              for key, ref in files.items()})


def recorded_source_path(path: str) -> str:
    """Where a shard's manifest says a source file was read: relative to the working directory when the file lies
    under it (``data/a.txt``, as a project run from its own folder names it: the same in every checkout), else
    its absolute path (a file outside the project has no other honest name). Informational only: a shard's id
    is made of its sources' digests and names, never of this path, and nothing reads the file back from it."""
    cwd = os.getcwd()
    if cwd == os.sep:
        return os.path.abspath(path)
    for here, there in ((cwd, os.path.abspath(path)), (os.path.realpath(cwd), os.path.realpath(path))):
        if there.startswith(here.rstrip(os.sep) + os.sep):
            return Path(os.path.relpath(there, here)).as_posix()
    return os.path.abspath(path)


def source_inputs(ref: SourceRef) -> list[dict[str, Any]]:
    """A shard's input entries for one source: the file, or each of its line-aligned files (the key it is read
    as in ``field``); their digests make the shard's id (the path is :func:`recorded_source_path`)."""
    if ref.aligned is None:
        return [{"id": ref.digest, "kind": "source", "name": ref.name, "path": recorded_source_path(ref.path),
                 "size": ref.size}]
    return [{"id": f["digest"], "kind": "source", "name": f["name"], "path": recorded_source_path(f["path"]),
             "size": f["size"], "field": key} for key, f in ref.aligned.items()]


# Packing (see pack_sources): a shard holds files of about SHARD_MB on average (corpus.shard_mb), or about
# PACK_FILES files when they are tiny; a file of shard_mb or more is a shard of its own.
PACK_FILES = 2048
# A pack never grows past 2x shard_mb nor MAX_PACK_FILES files (then it is cut before a file). A shard's peak
# memory is ~7-11x its text (the kept frame, GX's pandas copy, the Parquet writer), and two shards run at once:
# at 4x shard_mb (32 MB), one pack of 13 files of 2.5 MB took 370 MB.
MAX_PACK_FACTOR = 2
MAX_PACK_FILES = 8 * PACK_FILES
CHUNK_BYTES = 4 << 20  # a shard is read, cleaned, filtered and hashed ~4 MiB of text at a time


def _draw(name: str) -> float:
    """A uniform number in [0, 1) fixed by a source's name: where content-defined pack boundaries fall."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()[:8], "big") / 2.0**64


def pack_sources(refs: Sequence[SourceRef], shard_mb: float) -> list[list[SourceRef]]:
    """Group ``refs`` (in order) into shards. A pack ends after a file with probability ``max(size / shard_mb,
    1 / PACK_FILES)``, decided by a hash of the file's name: so a pack holds ~shard_mb of files (or ~PACK_FILES
    tiny ones), and where packs end depends on each file alone, not on the files before it; adding, removing
    or changing one file changes only the pack it is in (and, rarely, the next one, when a size cap cuts).
    A file of ``shard_mb`` or more is a pack of its own (its shard is the same as with one shard per file).
    ``shard_mb`` 0: one pack per file."""
    if shard_mb <= 0:
        return [[r] for r in refs]
    target = shard_mb * 2**20
    max_bytes, max_files = MAX_PACK_FACTOR * target, MAX_PACK_FILES
    packs: list[list[SourceRef]] = []
    pack: list[SourceRef] = []
    size_of_pack = 0
    for ref in refs:
        size = ref.size or 0
        if pack and (size >= target or size_of_pack + size > max_bytes or len(pack) >= max_files):
            packs.append(pack)
            pack, size_of_pack = [], 0
        pack.append(ref)
        size_of_pack += size
        if _draw(ref.name) < max(size / target, 1 / PACK_FILES):
            packs.append(pack)
            pack, size_of_pack = [], 0
    if pack:
        packs.append(pack)
    return packs


def shard_sources(manifest: dict[str, Any]) -> list[str]:
    """The names of the source files a shard artifact holds, from its manifest."""
    config = manifest.get("config") or {}
    return list(config["sources"]) if "sources" in config else [config.get("source", "")]


def shard_config(corpus_cfg, source_names: str | Sequence[str], aligned: dict[str, dict[str, str]] | None = None
                 ) -> dict[str, Any]:
    """The parts of the corpus config that change a shard's output (plus the sources' names, and for line-aligned
    sources which file each key reads: ``{source: {key: file}}``). A shard of one file keeps the config (so the
    id) it had before shards could pack several files."""
    names = [source_names] if isinstance(source_names, str) else list(source_names)
    which: dict[str, Any] = {"source": names[0]} if len(names) == 1 else {"sources": names}
    if aligned:
        which["aligned"] = aligned
    rules: dict[str, Any] = {}  # reading rules that changed after ids were made: only the shards they touch move
    if any(suffix in (".csv", ".tsv") for name in names for suffix in PurePosixPath(name.lower()).suffixes):
        rules["table_rows"] = "ragged rows quarantined, .tsv unquoted unless tsv_quoting (issue 44)"
    if corpus_cfg.reader.labels:
        rules["labels"] = "stripped (issue 44)"
    return {**which, **identity(corpus_cfg, "corpus_shard"), **rules}  # near-dedup runs in the merge


def shard_name(refs: Sequence[SourceRef]) -> str:
    return slug(refs[0].name) if len(refs) == 1 else slug(f"{refs[0].name} and {len(refs) - 1} more", 80)


READ_ATTEMPTS = 3  # reads of a source that keeps changing under the reader before it is refused


def build_corpus_shard(refs: SourceRef | Sequence[SourceRef], corpus_cfg, store: ArtifactStore) -> StepResult:
    """Pure core of the shard step: publish (or reuse) the shard artifact for one source file or a pack.

    A source is read and hashed in one pass, and its records are used only if the bytes read are those its
    digest (so this shard's id) was made from and the file did not change while it was read. Otherwise the
    build stops before publishing anything and the shard is read again; a source that changed on each of
    ``READ_ATTEMPTS`` reads is refused as ``source_changed`` (one quarantined record), which makes it another
    input id, so a later run, with the file at rest, reads it afresh."""
    refs = [refs] if isinstance(refs, SourceRef) else list(refs)
    if not refs:
        raise ValueError("a shard needs at least one source file")
    changes: dict[str, int] = {}
    while True:
        try:
            return _publish_shard(refs, corpus_cfg, store)
        except SourceChanged as exc:
            changes[exc.name] = changes.get(exc.name, 0) + 1
            gave_up = changes[exc.name] >= READ_ATTEMPTS
            logging.getLogger("corpusforge").warning(
                "source %s %s; %s", exc.name, exc.detail,
                f"refused as source_changed after {READ_ATTEMPTS} reads" if gave_up else "reading the shard again")
            if gave_up:
                refs = [refuse_source(r, "source_changed", f"{exc.detail} (on each of {READ_ATTEMPTS} reads)")
                        if r.name == exc.name else r for r in refs]


def refuse_source(ref: SourceRef, reason: str, detail: str) -> SourceRef:
    """``ref`` refused with ``reason``: a digest of its name and reason instead of its bytes, as for the files
    refused at discovery (:func:`digest_source`)."""
    return digest_source(SourceFile(ref.name, Path(ref.path), reason, detail))


def _publish_shard(refs: list[SourceRef], corpus_cfg, store: ArtifactStore) -> StepResult:
    inputs = [entry for r in refs for entry in source_inputs(r)]
    aligned = {r.name: {key: f["name"] for key, f in r.aligned.items()} for r in refs if r.aligned is not None}
    return run_step(
        store,
        step=SHARD_STEP,
        version=SHARD_VERSION,
        name=shard_name(refs),
        config=shard_config(corpus_cfg, [r.name for r in refs], aligned),
        inputs=inputs,
        build=lambda out: _build(out, refs, corpus_cfg),
        libraries=LIBRARIES,
    )


def _source_items(ref: SourceRef, cfg, spec: FieldSpec | None):
    """The batches and bad records of one source: a file, or line-aligned files read as one."""
    expect = None if ref.refused else ref.digest  # the reader raises SourceChanged if the bytes differ
    if ref.aligned is not None and not ref.refused:
        if spec is None:  # CorpusConfig.field_spec: a corpus with line-aligned files always has named fields
            raise ValueError(f"source {ref.name}: line-aligned files in a corpus config without them")
        files = {key: SourceFile(f["name"], Path(f["path"])) for key, f in ref.aligned.items()}
        return read_aligned(ref.name, files, cfg.reader, spec=spec,
                            expect_sha256={key: f["digest"] for key, f in ref.aligned.items()})
    source = SourceFile(ref.name, Path(ref.path), ref.refused, ref.detail)
    return read_batches(source, cfg.reader, expect_sha256=expect, spec=spec)


def _text_columns(spec: FieldSpec | None) -> tuple[str, ...]:
    return spec.names if spec is not None else ("text",)


def _read(refs: list[SourceRef], cfg, quarantine: list[dict[str, Any]], records_read: dict[str, int]):
    """The records of every source as polars frames (locator, text, meta, or with named fields locator, the
    fields, meta; plus ``source`` when the shard packs several files) of about ``CHUNK_BYTES`` of text each, in
    record order; at least one frame, maybe empty. Read failures go to ``quarantine`` as rows, and the records
    read per source to ``records_read``."""
    import polars as pl

    spec = cfg.field_spec
    text_columns = _text_columns(spec)
    several = len(refs) > 1
    # Each file's records are a frame of their own; a chunk is their concatenation *rechunked*: without it a
    # pack of 2,000 tiny files was a 2,000-piece frame that every later step (cleaning, filters, DuckDB's scan
    # of one Arrow batch per piece) paid for piece by piece, ~170 KB a file (20,000 files peaked at 2.3 GB).
    pending: list = []
    size = 0
    chunks = 0
    for ref in refs:
        n = 0
        for item in _source_items(ref, cfg, spec):
            if isinstance(item, RecordBatch):
                n += len(item)
                frame = item.frame()
                if several:
                    frame = frame.with_columns(pl.lit(ref.name).alias("source"))
                pending.append(frame)
                size += sum(int(frame[c].str.len_bytes().sum() or 0) for c in text_columns)
                if size >= CHUNK_BYTES:
                    yield pl.concat(pending, rechunk=True)
                    chunks += 1
                    pending, size = [], 0
            else:
                n += 1
                quarantine.append({"source": ref.name, "locator": item.locator, "stage": "read",
                                   "reason": item.reason, "detail": item.detail, "raw": item.raw})
        records_read[ref.name] = n
    if pending or not chunks:
        base = spec.polars_schema() if spec is not None else {"locator": pl.Utf8, "text": pl.Utf8, "meta": pl.Utf8}
        schema = {**base, **({"source": pl.Utf8} if several else {})}
        yield pl.concat(pending, rechunk=True) if pending else pl.DataFrame(schema=schema)


def _prepare(df, refs: list[SourceRef], cfg) -> tuple[Any, Any, int]:
    """One chunk of records -> (cleaned, filtered rows with doc_id, content_hash, split, n_chars and n_words;
    the filters' drop rows; control characters removed). Every step is per record, so chunks give what the whole
    shard would. With named fields every text field is cleaned and filtered (see the module docstring)."""
    import polars as pl

    spec = cfg.field_spec
    text_columns = _text_columns(spec)
    several = len(refs) > 1
    # NUL and other C0/C1 control characters (but tab, LF, CR) never reach the cleaned text; counted.
    controls = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
    control_chars = 0
    as_read = df["tokens"] if cfg.reader.tagged else None
    for column in text_columns:
        per_doc = df[column].str.count_matches(controls)
        found = int(per_doc.sum() or 0)
        control_chars += found
        if found:  # rewrite only the documents that hold one, not the whole column
            rows = (per_doc > 0).arg_true()
            df = df.with_columns(df[column].scatter(rows, df[column].gather(rows).str.replace_all(controls, "")))
    where = ["source"] if several else []  # one file: its name is added to the tables at the end
    misaligned = []
    if cfg.reader.tagged:  # word by word (control characters are no spaces: removing them moved no word boundary)
        words, problem = clean_words(df["tokens"], cfg.clean, as_read)
        bad = problem.is_not_null()
        df = df.with_columns(words)
        misaligned.append(df.filter(bad).select(*where, "locator", pl.lit("alignment_changed").alias("reason"),
                                                ("tokens: " + problem.filter(bad)).alias("detail")))
        df = df.filter(~bad)
    else:
        df = df.with_columns(clean_expr(c, cfg.clean).alias(c) for c in text_columns)
    df = df.with_columns(pl.lit(None, dtype=pl.Utf8).alias("lang"))  # filled by the language-id filter
    if spec is None:
        df, filtered = apply_filters(df, cfg.filters)
        drops = [filtered]
    else:
        df, drops = _filter_fields(df, spec, cfg.filters)
    drops = misaligned + drops
    dropped = pl.concat([d.select(*where, "locator", pl.lit("filter").alias("stage"), "reason", "detail")
                         for d in drops])

    key = text_columns[0]
    if len(text_columns) > 1:  # exact dedup keys on every text field: md5 of them joined by U+001F
        key = "_hash_key"
        df = df.with_columns(pl.concat_str(list(text_columns), separator=SEP).alias(key))
    if several:
        digests = {r.name: r.digest for r in refs}  # per row only for this chunk's identity hashes
        df = df.with_columns(pl.col("source").replace_strict(digests, return_dtype=pl.Utf8).alias("source_digest"))
        df = add_identity(df, None, None, cfg.split, text=key).drop("source_digest")
        fixed = {r.name: f for r in refs if (f := cfg.split.split_for_source(r.name)) is not None}
        if fixed:  # e.g. a dedicated valid file: all its documents go to that split
            df = df.with_columns(pl.col("source").replace_strict(fixed, default=pl.col("split"),
                                                                 return_dtype=pl.Utf8).alias("split"))
    else:
        (ref,) = refs
        df = add_identity(df, ref.name, ref.digest, cfg.split, text=key)
        fixed_split = cfg.split.split_for_source(ref.name)
        if fixed_split is not None:  # e.g. a dedicated valid file: all its documents go to that split
            df = df.with_columns(pl.lit(fixed_split).alias("split"))
    if key == "_hash_key":
        df = df.drop(key)
    if spec is None:
        df = df.with_columns(pl.col("text").str.len_chars().cast(pl.Int64).alias("n_chars"),
                             word_counts(df["text"]).alias("n_words"))
    else:  # sums over the text fields
        df = df.with_columns(pl.sum_horizontal(pl.col(c).str.len_chars().cast(pl.Int64) for c in text_columns)
                             .alias("n_chars"),
                             pl.sum_horizontal(word_counts(df[c]) for c in text_columns).alias("n_words"))
    return df, dropped, control_chars


def _filter_fields(df, spec: FieldSpec, cfg):
    """(kept rows, drop frames) with every text field through the filters, one field after the other on the rows
    the earlier fields kept (so a record is dropped once, for its first failing field, the detail naming it), then
    the length ratio of the fields."""
    import polars as pl

    drops = []
    for column in spec.names:
        df, filtered = apply_filters(df, cfg, column)
        drops.append(filtered.with_columns((pl.lit(f"{column}: ") + pl.col("detail")).alias("detail")))
    if cfg.max_length_ratio is not None and len(spec.names) > 1:
        words = [word_counts(df[c]) for c in spec.names]
        longest = pl.max_horizontal(words)
        shortest = pl.min_horizontal(words)
        ratio = longest / pl.max_horizontal(shortest, pl.lit(1, pl.Int64))
        stats = df.select("locator", *(["source"] if "source" in df.columns else []),
                          ratio.alias("ratio"), longest.alias("hi"), shortest.alias("lo"))
        bad = stats["ratio"] > cfg.max_length_ratio
        drops.append(stats.filter(bad).select(
            *(["source"] if "source" in df.columns else []), "locator", pl.lit("length_ratio").alias("reason"),
            pl.format("words {} / {} = {} > {}", "hi", "lo", pl.col("ratio").round(3),
                      pl.lit(cfg.max_length_ratio)).alias("detail")))
        df = df.filter(~bad)
    return df, drops


def _build(out: Path, refs: list[SourceRef], cfg) -> dict[str, Any]:
    import polars as pl

    several = len(refs) > 1
    where = ["source"] if several else []
    spec = cfg.field_spec
    quarantine: list[dict[str, Any]] = []
    records_read: dict[str, int] = {}
    # Read, clean, filter and hash a chunk at a time: their intermediate columns (several times the text)
    # exist for one chunk, not the whole shard; the rows each chunk keeps are joined for dedup and GX.
    frames, dropped, control_chars = [], [], 0
    for chunk in _read(refs, cfg, quarantine, records_read):
        kept, drops, controls = _prepare(chunk, refs, cfg)
        del chunk
        frames.append(kept)
        dropped.append(drops)
        control_chars += controls
    df = pl.concat(frames)
    del frames

    if cfg.dedup.exact:
        from corpusforge.tasks.corpus.dedup import exact_duplicates

        labels = spec.label_names if spec is not None else ()
        first, dups = exact_duplicates(df, within="source" if several else None, compare=labels)
        if labels:  # the same texts under another label than the first's: not a copy, a conflict
            dropped.append(dups.select(*where, "locator", pl.lit("dedup").alias("stage"),
                                       pl.when("conflict").then(pl.lit("conflicting_label")).otherwise(pl.lit("exact"))
                                       .alias("reason"), conflict_detail(labels)))
        else:
            dropped.append(_drops(dups, "dedup", "exact", "duplicate_of=" + pl.col("duplicate_of"), where))
        df = df.filter(first)

    if not several:
        df = df.with_columns(pl.lit(refs[0].name).alias("source"))
    columns = columns_for(spec)
    df = df.select(columns)

    validation: dict[str, Any] = {"enabled": cfg.validate.enabled, "skipped": "no rows"}
    data_docs = None
    q = pl.DataFrame(quarantine, schema={**dict.fromkeys(DROPPED_SCHEMA, pl.Utf8), "raw": pl.Binary})
    if df.height:
        outcome = validate_frame(df.to_pandas(), cfg.validate, out, columns=columns,
                                 text_columns=_text_columns(spec), label_columns=spec.label_names if spec else (),
                                 tag_columns=spec.label_names if cfg.reader.tagged else ())
        validation, data_docs = outcome.summary, outcome.data_docs
        if outcome.row_failures:
            failures = pl.DataFrame({"doc_id": list(outcome.row_failures), "reason": list(outcome.row_failures.values())})
            bad = df.join(failures, on="doc_id", how="inner", maintain_order="left")
            q = pl.concat([q, bad.select(
                "source", "locator", pl.lit("validate").alias("stage"), "reason",
                ("doc_id=" + pl.col("doc_id")).alias("detail"),
                raw_expr(spec).str.slice(0, RAW_CAP).cast(pl.Binary).alias("raw"),
            )])
            df = df.join(failures, on="doc_id", how="anti", maintain_order="left")

    d = pl.concat(dropped)
    if not several:
        d = d.with_columns(pl.lit(refs[0].name).alias("source"))
    d = d.select(DROPPED_SCHEMA)
    # the kept rows as corpus.shard_compression says (read once by the merge; uncompressed, ~5x faster to write),
    # the small quarantine and drop tables always zstd
    if cfg.shard_compression == "none":
        df.write_parquet(out / "data.parquet", compression="uncompressed")
    else:
        df.write_parquet(out / "data.parquet", compression="zstd", compression_level=PARQUET_ZSTD_LEVEL)
    for frame, file in ((q, "quarantine.parquet"), (d, "dropped.parquet")):
        frame.write_parquet(out / file, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL)
    (out / "validation.json").write_text(json.dumps(validation, indent=2) + "\n", encoding="utf-8")

    accounting = accounting_from_tables(records_read, df, q, d)
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


def raw_expr(spec: FieldSpec | None):
    """A kept row as quarantine ``raw`` bytes: its text, or its fields as a JSON object."""
    import polars as pl

    return pl.col("text") if spec is None else pl.struct(list(spec.columns)).struct.json_encode()


def conflict_detail(labels: Sequence[str]):
    """The detail of a duplicate: ``duplicate_of=<doc id>``, and for a label conflict both records' labels."""
    import polars as pl

    both = [pl.format(f"{label}={{}} (first: {{}})", pl.col(label).cast(pl.Utf8), pl.col(f"first_{label}").cast(pl.Utf8))
            for label in labels]
    conflict = pl.format("duplicate_of={} ", "duplicate_of") + pl.concat_str(both, separator=", ")
    return pl.when("conflict").then(conflict).otherwise("duplicate_of=" + pl.col("duplicate_of")).alias("detail")


def _drops(frame, stage: str, reason: str, detail, where: Sequence[str] = ()):
    """Rows of ``frame`` as drop-table rows ([source,] locator, stage, reason, detail)."""
    import polars as pl

    detail = pl.lit(detail) if isinstance(detail, str) else detail
    return frame.select(*where, "locator", pl.lit(stage).alias("stage"), pl.lit(reason).alias("reason"),
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
        state.result(_sync=True)  # without it Prefect may hand back a coroutine (never raising) where it sees a loop
    except OSError:
        return True
    except Exception:  # noqa: BLE001 - anything else is not transient
        return False
    return False


def pack_label(pack: Sequence[dict[str, Any]]) -> str:
    """How a shard task is named in the Prefect UI: its file, or its first file and how many more."""
    return pack[0]["name"] if len(pack) == 1 else f"{pack[0]['name']} +{len(pack) - 1} files"


@prefect_task(name="corpus_shard", retries=2, retry_delay_seconds=1, retry_condition_fn=_retry_on_io_error,
              task_run_name="corpus_shard[{label}]")
def corpus_shard_task(sources: list[dict[str, Any]], corpus_config: dict[str, Any], store_root: str,
                      label: str = "") -> dict[str, Any]:
    from corpusforge.tasks.corpus.config import corpus_config_from_dict

    refs = [SourceRef(**s) for s in sources]
    try:
        result = build_corpus_shard(refs, corpus_config_from_dict(corpus_config), ArtifactStore(store_root))
    except MemoryError as exc:  # the bare MemoryError says nothing of where, or what to change
        size = sum(r.size or 0 for r in refs) / 1e6
        raise MemoryError(f"out of memory building corpus shard {pack_label(sources)} ({len(refs)} file(s), "
                          f"{size:.1f} MB on disk): lower runner.workers, corpus.shard_mb or "
                          "reader.max_document_bytes, or allow more memory") from exc
    log_step_outcome(result)
    return result.to_dict()


# What a shard task imports on first use. Imported once, in the flow's thread, before the shard tasks start
# (preload_libraries): worker threads that import a module at the same time queue on its import lock, and a
# thread that dies on MemoryError while it holds that lock (releasing it allocates) leaves the others waiting
# forever; under a memory limit a corpus run sat with 20 threads in futex waits (issue 30, item 7).
SHARD_IMPORTS = ("polars", "pyarrow", "pyarrow.parquet", "duckdb", "corpusforge.tasks.corpus.dedup")
GX_IMPORTS = ("pandas", "great_expectations", "great_expectations.util", "great_expectations.validator.v1_validator",
              "great_expectations.core.run_identifier", "great_expectations.execution_engine.pandas_execution_engine")


def preload_libraries(cfg) -> None:
    """Import what the shard tasks of corpus config ``cfg`` use, here (see SHARD_IMPORTS)."""
    import importlib

    for name in SHARD_IMPORTS + (GX_IMPORTS if cfg.validate.enabled else ()):
        importlib.import_module(name)
