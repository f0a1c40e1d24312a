"""Plan a pipeline run without orchestrating it: which steps are already published, and the run's summary.

:func:`plan_pipeline` discovers and hashes the sources, then runs the same stage functions as the flow
inside :func:`corpusforge.tasks.step.lookup_only`, so every artifact id is derived by the code that would build it.
When every step is published (and every model that should be registered is known to be), the run is
answered from the store by :func:`answer_from_store`: no Prefect flow run, no MLflow run, no heavy import.
Otherwise the flow runs as usual and recomputes only the missing steps.

No Prefect and no MLflow are imported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpusforge.pipeline_config import PipelineConfig
from corpusforge.stages import STAGES
from corpusforge.tasks.config import ConfigError
from corpusforge.tasks.stage import Stage, load
from corpusforge.storage.store import ArtifactStore, read_manifest
from corpusforge.storage.tracking import RegistryLedger, default_tracking_uri
from corpusforge.tasks.corpus.merge import build_corpus, describe, discover, packs_in_corpus_order
from corpusforge.tasks.corpus.shard import SourceRef, build_corpus_shard
from corpusforge.tasks.step import NotPublished, StepResult, lookup_only, resolve_references
from corpusforge.tasks.track import unregistered


@dataclass
class Plan:
    """What a run of ``config`` would do against the store right now."""

    sources: list[SourceRef]
    skipped: list[str]
    results: list[StepResult] = field(default_factory=list)  # published steps found, in run order
    outputs: dict[str, StepResult] = field(default_factory=dict)  # each stage's main output
    missing: NotPublished | None = None  # the first step that is not published

    @property
    def complete(self) -> bool:
        return self.missing is None


def run_stage_core(stage: Stage, upstream: StepResult, stage_cfg: Any, store: ArtifactStore,
                   ran: Mapping[str, Sequence[StepResult]]) -> list[StepResult]:
    """The stage's core on its upstream's main output, with its artifact references resolved (``ran``: the steps
    each earlier stage of this run ran)."""
    extra = {"refs": stage_references(stage, stage_cfg, store, ran)} if stage.references() else {}
    returned = load(stage.core)(upstream, stage_cfg, store, **extra)
    return list(returned) if isinstance(returned, (list, tuple)) else [returned]


def stage_references(stage: Stage, stage_cfg: Any, store: ArtifactStore,
                     ran: Mapping[str, Sequence[StepResult]] | None = None) -> dict[str, StepResult]:
    """The artifacts the stage's config references (dotted field -> artifact): a section of this run from
    ``ran``, an id or prefix from the store. The flow and the planner both resolve them here."""
    return resolve_references(stage_cfg, store, section=stage.section, sections=ran)


def check_store_references(cfg: PipelineConfig, store: ArtifactStore, base_dir: Path | None) -> None:
    """Resolve every reference by id now, so that an unknown id or an artifact of the wrong step is a config
    error before anything runs (section references were checked with the config, and resolve as the run goes)."""
    for stage, stage_cfg in cfg.stages(base_dir):
        if stage.references():
            resolve_references(stage_cfg, store, section=stage.section, ids_only=True)


def check_held_out_splits(cfg: PipelineConfig, source_names: Sequence[str]) -> None:
    """A stage that evaluates on a held-out split (Stage.needs_split) in a run whose corpus cannot hold one out
    (its fractions 0, no source pinned to it by corpus.split.by_source) is a ConfigError now, one line naming the
    split and how to give one, not a traceback after the corpus and the steps before the stage have run."""
    split = cfg.corpus.split
    possible = split.possible_splits(source_names)
    for stage in STAGES:
        if not stage.needs_split or getattr(cfg, stage.section) is None or possible & set(stage.needs_split):
            continue
        wanted = stage.needs_split[0] + "".join(f" (or {s})" for s in stage.needs_split[1:])
        zero = [s for s in stage.needs_split if not getattr(split, s) > 0]
        why = [f"corpus.split.{' and '.join(zero)} {'is' if len(zero) == 1 else 'are'} 0"] if zero else []
        if len(zero) < len(stage.needs_split):
            why.append("corpus.split.by_source pins every source to another split")
        else:
            globs = [glob for glob, to in split.by_source.items() if to in stage.needs_split]
            names = ", ".join(list(source_names)[:3]) + (", ..." if len(source_names) > 3 else "")
            why.append(f"no source ({names}) matches a corpus.split.by_source glob for it"
                       + (f" ({', '.join(globs)})" if globs else ""))
        hint = stage.needs_split_hint or f"set corpus.split.{stage.needs_split[0]}=0.1"
        raise ConfigError(f"{stage.section}: needs a {wanted} split to evaluate on, but the corpus holds none out: "
                          f"{', and '.join(why)}; {hint}")


def plan_pipeline(cfg: PipelineConfig, store_root: Path, base_dir: Path | None) -> Plan:
    """Discover the sources (a missing or empty source is a ConfigError here, before anything starts) and look
    up every step in run order, stopping at the first one that is not published."""
    refs, skipped = discover(cfg.corpus, base_dir)
    check_held_out_splits(cfg, [r.name for r in refs])
    plan = Plan(sources=refs, skipped=skipped)
    store = ArtifactStore(store_root)
    check_store_references(cfg, store, base_dir)
    try:
        with lookup_only():
            packs = packs_in_corpus_order(refs, cfg.corpus, store)
            shards = [build_corpus_shard(pack, cfg.corpus, store) for pack in packs]
            plan.results += shards
            corpus = build_corpus(shards, cfg.corpus, store, skipped)
            plan.results.append(corpus)
            plan.outputs["corpus"] = corpus
            ran: dict[str, list[StepResult]] = {"corpus": [*shards, corpus]}
            for stage, stage_cfg in cfg.stages(base_dir):
                ran[stage.section] = run_stage_core(stage, plan.outputs[stage.after], stage_cfg, store, ran)
                plan.results += ran[stage.section]
                plan.outputs[stage.section] = ran[stage.section][-1]
    except NotPublished as exc:
        plan.missing = exc
    return plan


def describe_output(result: StepResult) -> dict[str, Any]:
    manifest = read_manifest(Path(result.path)) or {}
    return {**result.to_dict(), "metrics": manifest.get("metrics", {})}


def highlights(results: list[StepResult]) -> dict[str, list[str]]:
    """stage section -> the lines its steps' declared ``highlights`` give (an embeddings evaluation's queries)."""
    hooks = {step: (s.section, out.highlights) for s in STAGES for step, out in s.steps.items() if out.highlights}
    found: dict[str, list[str]] = {}
    for r in results:
        if r.step in hooks:
            section, ref = hooks[r.step]
            found.setdefault(section, []).extend(load(ref)(Path(r.path)))
    return found


def pipeline_summary(cfg: PipelineConfig, store_root: Path, results: list[StepResult],
                     outputs: dict[str, StepResult], *, tracking_uri: str | None, experiment_id: str | None,
                     run_id: str | None, counts: dict[str, Any]) -> dict[str, Any]:
    """What a pipeline run reports (the CLI's table and ``--json``), whether it ran the flow or not."""
    return {
        "pipeline": cfg.name,
        "store": str(store_root),
        "steps": [r.to_dict() for r in results],
        "corpus": describe(outputs["corpus"]),
        "stages": {name: describe_output(r) for name, r in outputs.items() if name != "corpus"},
        "highlights": highlights(results),
        "tracking_uri": tracking_uri,
        "mlflow_experiment_id": experiment_id,
        "mlflow_run_id": run_id,
        **counts,
    }


def _registered(cfg: PipelineConfig, store_root: Path, plan: Plan) -> list[dict[str, str]] | None:
    """The registry entries of the plan's registered models (generating lms), or None when one is not known to be registered
    under the current tracking URI (the flow then registers it, as it always has)."""
    if not (cfg.tracking.enabled and cfg.tracking.register_models):
        return []
    registrars = {s.registers.step: load(s.registers.wants) for s in STAGES if s.registers is not None}
    ledger = RegistryLedger(store_root)
    uri = default_tracking_uri(store_root)
    found = []
    for r in plan.results:
        if r.step not in registrars or not registrars[r.step](Path(r.path)):
            continue
        entry = ledger.get(uri, r.id)
        if entry is None:
            return None
        found.append(entry)
    return found


def answer_from_store(cfg: PipelineConfig, store_root: Path, plan: Plan) -> dict[str, Any] | None:
    """The summary of a run whose every step is published, or None when the flow still has work to do."""
    if not plan.complete:
        return None
    registered = _registered(cfg, store_root, plan)
    if registered is None:
        return None
    counts = {"steps_computed": 0, "steps_reused": len(plan.results), "reused_ids": [r.id for r in plan.results],
              "registered_models": registered,
              "not_registered": unregistered(plan.results, STAGES, tracking=cfg.tracking.enabled,
                                             register=cfg.tracking.register_models)}
    summary = pipeline_summary(cfg, store_root, plan.results, plan.outputs,
                               tracking_uri=default_tracking_uri(store_root) if cfg.tracking.enabled else None,
                               experiment_id=None, run_id=None, counts=counts)
    summary["answered_from_store"] = True
    remember_run(cfg, store_root, plan.results)
    return summary


def remember_run(cfg: PipelineConfig, store_root: Path, results: list[StepResult]) -> None:
    """Record the artifacts this run used or made as its pipeline's latest run (corpusforge.storage.gc.record_run:
    gc keeps them). A store that cannot take the record (read-only, an object store's cache) is said, not fatal:
    the run's artifacts are published either way."""
    import logging

    from corpusforge.storage.gc import record_run

    try:
        record_run(Path(store_root), cfg.name, [r.id for r in results])
    except OSError as exc:
        logging.getLogger("corpusforge").warning("could not record pipeline %s's latest run in %s (%s): "
                                                 "`artifacts gc` will not know which artifacts it used",
                                                 cfg.name, store_root, exc)
