"""How a stage declares itself: one :class:`Stage` in its package's ``__init__.py``.

The pipeline (run order and upstream wiring), config validation (the pipeline config's typed sections), tracking
(which files of which step go to MLflow, which models are registered) and the run report (plots) all read these
declarations from one registry, ``corpusforge.stages.STAGES``. Adding a stage is one package under ``tasks/``
plus one line there (docs: Internals, "Adding a stage").

Functions are named by import path ("module:function") so that reading the declarations (and validating a
config) imports no step module: only each stage's leaf ``config.py``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepOutputs:
    """What one step of a stage shows outside the store."""

    mlflow: tuple[str, ...] = ()  # files of the artifact logged to the step's MLflow run
    mlflow_dirs: tuple[tuple[str, str], ...] = ()  # (folder in the artifact, artifact path in MLflow)
    plots: tuple[tuple[str, str], ...] = ()  # (png in the artifact, caption) shown by the run report
    # "module:function(artifact_dir) -> list[str]": a few lines worth reading at once (an evaluation's query
    # answers), shown under the stage by the run's summary (CLI, --json "highlights") and its report
    highlights: str | None = None
    # "module:function(artifact_dir, scratch) -> [(caption, png)]": plots drawn for the run report (into scratch)
    report_plots: str | None = None
    # "module:function(artifact_dir, manifest) -> object": what ``Artifact.load()`` (the Python API) returns for an
    # artifact of this step, after the store checked its files against their digests
    loader: str | None = None
    # format -> "module:function(artifact_dir, manifest, out_dir) -> dict": ``corpusforge export ID --format F``
    # (raise corpusforge.tasks.stage.ExportError for a request the user can fix)
    exports: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Registers:
    """A step whose artifacts go to the MLflow model registry: ``wants(artifact_dir) -> bool`` says whether this
    one does, ``register(tracker, run_id, manifest, artifact_dir) -> dict`` registers it (both "module:function");
    ``what`` is how the run's summary names what was registered ("a pyfunc that translates")."""

    step: str
    wants: str
    register: str
    what: str = "a pyfunc"


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its YAML section and config class, where it sits, and what it runs and shows.

    ``task(upstream: dict, config: dict, store_root: str) -> dict | list[dict]`` is the Prefect task: it returns
    the StepResult dicts of the steps it ran, the stage's main output last. ``core(upstream: StepResult, config,
    store) -> StepResult | list[StepResult]`` is the pure function the task wraps; the planner runs it in
    lookup-only mode to answer a fully published run from the store. ``after`` names the stage whose main output
    it consumes (the only stage package it may import, with that one's own upstream). The corpus stage, the root,
    has ``after=None`` and is run by the pipeline itself (one task per source file, then a merge).

    A stage whose config declares artifact references (fields made with corpusforge.tasks.config.artifact_ref:
    ``ngram.tokenizer``, a checkpoint to start from) reads more than its upstream: its task also takes
    ``refs: dict[str, dict]`` and its core ``refs: dict[str, StepResult]`` (dotted field -> the artifact),
    which the pipeline and the planner resolve, and the core hands to run_step (they join the step's inputs)."""

    section: str
    config: type
    doc: str
    task: str | None
    core: str | None
    after: str | None = "corpus"
    live: bool = False  # the task takes ``on_metrics`` (a trainer callback): its curves go to MLflow as they happen
    steps: Mapping[str, StepOutputs] = field(default_factory=dict)
    registers: Registers | None = None
    # "module:function(config, upstream_config) -> upstream_config": what this stage's config needs of its upstream
    # stage's, applied when the pipeline config is validated (an encoder family adds the mask role its model derives
    # an id from to the run's tokenizer, unless the tokenizer section sets it). None: nothing.
    adjust_upstream: str | None = None
    # the corpus splits the stage evaluates on: at least one must get documents (a fraction > 0, or a source pinned
    # to it by corpus.split.by_source), checked on the source names before a run starts (else the corpus and the
    # steps before this one run first, and this one fails last); ``needs_split_hint`` is how to give one
    needs_split: tuple[str, ...] = ()
    needs_split_hint: str = ""

    def references(self) -> list[tuple[str, tuple[str, ...]]]:
        """(dotted config field, allowed steps) of each artifact reference its config declares."""
        from corpusforge.tasks.config import reference_fields

        return reference_fields(self.config)

    def from_dict(self, data: Mapping[str, Any] | None) -> Any:
        from corpusforge.tasks.config import from_dict

        return from_dict(self.config, data, self.section)


class ExportError(ValueError):
    """A bad export request (the output exists, a library is missing, nothing to export): one line for the user."""


def load(ref: str) -> Any:
    """The object a "module:attribute" reference names."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
