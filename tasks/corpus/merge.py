"""Step ``corpus``: merge shard artifacts into one corpus with train/valid/test Parquet files.

Its inputs are the shard ids in source order, so one changed source file changes one shard id (the shard
that holds it: a file of its own or a pack of small files) and this merge id, while every other shard is
reused. The merge removes exact duplicates *across* shards
(first occurrence in source order wins), writes ``train/valid/test.parquet``, concatenates the
quarantine and drop tables, sums the accounting (re-checked against the tables) and draws the
document-length histogram.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpusforge.storage.aligned import aligned_file, check_aligned_counts
from corpusforge.storage.readers import SourceError, discover_sources
from corpusforge.storage.store import ArtifactStore, read_manifest, resolve_recorded, store_relative
from corpusforge.tasks.config import ConfigError, identity
from corpusforge.tasks.corpus.accounting import accounting_from_counts
from corpusforge.tasks.corpus.config import AlignedSource, CorpusConfig, corpus_config_from_dict
from corpusforge.tasks.corpus.near_dedup import NearDedupConfig, near_duplicates_streamed
from corpusforge.tasks.corpus.shard import (SourceRef, aligned_ref, conflict_detail, digest_source, drop_examples,
                                            pack_sources, shard_sources)
from corpusforge.tasks.corpus.split import SPLITS
from corpusforge.tasks.orchestration import prefect_task
from corpusforge.tasks.step import StepResult, artifact_input, log_step_outcome, run_step

CORPUS_STEP = "corpus"
CORPUS_VERSION = 2  # 2: optional MinHash near-dedup
LIBRARIES = ("polars", "pyarrow", "matplotlib")
# zstd level 1 writes ~1.7x faster than polars' default (3) for files ~8% larger
PARQUET_ZSTD_LEVEL = 1



def resolve_sources(cfg: CorpusConfig, base_dir: Path | None = None) -> list[SourceRef]:
    """Discover and hash every source file. Relative paths resolve against ``base_dir`` (the config's dir)."""
    return discover(cfg, base_dir)[0]


def resolve_packs(cfg: CorpusConfig, base_dir: Path | None = None, store: ArtifactStore | None = None
                  ) -> list[list[SourceRef]]:
    """The shards a run would build: the sources in corpus order (after those of the latest corpus of this name
    in ``store``, if given), packed by ``cfg.shard_mb``."""
    return packs_in_corpus_order(resolve_sources(cfg, base_dir), cfg, store)


def packs_in_corpus_order(refs: list[SourceRef], cfg: CorpusConfig, store: ArtifactStore | None
                          ) -> list[list[SourceRef]]:
    """``refs`` put in corpus order (:func:`order_like_previous`, when a store is given), then packed into shards
    by ``cfg.shard_mb``: what the flow, the planner and :func:`resolve_packs` build."""
    return pack_sources(order_like_previous(refs, store, cfg.name) if store is not None else refs, cfg.shard_mb)


def discover(cfg: CorpusConfig, base_dir: Path | None = None) -> tuple[list[SourceRef], list[str]]:
    """(hashed source files, names of hidden or glob-excluded entries that were skipped). Line-aligned files
    (``{fields: {de: a.de, en: a.en}}``) are one source each, in their place among the others."""
    if not cfg.sources:
        raise ConfigError("corpus.sources: give at least one file or directory")

    def absolute(p: str) -> str:
        return p if os.path.isabs(p) or base_dir is None else str(base_dir / p)

    refs: list[SourceRef] = []
    skipped: list[str] = []
    # runs of plain paths are discovered together, as when every source was one (their names, order and globs)
    runs: list[list[str] | AlignedSource] = []
    for source in cfg.sources:
        if isinstance(source, AlignedSource):
            runs.append(source)
        elif runs and isinstance(runs[-1], list):
            runs[-1].append(absolute(source))
        else:
            runs.append([absolute(source)])
    for run in runs:
        if isinstance(run, AlignedSource):
            refs.append(_aligned_ref(run, absolute))
            continue
        discovery = discover_sources(run, cfg.reader.include, cfg.reader.exclude)
        skipped += discovery.skipped_hidden + discovery.skipped_excluded
        refs += [_digest_once(sf) for sf in discovery.files]
    skipped = sorted(skipped)
    if not refs:
        hint = f" (skipped hidden or excluded entries: {', '.join(skipped[:5])})" if skipped else ""
        raise ConfigError(f"corpus.sources: no files found in {', '.join(map(str, cfg.sources))}{hint}")
    if len(runs) > 1:  # discover_sources checks the names of one run
        seen: dict[str, SourceRef] = {}
        for ref in refs:
            if ref.name in seen:
                raise SourceError(f"two sources would both be named {ref.name!r} ({seen[ref.name].path} and "
                                  f"{ref.path}); pass their common parent directory instead")
            seen[ref.name] = ref
    return refs, skipped


def _aligned_ref(source: AlignedSource, absolute) -> SourceRef:
    """The hashed source of line-aligned files (tasks.corpus.shard.aligned_ref); each file named by its base name."""
    files, plain = {}, {}
    for key, path in source.fields.items():
        full = Path(absolute(path)).expanduser()
        if not full.exists() and not full.is_symlink():
            raise SourceError(f"source {path!r} (line-aligned, {key}) does not exist")
        plain[key] = aligned_file(full, full.name)
        files[key] = _digest_once(plain[key])
    _counts_once(plain)  # before any work: shifted pairs would all be wrong (issue 44)
    return aligned_ref(files)


_COUNTS: set[tuple] = set()


def _counts_once(files) -> None:
    """``check_aligned_counts``, remembered for this process while the files' stats are unchanged (the planner
    checks before the flow starts; the flow's discovery must not count again)."""
    try:
        stats = {k: os.stat(sf.path) for k, sf in files.items()}
        key = tuple((k, str(sf.path), sf.refused, stats[k].st_size, stats[k].st_mtime_ns, stats[k].st_ctime_ns,
                     stats[k].st_ino) for k, sf in files.items())
    except OSError:
        check_aligned_counts(files)
        return
    if key not in _COUNTS:
        check_aligned_counts(files)
        _COUNTS.add(key)


_DIGESTS: dict[tuple, SourceRef] = {}


def _digest_once(sf) -> SourceRef:
    """``digest_source``, remembered for this process while the file's stat is unchanged: the planner hashes
    every source before the flow starts, and the flow's discovery must not read the whole corpus again."""
    try:
        st = os.stat(sf.path)
        key = (str(sf.path), sf.name, sf.refused, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    except OSError:
        return digest_source(sf)
    if key not in _DIGESTS:
        _DIGESTS[key] = digest_source(sf)
    return _DIGESTS[key]


def build_corpus(
    shards: list[StepResult], cfg: CorpusConfig, store: ArtifactStore, skipped: Sequence[str] = ()
) -> StepResult:
    """Pure core of the merge step. Entries skipped by discovery (hidden or excluded by a glob) are recorded in its config,
    so the manifest always says what was not read (and a new hidden file is visible as a new id)."""
    if not cfg.allow_empty:
        _refuse_empty(shards, cfg)
    config = identity(cfg, "corpus")  # name, dedup, split: the fields that declare the merge step
    if cfg.dedup.near.enabled:
        # MinHash shingles are hashed with polars' `hash`, which polars keeps stable only within a version:
        # a new polars gives a new id rather than different bytes under an old one
        from importlib.metadata import version

        config["near_dedup_hash"] = f"polars {version('polars')} Series.hash words, splitmix64 shingles"
    if skipped:
        config["skipped"] = sorted(skipped)
    return run_step(
        store,
        step=CORPUS_STEP,
        version=CORPUS_VERSION,
        name=cfg.name,
        config=config,
        inputs=[artifact_input(s) for s in shards],
        build=lambda out: _merge(out, shards, cfg, store),
        libraries=LIBRARIES,
    )


def _refuse_empty(shards: list[StepResult], cfg: CorpusConfig) -> None:
    """Sources that yield no document at all (a PNG alone, only broken records) are an error, not an empty
    corpus published with exit 0: the user most likely pointed at the wrong files."""
    read = kept = 0
    reasons: dict[str, int] = {}
    for s in shards:
        acc = (read_manifest(Path(s.path)) or {}).get("accounting") or {}
        read, kept = read + int(acc.get("records_read", 0)), kept + int(acc.get("kept", 0))
        for outcome in ("quarantined", "filtered", "deduplicated"):
            for reason, n in (acc.get(outcome) or {}).items():
                reasons[f"{outcome} {reason}"] = reasons.get(f"{outcome} {reason}", 0) + int(n)
    if kept > 0:
        return
    why = f"{read:,} record(s) read" + "".join(f", {n:,} {r}" for r, n in sorted(reasons.items()))
    raise SourceError(f"corpus {cfg.name!r}: its sources yielded no document ({len(shards)} source file(s): {why}); "
                      f"`corpusforge artifacts show <shard id>` says why each record was not kept. Set "
                      f"corpus.allow_empty: true to publish an empty corpus anyway")


def _merge(out: Path, shards: list[StepResult], cfg: CorpusConfig, store: ArtifactStore) -> dict[str, Any]:
    """Bounded memory: the texts and ids of the whole corpus are never in memory at once. What to keep is
    decided on 16 bytes per document (each content hash as two 64-bit integers) plus, with near-dedup, the
    MinHash band keys (computed shard by shard); then one pass over the shards, one at a time, appends each
    shard's kept rows to the split files, counts them, and picks the locators and doc ids that the drop rows
    name."""
    import polars as pl

    manifests = [read_manifest(Path(s.path)) for s in shards]
    records_read: dict[str, int] = {}
    for shard, manifest in zip(shards, manifests):
        if manifest is None:
            raise FileNotFoundError(f"shard artifact {shard.id[:12]} vanished from {shard.path}")
        records_read.update({k: v["records_read"] for k, v in manifest["accounting"]["per_source"].items()})

    paths = [Path(s.path) for s in shards]

    def load(file: str) -> pl.DataFrame:
        return pl.concat([pl.read_parquet(p / file) for p in paths], how="vertical")

    quarantine, dropped = load("quarantine.parquet"), load("dropped.parquet")
    sizes = [_rows(p) for p in paths]
    n_docs = sum(sizes)
    keep = pl.repeat(True, n_docs, dtype=pl.Boolean, eager=True).alias("keep")
    empty = pl.Series([], dtype=pl.Int64)  # corpus row numbers are Int64 throughout (whatever polars' index type)
    exact_rows = exact_of = near_rows = near_of = empty
    if cfg.dedup.exact and n_docs:
        keep, exact_rows, exact_of = _exact_across_shards(paths)
    spec = cfg.field_spec
    text_columns = spec.names if spec is not None else ("text",)
    labels = spec.label_names if spec is not None else ()
    if cfg.dedup.near.enabled and keep.sum() > 1:
        near_rows, near_of = _near_duplicates(paths, sizes, keep, cfg.dedup.near, text_columns)
        keep = keep.scatter(near_rows, False)

    kept = _write_splits(out, paths, sizes, keep, pl.concat([exact_rows, near_rows]), pl.concat([exact_of, near_of]),
                         labels)

    def drop_rows(rows, of, reason: str, note: str):
        frame = (pl.DataFrame({"row": rows, "of": of})
                 .join(kept.picked, on="row", how="left", maintain_order="left")
                 .join(kept.doc_ids.rename({"row": "of", **{c: f"first_{c}" for c in labels}}), on="of", how="left",
                       maintain_order="left"))
        if labels and reason == "exact":  # the same texts under another label: conflicting_label (shard.py)
            conflict = pl.any_horizontal(pl.col(c).ne_missing(pl.col(f"first_{c}")) for c in labels)
            return frame.with_columns(conflict.alias("conflict"), pl.col("doc_id").alias("duplicate_of")).select(
                "source", "locator", pl.lit("dedup").alias("stage"),
                pl.when("conflict").then(pl.lit("conflicting_label")).otherwise(pl.lit(reason)).alias("reason"),
                (conflict_detail(labels) + note).alias("detail"))
        return frame.select("source", "locator", pl.lit("dedup").alias("stage"), pl.lit(reason).alias("reason"),
                            ("duplicate_of=" + pl.col("doc_id") + note).alias("detail"))

    dropped = pl.concat([dropped, drop_rows(exact_rows, exact_of, "exact", " (across files)"),
                         drop_rows(near_rows, near_of, "near", " (MinHash)")], how="vertical")
    _write_table(quarantine, out / "quarantine.parquet")
    _write_table(dropped, out / "dropped.parquet")

    accounting = accounting_from_counts(records_read, kept.per_source, quarantine, dropped)
    from corpusforge.tasks.report import plot_doc_lengths, plot_reasons, write_corpus_report, write_data_docs_index

    plot_doc_lengths(kept.lengths, out / "doc_lengths.png", title=f"{cfg.name}: document length")
    plot_reasons(accounting, out / "reasons.png", title=f"{cfg.name}: records not kept, by reason")
    write_data_docs_index(out, shards, manifests, accounting)
    metrics: dict[str, Any] = {"docs": kept.docs, "chars": kept.chars, "words": kept.words,
                               "sources": len(records_read)}
    for split in SPLITS:
        metrics[f"docs_{split}"] = kept.per_split.get(split, 0)
    examples = drop_examples(quarantine, dropped)
    report = write_corpus_report(out, cfg.name, accounting, metrics, examples)
    label_counts = {}
    if labels:  # class counts, for a labelled corpus (in the manifest and the report)
        label_counts = _label_counts(kept.label_values, labels, per_word=cfg.reader.tagged)
        with report.open("a", encoding="utf-8") as fh:
            fh.write(_labels_markdown(label_counts))
    return {
        "accounting": accounting,
        "drop_examples": examples,
        "report": "report.md",
        "metrics": metrics,
        "shards": [_shard_entry(s, m, Path(out).resolve().parent.parent) for s, m in zip(shards, manifests)],
        "data_docs": "data_docs.html",
        "splits": {split: f"{split}.parquet" for split in SPLITS},
        **({"named_fields": {"text": list(text_columns), "labels": list(labels),
                             **({"tags": list(labels)} if cfg.reader.tagged else {})}} if spec is not None else {}),
        **({"label_counts": label_counts} if labels else {}),
    }


def _label_counts(values, labels: Sequence[str], per_word: bool = False) -> dict[str, dict[str, dict[str, int]]]:
    """{label: {split: {value: count}}} over the kept rows (values as JSON keys: strings), most frequent first.
    ``per_word``: a tagged corpus's tag fields, each row's tags joined by spaces, counted tag by tag (per word)."""
    import polars as pl

    out: dict[str, dict[str, dict[str, int]]] = {}
    for label in labels:
        each = values.select("split", pl.col(label).str.split(" ")).explode(label) if per_word else values
        counts = (each.group_by("split", label).len().sort(["split", "len", label], descending=[False, True, False])
                  if each.height else pl.DataFrame())
        per: dict[str, dict[str, int]] = {}
        for split in SPLITS:
            rows = counts.filter(pl.col("split") == split) if counts.height else counts
            per[split] = {str(v): int(n) for v, n in zip(rows[label], rows["len"])} if rows.height else {}
        out[label] = per
    return out


def _labels_markdown(counts: dict[str, dict[str, dict[str, int]]]) -> str:
    lines = ["", "## Labels", ""]
    for label, per in counts.items():
        values = list(dict.fromkeys(v for split in SPLITS for v in per[split]))
        lines += [f"`{label}`: {len(values):,} distinct value(s).", "", "| value | " + " | ".join(SPLITS) + " |",
                  "|---|" + "---:|" * len(SPLITS)]
        lines += [f"| {v} | " + " | ".join(f"{per[s].get(v, 0):,}" for s in SPLITS) + " |" for v in values[:100]]
        if len(values) > 100:
            lines.append(f"| ... {len(values) - 100} more | " + " | ".join("" for _ in SPLITS) + " |")
        lines.append("")
    return "\n".join(lines)


def _shard_entry(shard: StepResult, manifest: dict[str, Any], root: Path) -> dict[str, Any]:
    """The merge manifest's line for a shard: its id and path, its first source (``source``, as when every
    shard was one file) and, for a pack of several files, all of them (``sources``). The path is store-relative
    (``corpus_shard/<dir>``; :func:`shard_dirs` resolves it, older absolute ones too), so a moved or copied store
    finds its shards and the manifest holds no machine-specific path."""
    names = shard_sources(manifest)
    return {"id": shard.id, "source": names[0], **({"sources": names} if len(names) > 1 else {}),
            "path": store_relative(shard.path, root)}


def shard_dirs(corpus_dir: str | os.PathLike[str], manifest: dict[str, Any]) -> list[Path]:
    """The folders of a corpus's shards, in corpus order, as its manifest records them (store-relative, or
    absolute in corpora built before issue 35), found in the corpus's own store."""
    return [resolve_recorded(entry["path"], Path(corpus_dir)) for entry in manifest.get("shards", [])]


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path / "data.parquet").metadata.num_rows


def _shard_slices(paths: list[Path], sizes: list[int], keep):
    """(shard path, corpus row number of its first row, this shard's slice of the corpus-wide ``keep`` mask),
    in corpus order (``sizes``: each shard's row count)."""
    at = 0
    for path, n in zip(paths, sizes):
        yield path, at, keep.slice(at, n)
        at += n


def _exact_across_shards(paths: list[Path]):
    """(keep: True at the first occurrence of each content hash in corpus order; the corpus rows of the other
    ones; for each, the row of its first occurrence). Read shard by shard, each md5 content hash held as two
    64-bit integers: 16 bytes per document (its hex string and its doc id were ~90 in memory)."""
    import polars as pl

    def halves(path: Path) -> pl.DataFrame:
        h = pl.read_parquet(path / "data.parquet", columns=["content_hash"])["content_hash"]
        return pl.DataFrame({"hi": h.str.slice(0, 16).str.to_integer(base=16, dtype=pl.UInt64),
                             "lo": h.str.slice(16, 16).str.to_integer(base=16, dtype=pl.UInt64)})

    keys = pl.concat([halves(p) for p in paths], how="vertical").with_row_index("row")
    first = keys.select(pl.struct("hi", "lo").is_first_distinct())[:, 0].alias("keep")
    dups = keys.filter(~first)
    originals = keys.filter(first & pl.col("hi").is_in(dups["hi"].implode())).rename({"row": "of"})
    dups = dups.join(originals, on=["hi", "lo"], how="left", maintain_order="left")
    return first, dups["row"].cast(pl.Int64), dups["of"].cast(pl.Int64)


def _near_duplicates(paths: list[Path], sizes: list[int], keep, cfg: NearDedupConfig,
                     text_columns: Sequence[str] = ("text",)):
    """(rows that near-duplicate an earlier kept row, the row each duplicates), as corpus-wide row numbers.
    Signatures are computed shard by shard from the kept rows' texts and only their LSH band keys stay in
    memory; a second pass recomputes the signatures of the rows that have a candidate. Named fields: the text
    fields of a record joined by a line break are its text (so two pairs near-duplicate when their sides,
    taken together, do)."""
    import polars as pl

    def texts():
        for path, _, mask in _shard_slices(paths, sizes, keep):
            frame = pl.read_parquet(path / "data.parquet", columns=list(text_columns)).filter(mask)
            yield frame.select(pl.concat_str(list(text_columns), separator="\n").alias("text"))["text"]

    kept_rows = keep.arg_true()
    target = near_duplicates_streamed(texts, kept_rows.len(), cfg)
    hit = pl.Series(target >= 0)
    return kept_rows.filter(hit).cast(pl.Int64), kept_rows.gather(pl.Series(target[target >= 0])).cast(pl.Int64)


@dataclass
class _Kept:
    """What the merge needs to know about the rows it wrote (counted while writing, not held)."""

    docs: int = 0
    chars: int = 0
    words: int = 0
    per_source: dict[str, int] = field(default_factory=dict)
    per_split: dict[str, int] = field(default_factory=dict)
    lengths: Any = None  # n_chars and split of every kept row, for the length histogram (9 bytes a row)
    label_values: Any = None  # split and labels of every kept row, for the class counts (labelled corpora only)
    picked: Any = None  # row, source, locator of the rows the drop table names
    doc_ids: Any = None  # row, doc_id of the rows they duplicate


def _write_splits(out: Path, paths: list[Path], sizes: list[int], keep, drop_rows, of_rows,
                  labels: Sequence[str] = ()) -> _Kept:
    """``train/valid/test.parquet``: each shard's kept rows appended in corpus order, one shard in memory.
    Counts the kept rows, and picks the source and locator of ``drop_rows`` and the doc_id of ``of_rows``
    (corpus row numbers) on the way, with the ``labels`` of both."""
    import polars as pl
    import pyarrow.parquet as pq

    kept = _Kept()
    lengths, picked, doc_ids, label_values = [], [], [], []
    drop_rows, of_rows = drop_rows.sort(), of_rows.unique().sort()
    writers: dict[str, pq.ParquetWriter] = {}
    try:
        for path, at, mask in _shard_slices(paths, sizes, keep):
            data = pl.read_parquet(path / "data.parquet")
            for wanted, columns, into in ((drop_rows, ["source", "locator", *labels], picked),
                                          (of_rows, ["doc_id", *labels], doc_ids)):
                local = _local(wanted, at, data.height)
                if local.len():
                    into.append(data[columns].gather(local).with_columns((local.cast(pl.Int64) + at).alias("row")))
            rows = data.filter(mask)
            del data
            kept.docs += rows.height
            kept.chars += int(rows["n_chars"].sum() or 0)
            kept.words += int(rows["n_words"].sum() or 0)
            for source, n in rows.group_by("source").len().iter_rows():
                kept.per_source[source] = kept.per_source.get(source, 0) + n
            lengths.append(rows.select(pl.col("n_chars").cast(pl.Int64), pl.col("split").cast(pl.Enum(SPLITS))))
            if labels:
                label_values.append(rows.select(pl.col("split").cast(pl.Enum(SPLITS)), *labels))
            for split in SPLITS:
                part = rows.filter(pl.col("split") == split).to_arrow()
                if split not in writers:
                    writers[split] = pq.ParquetWriter(out / f"{split}.parquet", part.schema, compression="zstd")
                if part.num_rows:
                    kept.per_split[split] = kept.per_split.get(split, 0) + part.num_rows
                    writers[split].write_table(part)
    finally:
        for writer in writers.values():
            writer.close()
    kept.lengths = (pl.concat(lengths, how="vertical") if lengths
                    else pl.DataFrame(schema={"n_chars": pl.Int64, "split": pl.Enum(SPLITS)}))
    label_schema = {c: pl.read_parquet_schema(paths[0] / "data.parquet")[c] for c in labels} if paths and labels else {}
    picked_schema = {"source": pl.Utf8, "locator": pl.Utf8, **label_schema, "row": pl.Int64}
    kept.picked = pl.concat(picked, how="vertical") if picked else pl.DataFrame(schema=picked_schema)
    kept.doc_ids = (pl.concat(doc_ids, how="vertical") if doc_ids
                    else pl.DataFrame(schema={"doc_id": pl.Utf8, **label_schema, "row": pl.Int64}))
    if labels:
        kept.label_values = (pl.concat(label_values, how="vertical") if label_values
                             else pl.DataFrame(schema={"split": pl.Enum(SPLITS), **label_schema}))
    return kept


def _local(rows, at: int, n: int):
    """The entries of sorted corpus row numbers ``rows`` that fall in ``[at, at + n)``, as row numbers from ``at``."""
    import polars as pl

    lo, hi = rows.search_sorted(at), rows.search_sorted(at + n)
    return (rows.slice(lo, hi - lo) - at).cast(pl.UInt32)


def _write_table(frame, path: Path) -> None:
    frame.write_parquet(path, compression="zstd", compression_level=PARQUET_ZSTD_LEVEL)


@prefect_task(name="discover_sources", retries=2, retry_delay_seconds=1)
def discover_sources_task(corpus_config: dict[str, Any], base_dir: str | None, store_root: str | None = None
                          ) -> dict[str, Any]:
    """Discover and hash the sources, put them in corpus order (:func:`order_like_previous`) and pack them into
    shards (``packs``: lists of sources)."""
    from prefect import get_run_logger

    from corpusforge.tasks.corpus.shard import preload_libraries

    cfg = corpus_config_from_dict(corpus_config)
    preload_libraries(cfg)  # in this one thread, before the shard tasks start on theirs
    refs, hidden = discover(cfg, Path(base_dir) if base_dir else None)
    if hidden:
        get_run_logger().info("skipped %d hidden entr%s: %s", len(hidden), "y" if len(hidden) == 1 else "ies",
                              ", ".join(hidden[:10]))
    packs = packs_in_corpus_order(refs, cfg, ArtifactStore(store_root) if store_root is not None else None)
    return {"packs": [[r.to_dict() for r in p] for p in packs], "skipped": hidden}


def order_like_previous(refs: list[SourceRef], store: ArtifactStore, name: str) -> list[SourceRef]:
    """Put sources that the latest published corpus of this name already had first, in its order,
    then new sources in name order. With dedup keeping the first occurrence, documents that were
    already published stay and a newly arrived copy is the one dropped, whatever its file name; and new
    files are packed after the old ones, so the old shards are reused."""
    from corpusforge.storage.catalog import Catalog

    latest = Catalog(store).find(step=CORPUS_STEP, name=name, latest=True)
    if not latest:
        return list(refs)
    previous = [n for entry in latest[0].manifest.get("shards", []) for n in entry.get("sources") or [entry["source"]]]
    rank = {source: i for i, source in enumerate(previous)}
    return sorted(refs, key=lambda r: (rank.get(r.name, len(rank)), r.name))


@prefect_task(name="corpus")
def corpus_task(shards: list[dict[str, Any]], corpus_config: dict[str, Any], store_root: str,
                skipped: list[str] | None = None) -> dict[str, Any]:
    """The merge of ``shards``, already in corpus order (the sources were ordered before they were packed)."""
    cfg, store = corpus_config_from_dict(corpus_config), ArtifactStore(store_root)
    result = build_corpus([StepResult.from_dict(s) for s in shards], cfg, store, skipped or ())
    log_step_outcome(result)
    return result.to_dict()


def describe(result: StepResult) -> dict[str, Any]:
    """What the CLI prints about a finished corpus: its manifest's headline numbers."""
    manifest = read_manifest(Path(result.path)) or {}
    return {**result.to_dict(), "accounting": manifest.get("accounting"), "metrics": manifest.get("metrics"),
            "data_docs": str(Path(result.path) / "data_docs.html")}

