"""The stages a pipeline can run after the corpus stage, in run order.

Each stage is a YAML section whose config dataclass lives next to its task, a Prefect task
``task(upstream: dict, config: dict, store_root: str) -> dict | list[dict]`` that returns the
StepResult dict(s) of the steps it ran (the last one is the stage's main output), and the pure core
that task wraps, ``core(upstream: StepResult, config, store) -> StepResult | list[StepResult]``. The
planner runs the cores in lookup-only mode to answer a fully published run from the store. ``after``
names the section whose main output the stage consumes. All are named by import path so that importing
this module (and validating a config) stays cheap.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Stage:
    section: str
    config: str  # "module:ConfigClass"
    task: str  # "module:task_function"
    core: str  # "module:core_function" (what the task wraps)
    after: str = "corpus"
    live: bool = False  # the task takes ``on_metrics`` (a trainer callback) and its curves go to MLflow live


# Filled in as stages land. Order is run order; a stage may only consume one listed before it.
STAGES: tuple[Stage, ...] = (
    Stage("tokenizer", "corpusforge.tasks.tokenizer:TokenizerConfig", "corpusforge.tasks.tokenizer:tokenizer_task",
          "corpusforge.tasks.tokenizer:run_tokenizer_stage", after="corpus"),
    Stage("embeddings", "corpusforge.tasks.embeddings:EmbeddingsConfig", "corpusforge.tasks.embeddings:embeddings_task",
          "corpusforge.tasks.embeddings:build_embeddings", after="corpus"),
    Stage("ngram", "corpusforge.tasks.ngram:NgramConfig", "corpusforge.tasks.ngram:ngram_task", "corpusforge.tasks.ngram:build_ngram", after="corpus"),
    Stage("lm", "corpusforge.tasks.lm:LMConfig", "corpusforge.tasks.lm:lm_task", "corpusforge.tasks.lm:build_lm", after="tokenizer", live=True),
)
KNOWN_SECTIONS = ("tokenizer", "ngram", "embeddings", "lm")


def load(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def stage_for(section: str) -> Stage | None:
    return next((s for s in STAGES if s.section == section), None)
