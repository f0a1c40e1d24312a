"""Great Expectations validation of corpus shards.

The suite has two kinds of expectations:

- **dataset-level** (the schema, unique ``doc_id``): a failure means the reader or cleaner is broken, so
  the publish stops with :class:`DatasetValidationError` naming the expectation and an example;
- **row-level** (not-null text, length bounds): the failing rows go to quarantine with the
  expectation's name as the reason, and the rest of the shard is published.

Each validated shard gets Data Docs built into its artifact (``gx/uncommitted/data_docs/local_site``).
GX pages pull CSS/JS from CDNs, so offline they render unstyled but stay readable (STACK.md).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLUMNS = ("doc_id", "source", "locator", "split", "text", "n_chars", "n_words", "content_hash", "lang", "meta")
DATA_DOCS_SUBDIR = "gx/uncommitted/data_docs/local_site"
_GX_LOCK = threading.Lock()  # GX contexts share module-level state; one validation at a time per process.


@dataclass(frozen=True)
class ValidationConfig:
    """The default GX suite run on every published shard."""

    enabled: bool = field(default=True, metadata={"doc": "Run the GX suite on every shard."})
    min_chars: int = field(default=1, metadata={"doc": "Row-level: shortest allowed document, in characters."})
    max_chars: int = field(
        default=1_000_000, metadata={"doc": "Row-level: longest allowed document, in characters."}
    )
    data_docs: bool = field(default=True, metadata={"doc": "Build GX Data Docs into the shard artifact."})
    expectations: tuple[dict[str, Any], ...] = field(
        default=(),
        metadata={"doc": "Extra GX expectations: [{type: expect_column_values_to_be_in_set, kwargs: {column: lang, "
                         "value_set: [en, de]}, level: row|dataset}]. Row-level failures go to quarantine with the "
                         "expectation's name; dataset-level failures stop the publish."},
    )

    def __post_init__(self) -> None:
        for i, exp in enumerate(self.expectations):
            where = f"expectations[{i}]"
            if not isinstance(exp, dict) or not str(exp.get("type", "")).startswith("expect_"):
                raise ValueError(f"{where}: needs a 'type' naming a GX expectation, e.g. expect_column_values_to_not_be_null")
            unknown = set(exp) - {"type", "kwargs", "level"}
            if unknown:
                raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: type, kwargs, level")
            if exp.get("level", "row") not in ("row", "dataset"):
                raise ValueError(f"{where}.level: must be 'row' or 'dataset', got {exp.get('level')!r}")
            if not isinstance(exp.get("kwargs", {}), dict):
                raise ValueError(f"{where}.kwargs: must be a mapping of the expectation's arguments")
        if self.min_chars < 0:
            raise ValueError(f"min_chars: must be >= 0, got {self.min_chars}")
        if self.max_chars < max(self.min_chars, 1):
            raise ValueError(f"max_chars: must be >= min_chars ({self.min_chars}) and >= 1, got {self.max_chars}")


class DatasetValidationError(RuntimeError):
    """A dataset-level expectation failed: the shard must not be published."""


@dataclass
class ValidationOutcome:
    row_failures: dict[str, str]  # doc_id -> expectation name (first failing one)
    summary: dict[str, Any]
    data_docs: str | None = None


def _suite(gx, cfg: ValidationConfig):
    suite = gx.ExpectationSuite(name="corpus_shard")
    suite.add_expectation(gx.expectations.ExpectTableColumnsToMatchOrderedList(column_list=list(COLUMNS)))
    suite.add_expectation(gx.expectations.ExpectColumnValuesToBeUnique(column="doc_id"))
    suite.add_expectation(gx.expectations.ExpectColumnValuesToNotBeNull(column="doc_id"))
    suite.add_expectation(gx.expectations.ExpectColumnValuesToNotBeNull(column="text"))
    suite.add_expectation(
        gx.expectations.ExpectColumnValueLengthsToBeBetween(
            column="text", min_value=cfg.min_chars, max_value=cfg.max_chars
        )
    )
    for exp in cfg.expectations:
        class_name = "".join(part.capitalize() for part in exp["type"].split("_"))
        cls = getattr(gx.expectations, class_name, None)
        if cls is None:
            raise ValueError(f"validate.expectations: GX has no expectation {exp['type']!r}")
        try:
            suite.add_expectation(cls(**exp.get("kwargs", {})))
        except Exception as exc:  # pydantic validation of the expectation's arguments
            raise ValueError(f"validate.expectations: bad arguments for {exp['type']}: {exc}") from None
    return suite


DATASET_LEVEL = {
    "expect_table_columns_to_match_ordered_list",
    "expect_column_values_to_be_unique",
    "expect_column_values_to_not_be_null:doc_id",
}


def validate_frame(frame, cfg: ValidationConfig, out_dir: Path | None) -> ValidationOutcome:
    """Validate a pandas DataFrame of shard rows. Builds Data Docs under ``out_dir`` if given."""
    if not cfg.enabled:
        return ValidationOutcome({}, {"enabled": False})
    import great_expectations as gx

    with _GX_LOCK:
        if out_dir is not None and cfg.data_docs:
            context = gx.get_context(mode="file", project_root_dir=str(out_dir))
        else:
            context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = {"globally": False}
        source = context.data_sources.add_pandas("corpus")
        batch = source.add_dataframe_asset("shard").add_batch_definition_whole_dataframe("all")
        suite = context.suites.add(_suite(gx, cfg))
        definition = context.validation_definitions.add(gx.ValidationDefinition(data=batch, suite=suite, name="shard"))
        actions = [gx.checkpoint.UpdateDataDocsAction(name="data_docs")] if out_dir is not None and cfg.data_docs else []
        checkpoint = context.checkpoints.add(
            gx.Checkpoint(
                name="corpus_shard",
                validation_definitions=[definition],
                actions=actions,
                result_format={"result_format": "COMPLETE", "unexpected_index_column_names": ["doc_id"]},
            )
        )
        result = checkpoint.run(batch_parameters={"dataframe": frame})

    row_failures: dict[str, str] = {}
    expectations = []
    for run in result.run_results.values():
        for r in run.results:
            cfg_ = r.expectation_config
            kind = cfg_.type
            column = cfg_.kwargs.get("column")
            res = r.to_json_dict().get("result", {})
            expectations.append({"expectation": kind, "column": column, "success": bool(r.success),
                                 "unexpected_count": res.get("unexpected_count", 0)})
            if r.success:
                continue
            key = f"{kind}:{column}" if kind == "expect_column_values_to_not_be_null" else kind
            user_dataset_level = any(e["type"] == kind and e.get("level") == "dataset" for e in cfg.expectations)
            if key in DATASET_LEVEL or user_dataset_level or "unexpected_index_list" not in res:
                example = (res.get("unexpected_index_list") or res.get("details") or res.get("observed_value"))
                raise DatasetValidationError(
                    f"dataset-level expectation {kind} failed"
                    + (f" on column {column!r}" if column else "")
                    + f"; example: {json.dumps(example, default=str)[:300]}"
                )
            for row in res.get("unexpected_index_list") or []:
                row_failures.setdefault(str(row["doc_id"]), kind)
    docs = None
    if out_dir is not None and cfg.data_docs:
        index = out_dir / DATA_DOCS_SUBDIR / "index.html"
        docs = index.relative_to(out_dir).as_posix() if index.is_file() else None
    summary = {"enabled": True, "success": not row_failures, "expectations": expectations,
               "rows": int(len(frame)), "rows_failed": len(row_failures)}
    return ValidationOutcome(row_failures, summary, docs)
