"""Great Expectations validation of corpus shards.

The suite has two kinds of expectations:

- **dataset-level** (the schema, unique ``doc_id``): a failure means the reader or cleaner is broken, so
  the publish stops with :class:`DatasetValidationError` naming the expectation and an example;
- **row-level** (not-null text, length bounds): the failing rows go to quarantine with the
  expectation's name as the reason, and the rest of the shard is published.

A corpus with named fields (:func:`columns_for`) has them as columns in place of ``text``: every text field gets
the not-null and length expectations (``min_chars``/``max_chars`` per field), every label the not-null one. A tagged
corpus (``reader.tags``: ``tokens`` and tag fields, each a sentence's words or tags joined by one space) also gets,
per tag field, ``expect_column_pair_values_to_be_equal`` on two counts GX is given beside the rows (``_n_tokens``
and ``_n_<field>``: the words and the tags of each row, split on single spaces): a row whose tags do not match its
words one to one is quarantined under that name, as every row-level failure is.

GX is paid for once per process, not per shard: it is imported once, each thread builds one ephemeral
context with one validation definition per validation config (suite, pandas data source, batch
definition) and runs it for every shard that thread validates, the shard's frame passed as the batch.
It runs the definition the way ``ValidationDefinition.run`` does (GX's v1 ``Validator`` on the batch,
then the same ``meta``: validation id, run id and time, batch parameters) without the two things that
call adds per run: re-checking the context's stores that the definition, suite and data source are
unchanged (we built them and nothing else touches this context) and storing the result in the
context's in-memory results store, which we would only delete again. A checkpoint around it, as before,
added another freshness check: together ~25% of a small shard's validation. Contexts are
per thread, not shared: a GX context keeps the batch it is validating in its execution engine, so two
shards validated at once in one context could see each other's data; with one context per thread the
thread runner validates two shards at the same time without a lock. The expectations are GX's own,
which run vectorized on the pandas frame.

Each validated shard gets Data Docs: GX's validation-results page, rendered from the result with GX's
own renderer and page view (``ValidationResultsPageRenderer`` + ``DefaultJinjaPageView``, what a Data
Docs site build does for each result) into ``gx/uncommitted/data_docs/local_site/index.html``. A full
site build per shard cost ~0.2 s and copied ~4.2 MB of static assets into every shard; the page inlines
GX's styles, and the CSS, JS, fonts and logo it took from CDNs come from one folder per store,
``<store>/_static/data-docs/<version>/`` (``corpusforge.tasks.data_docs_assets``), so it looks the same offline.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLUMNS = ("doc_id", "source", "locator", "split", "text", "n_chars", "n_words", "content_hash", "lang", "meta")


def columns_for(spec) -> tuple[str, ...]:
    """A corpus's columns: :data:`COLUMNS`, or with named fields (a storage.records.FieldSpec) the text fields
    and then the labels where ``text`` is (no ``text`` column unless a field is called so)."""
    if spec is None:
        return COLUMNS
    at = COLUMNS.index("text")
    return (*COLUMNS[:at], *spec.columns, *COLUMNS[at + 1:])

DATA_DOCS_SUBDIR = "gx/uncommitted/data_docs/local_site"
RESULT_FORMAT = {"result_format": "COMPLETE", "unexpected_index_column_names": ["doc_id"]}
_CONTEXT_LOCK = threading.Lock()  # get_context() sets GX's process-wide "current project": one at a time
_PER_THREAD = threading.local()  # this thread's context and its validation definitions, by config
_PAGE_VIEW = None  # GX's Data Docs page view, its templates compiled (write_data_docs)
_PAGE_VIEW_LOCK = threading.Lock()


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


def count_column(column: str) -> str:
    """The column GX is given beside a tagged corpus's rows: how many space-separated items ``column`` holds."""
    return f"_n_{column}"


