"""The stage registry: every stage a pipeline can run, in run order. One line per stage.

Each entry is the :class:`~corpusforge.tasks.stage.Stage` its package declares in ``tasks/<stage>/__init__.py``.
The pipeline config (its typed sections), the flow and the planner (run order, upstream wiring), tracking
(MLflow files, registered models), the run report (plots) and the CLI read this tuple; nothing else lists stages.
Reading it imports each stage's leaf config module only, never a step module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# one line: tests/flows/test_adding_a_*.py add a stage to this import the way a developer would
from corpusforge.tasks import classify, corpus, embeddings, lm, ngram, post_training, qa, sentence_embeddings, seq2seq, tag, tokenizer
from corpusforge.tasks.config import ConfigError, is_artifact_id, references
from corpusforge.tasks.stage import Stage

STAGES: tuple[Stage, ...] = (
    corpus.STAGE,
    tokenizer.STAGE,
    embeddings.STAGE,
    ngram.STAGE,
    lm.STAGE,
    seq2seq.STAGE,
    classify.STAGE,
    tag.STAGE,
    qa.STAGE,
    sentence_embeddings.STAGE,
    post_training.STAGE,
)


def stage_for(section: str) -> Stage | None:
    return next((s for s in STAGES if s.section == section), None)


def section_steps() -> dict[str, tuple[str, ...]]:
    """Each section -> the steps its stage makes (``corpus`` -> corpus_shard, corpus): what a section-prefixed
    config key (``corpus.split.valid``, as ``--set`` takes it) filters on in ``artifacts find --config``."""
    return {s.section: tuple(s.steps) for s in STAGES}


def step_outputs(step: str):
    """What the stage that makes ``step`` declares about it (corpusforge.tasks.stage.StepOutputs), or None."""
    return next((s.steps[step] for s in STAGES if step in s.steps), None)


def export_formats() -> dict[str, tuple[str, ...]]:
    """format -> the steps whose artifacts it exports, from the stages' declarations."""
    found: dict[str, list[str]] = {}
    for s in STAGES:
        for step, out in s.steps.items():
            for fmt in out.exports:
                found.setdefault(fmt, []).append(step)
    return {fmt: tuple(steps) for fmt, steps in sorted(found.items())}


def downstream() -> tuple[Stage, ...]:
    """The stages after the corpus stage (the root), in run order."""
    return tuple(s for s in STAGES if s.after is not None)


def check_references(sections: Mapping[str, Any], stages: tuple[Stage, ...] = STAGES) -> None:
    """The artifact references of a pipeline's sections (section -> its config, None when absent) that name a
    section: it must be a stage of this pipeline that makes an artifact of an allowed step and runs before the
    one that reads it (stages run in registry order). A ConfigError (one line) otherwise. References by id are
    resolved against the store when the run starts (corpusforge.tasks.step.resolve_references)."""
    order = {s.section: i for i, s in enumerate(stages)}
    for stage in stages:
        cfg = sections.get(stage.section)
        if cfg is None:
            continue
        for dotted, value, steps in references(cfg):
            if is_artifact_id(value):
                continue
            where, what = f"{stage.section}.{dotted}", " or ".join(steps)
            target = next((s for s in stages if s.section == value), None)
            if target is None:
                raise ConfigError(f"{where}: {value!r} is neither a section of a pipeline ("
                                  + ", ".join(order) + ") nor an artifact id (at least 4 hex characters)")
            if not set(steps) & set(target.steps):
                raise ConfigError(f"{where}: the {value} section makes no {what} artifact (it makes "
                                  + ", ".join(target.steps) + ")")
            if value == stage.section:
                raise ConfigError(f"{where}: a stage cannot read an artifact of its own section in the same run; "
                                  f"give the id of a published {what} artifact")
            if order[value] > order[stage.section]:
                raise ConfigError(f"{where}: the {value} section runs after {stage.section}, not before it "
                                  f"(stages run in the order of flows/stages.py); give the id of a published "
                                  f"{what} artifact instead")
            if sections.get(value) is None:
                raise ConfigError(f"{where}: names the {value} section, which this pipeline does not have; add "
                                  f"one, or give the id of a published {what} artifact")


def _check(stages: tuple[Stage, ...]) -> None:
    seen: set[str] = set()
    made = {step for s in stages for step in s.steps}
    for s in stages:
        if s.section in seen:
            raise RuntimeError(f"stage {s.section!r} is registered twice")
        if s.after is not None and s.after not in seen:
            raise RuntimeError(f"stage {s.section!r} runs after {s.after!r}, which is not registered before it")
        if is_artifact_id(s.section):  # a reference that is all hex means an artifact id
            raise RuntimeError(f"stage {s.section!r}: a section name cannot be all hex digits")
        for dotted, steps in s.references():
            if s.after is None:
                raise RuntimeError(f"stage {s.section!r}: the root stage cannot reference artifacts ({dotted})")
            unknown = sorted(set(steps) - made)
            if unknown:
                raise RuntimeError(f"stage {s.section!r}: {dotted} references step {unknown[0]!r}, which no "
                                   "registered stage makes")
        seen.add(s.section)
    if [s.section for s in stages if s.after is None] != ["corpus"]:
        raise RuntimeError("exactly one root stage, corpus, comes first")


_check(STAGES)
