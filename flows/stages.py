"""The stage registry: every stage a pipeline can run, in run order. One line per stage.

Each entry is the :class:`~corpusforge.tasks.stage.Stage` its package declares in ``tasks/<stage>/__init__.py``.
The pipeline config (its typed sections), the flow and the planner (run order, upstream wiring), tracking
(MLflow files, registered models), the run report (plots) and the CLI read this tuple; nothing else lists stages.
Reading it imports each stage's leaf config module only, never a step module.
"""

from __future__ import annotations

from corpusforge.tasks import corpus, embeddings, lm, ngram, tokenizer
from corpusforge.tasks.stage import Stage, load  # noqa: F401 - load: re-exported for the flows

STAGES: tuple[Stage, ...] = (
    corpus.STAGE,
    tokenizer.STAGE,
    embeddings.STAGE,
    ngram.STAGE,
    lm.STAGE,
)


def stage_for(section: str) -> Stage | None:
    return next((s for s in STAGES if s.section == section), None)


def downstream() -> tuple[Stage, ...]:
    """The stages after the corpus stage (the root), in run order."""
    return tuple(s for s in STAGES if s.after is not None)


def _check(stages: tuple[Stage, ...]) -> None:
    seen: set[str] = set()
    for s in stages:
        if s.section in seen:
            raise RuntimeError(f"stage {s.section!r} is registered twice")
        if s.after is not None and s.after not in seen:
            raise RuntimeError(f"stage {s.section!r} runs after {s.after!r}, which is not registered before it")
        seen.add(s.section)
    if [s.section for s in stages if s.after is None] != ["corpus"]:
        raise RuntimeError("exactly one root stage, corpus, comes first")


_check(STAGES)