def _suite(gx, cfg: ValidationConfig, name: str = "corpus_shard", columns: tuple[str, ...] = COLUMNS,
           text_columns: tuple[str, ...] = ("text",), label_columns: tuple[str, ...] = (),
           tag_columns: tuple[str, ...] = ()):
    suite = gx.ExpectationSuite(name=name)
    suite.add_expectation(gx.expectations.ExpectTableColumnsToMatchOrderedList(column_list=list(columns)))
    suite.add_expectation(gx.expectations.ExpectColumnValuesToBeUnique(column="doc_id"))
    suite.add_expectation(gx.expectations.ExpectColumnValuesToNotBeNull(column="doc_id"))
    for text in text_columns:
        suite.add_expectation(gx.expectations.ExpectColumnValuesToNotBeNull(column=text))
        suite.add_expectation(
            gx.expectations.ExpectColumnValueLengthsToBeBetween(
                column=text, min_value=cfg.min_chars, max_value=cfg.max_chars
            )
        )
    for label in label_columns:
        suite.add_expectation(gx.expectations.ExpectColumnValuesToNotBeNull(column=label))
    for tag in tag_columns:  # one tag per word
        suite.add_expectation(gx.expectations.ExpectColumnPairValuesToBeEqual(
            column_A=count_column("tokens"), column_B=count_column(tag)))
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


def _no_batch_fingerprint() -> None:
    """GX's pandas engine labels every in-memory batch under 1 GB with a fingerprint: it hashes every cell
    (``pd.util.hash_pandas_object``) and pickles a frame it cannot hash. That was ~80% of a shard's
    validation (0.24 of 0.30 CPU-s for 150,000 rows) and only shows as ``pandas_data_fingerprint`` on the Data
    Docs page; the shard's content is identified by its manifest (sha256 of each file, a content hash per
    document). GX reads the threshold as a module constant: 0 turns the fingerprint off."""
    from great_expectations.execution_engine import pandas_execution_engine

    pandas_execution_engine.HASH_THRESHOLD = 0


def validation_for(cfg: ValidationConfig, columns: tuple[str, ...] = COLUMNS, text_columns: tuple[str, ...] = ("text",),
                   label_columns: tuple[str, ...] = (), tag_columns: tuple[str, ...] = ()):
    """This thread's GX validation definition for ``cfg`` (and the shard's columns): built on first use (context,
    data source, suite, validation definition), then reused for every shard this thread validates."""
    import great_expectations as gx

    shape = {} if columns == COLUMNS else {"columns": columns, "text": text_columns, "labels": label_columns,
                                           **({"tags": tag_columns} if tag_columns else {})}
    key = json.dumps({"min_chars": cfg.min_chars, "max_chars": cfg.max_chars, "expectations": cfg.expectations,
                      **shape}, sort_keys=True, default=str)
    cache = getattr(_PER_THREAD, "definitions", None)
    if cache is None:
        _no_batch_fingerprint()
        with _CONTEXT_LOCK:
            context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = {"globally": False}
        _PER_THREAD.context, _PER_THREAD.definitions = context, {}
        cache = _PER_THREAD.definitions
    if key not in cache:
        context = _PER_THREAD.context
        name = f"corpus_shard_{len(cache)}"
        suite = context.suites.add(_suite(gx, cfg, name, columns, text_columns, label_columns, tag_columns))
        batch = (context.data_sources.add_pandas(name).add_dataframe_asset("shard")
                 .add_batch_definition_whole_dataframe("all"))
        cache[key] = context.validation_definitions.add(gx.ValidationDefinition(data=batch, suite=suite, name=name))
    return cache[key]


def run_validation(definition, frame):
    """``definition.run(batch_parameters={"dataframe": frame}, result_format=RESULT_FORMAT)`` minus its
    store checks and its stored copy of the result (see the module docstring); the same result and meta."""
    import datetime

    from great_expectations.constants import DATAFRAME_REPLACEMENT_STR
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.validator.v1_validator import Validator

    validator = Validator(batch_definition=definition.batch_definition, batch_parameters={"dataframe": frame},
                          result_format=RESULT_FORMAT)
    result = validator.validate_expectation_suite(definition.suite)
    run_id = RunIdentifier(run_time=datetime.datetime.now(datetime.UTC))
    result.meta.update({"validation_id": definition.id, "checkpoint_id": None, "run_id": run_id,
                        "validation_time": run_id.run_time, "batch_parameters": {"dataframe": DATAFRAME_REPLACEMENT_STR}})
    return result


