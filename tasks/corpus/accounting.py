"""Record accounting: every record read ends in exactly one bucket.

``records_read = kept + quarantined + filtered + deduplicated``, overall and per source. The counts are
derived from the published tables themselves (kept rows, quarantine rows, dropped rows), and
``records_read`` is counted independently while reading; :func:`build_accounting` refuses to return
a table whose sum does not hold, so an inconsistent artifact is never published.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

DROP_STAGE_BUCKET = {"filter": "filtered", "dedup": "deduplicated"}


class AccountingError(RuntimeError):
    pass


def empty_counts() -> dict[str, Any]:
    return {"records_read": 0, "kept": 0, "quarantined": {}, "filtered": {}, "deduplicated": {}}


def _bump(counts: dict[str, Any], bucket: str, reason: str | None, n: int = 1) -> None:
    if bucket == "kept":
        counts["kept"] += n
    else:
        counts[bucket][reason] = counts[bucket].get(reason, 0) + n


def total(counts: Mapping[str, Any]) -> int:
    return counts["kept"] + sum(
        sum(counts[b].values()) for b in ("quarantined", "filtered", "deduplicated")
    )


def build_accounting(
    records_read: Mapping[str, int],
    kept_sources: Iterable[str],
    quarantined: Iterable[tuple[str, str]],
    dropped: Iterable[tuple[str, str, str]],
) -> dict[str, Any]:
    """Accounting from per-source read counts and the (source[, stage], reason) of every non-kept row."""
    return _tally(
        records_read,
        Counter(kept_sources).items(),
        [(*key, n) for key, n in Counter(quarantined).items()],
        [(*key, n) for key, n in Counter(dropped).items()],
    )


def accounting_from_tables(records_read: Mapping[str, int], kept, quarantine, dropped) -> dict[str, Any]:
    """The same accounting, counted with polars group-bys over the published tables (kept rows with
    ``source``; quarantine with source/reason; dropped with source/stage/reason)."""
    import polars as pl

    per_source = dict(kept.group_by("source").agg(pl.len()).rows()) if kept.height else {}
    return accounting_from_counts(records_read, per_source, quarantine, dropped)


def accounting_from_counts(records_read: Mapping[str, int], kept: Mapping[str, int], quarantine, dropped
                           ) -> dict[str, Any]:
    """The accounting from the kept rows counted per source (``{source: n}``; the corpus merge counts them while
    it writes the split files, without holding them) and group-bys over the quarantine (source, reason) and
    dropped (source, stage, reason) tables."""
    import polars as pl

    def counts(frame, keys: list[str]) -> list[tuple]:
        return frame.group_by(keys).agg(pl.len().alias("n")).sort(keys).rows() if frame.height else []

    return _tally(records_read, sorted(kept.items()), counts(quarantine, ["source", "reason"]),
                  counts(dropped, ["source", "stage", "reason"]))


def _tally(records_read: Mapping[str, int], kept: Iterable[tuple[str, int]],
           quarantined: Iterable[tuple[str, str, int]], dropped: Iterable[tuple[str, str, str, int]]) -> dict[str, Any]:
    per_source: dict[str, dict[str, Any]] = {s: empty_counts() for s in records_read}

    def source_counts(source: str) -> dict[str, Any]:
        if source not in per_source:
            raise AccountingError(f"row from source {source!r}, which was never read")
        return per_source[source]

    for source, n in kept:
        _bump(source_counts(source), "kept", None, n)
    for source, reason, n in quarantined:
        _bump(source_counts(source), "quarantined", reason, n)
    for source, stage, reason, n in dropped:
        if stage not in DROP_STAGE_BUCKET:
            raise AccountingError(f"unknown drop stage {stage!r} (expected one of {sorted(DROP_STAGE_BUCKET)})")
        _bump(source_counts(source), DROP_STAGE_BUCKET[stage], reason, n)
    return _finish(per_source, records_read)


def _finish(per_source: dict[str, dict[str, Any]], records_read: Mapping[str, int]) -> dict[str, Any]:
    """Check every source's sum and add the overall totals."""
    overall = empty_counts()
    for source, counts in per_source.items():
        counts["records_read"] = int(records_read[source])
        if total(counts) != counts["records_read"]:
            raise AccountingError(
                f"{source}: read {counts['records_read']} records but accounted for {total(counts)} "
                f"(kept {counts['kept']}, quarantined {counts['quarantined']}, filtered {counts['filtered']}, "
                f"deduplicated {counts['deduplicated']})"
            )
        overall["records_read"] += counts["records_read"]
        overall["kept"] += counts["kept"]
        for bucket in ("quarantined", "filtered", "deduplicated"):
            for reason, n in counts[bucket].items():
                _bump(overall, bucket, reason, n)
    overall["per_source"] = dict(sorted(per_source.items()))
    return overall