def validate_frame(frame, cfg: ValidationConfig, out_dir: Path | None,
                   static_root: Path | None = None, *, columns: tuple[str, ...] = COLUMNS,
                   text_columns: tuple[str, ...] = ("text",), label_columns: tuple[str, ...] = (),
                   tag_columns: tuple[str, ...] = ()) -> ValidationOutcome:
    """Validate a pandas DataFrame of shard rows (``columns``, of which ``text_columns`` hold text and
    ``label_columns`` labels; ``tag_columns``: a tagged corpus's tag fields, each checked to hold one tag per word
    of ``tokens``). Writes the Data Docs page under ``out_dir`` if given (its assets under ``static_root``, see
    :func:`write_data_docs`)."""
    if not cfg.enabled:
        return ValidationOutcome({}, {"enabled": False})
    from great_expectations.util import convert_to_json_serializable

    if tag_columns:  # the counts the pair expectations compare, given to GX only (never published)
        counted = ("tokens", *tag_columns)
        frame = frame.assign(**{count_column(c): frame[c].str.count(" ") + 1 for c in counted})
        columns = (*columns, *(count_column(c) for c in counted))
    result = run_validation(validation_for(cfg, tuple(columns), tuple(text_columns), tuple(label_columns),
                                           tuple(tag_columns)), frame)
    docs = None
    if out_dir is not None and cfg.data_docs:
        docs = write_data_docs(result, out_dir, static_root)

    row_failures: dict[str, str] = {}
    expectations = []
    for r in result.results:
        cfg_ = r.expectation_config
        kind = cfg_.type
        column = cfg_.kwargs.get("column") or cfg_.kwargs.get("column_B")  # a pair: the tag field's count
        res = convert_to_json_serializable(r.result or {})  # what r.to_json_dict()["result"] holds
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
    summary = {"enabled": True, "success": not row_failures, "expectations": expectations,
               "rows": int(len(frame)), "rows_failed": len(row_failures)}
    return ValidationOutcome(row_failures, summary, docs)


def default_static_root(out_dir: Path) -> Path:
    """Where a page written under ``out_dir`` finds its assets: the store root for a store artifact
    (``<root>/<step>/<artifact>``, the build's temp dir sits at the same depth; the store's ``.locks``
    marks the root), else the folder holding ``out_dir``."""
    out_dir = Path(out_dir)
    root = out_dir.parent.parent
    return root if (root / ".locks").is_dir() else out_dir.parent


def write_data_docs(validation_result, out_dir: Path, static_root: Path | None = None) -> str:
    """GX's Data Docs page for one validation result, rendered as a site build renders it; returns its
    path relative to ``out_dir``. Its CDN assets are replaced by the store's local copies under
    ``static_root`` (default :func:`default_static_root`), referred to by a relative path."""
    import os

    from great_expectations.render.renderer import ValidationResultsPageRenderer
    from great_expectations.render.view import DefaultJinjaPageView

    from corpusforge.tasks.data_docs_assets import ensure_assets, localize

    # One page view per process, shared by the threads: a view owns a jinja Environment, which compiles GX's
    # templates on first use and caches them; a new view per shard (or per thread) recompiled them (~0.045 of
    # ~0.06 CPU-s per page). The local server compiles them once before it forks (warm_validation).
    global _PAGE_VIEW
    document = ValidationResultsPageRenderer().render(validation_result)
    with _PAGE_VIEW_LOCK:
        if _PAGE_VIEW is None:
            _PAGE_VIEW = DefaultJinjaPageView()
        page = _PAGE_VIEW.render(document)
    index = out_dir / DATA_DOCS_SUBDIR / "index.html"
    index.parent.mkdir(parents=True, exist_ok=True)
    assets = ensure_assets(default_static_root(out_dir) if static_root is None else static_root)
    prefix = Path(os.path.relpath(assets, index.parent)).as_posix()
    index.write_text(localize(page, prefix), encoding="utf-8")
    return index.relative_to(out_dir).as_posix()


def warm_validation(scratch: Path) -> None:
    """Validate a three-row frame and write its Data Docs page under ``scratch``: what a process pays once,
    before its first shard (GX's lazily built expectation and metric machinery, the page's compiled
    templates). The local server calls it before it forks its commands. The frame's strings are Python
    objects (pandas' Arrow-backed strings would start Arrow's thread pool), and tqdm's monitor thread, which
    GX's first validation starts, is turned off: the server must stay single-threaded to fork."""
    import pandas as pd
    import tqdm

    tqdm.tqdm.monitor_interval = 0  # a thread that only tunes progress bars' refresh; GX's are off
    rows = {column: [f"{column} {i}" for i in range(3)] for column in COLUMNS}
    rows.update(n_chars=[7, 7, 7], n_words=[2, 2, 2])
    strings = {column: object for column in COLUMNS if column not in ("n_chars", "n_words")}
    out = Path(scratch) / "warm" / "shard"
    out.mkdir(parents=True, exist_ok=True)
    validate_frame(pd.DataFrame(rows).astype(strings), ValidationConfig(), out, static_root=Path(scratch))
