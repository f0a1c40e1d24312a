"""The pipeline flow: every stage present in the config, composed from tasks. No heavy logic here.

Stages so far: ``corpus`` (discover -> one ``corpus_shard`` task per source file, run on the task
runner -> ``corpus`` merge). Later stages (tokenizer, embeddings, ngram, lm) plug in after it.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.futures import as_completed
from prefect.utilities.annotations import unmapped

from corpusforge.pipeline_config import PipelineConfig, RunnerConfig, TrackingConfig, pipeline_config_from_dict  # noqa: F401
from corpusforge.plan import pipeline_summary
from corpusforge.stages import load
from corpusforge.storage.store import ArtifactStore, resolve_store_root
from corpusforge.storage.tracking import open_tracker
from corpusforge.tasks.config import ConfigError, to_dict
from corpusforge.tasks.corpus import corpus_task, discover_sources_task
from corpusforge.tasks.corpus_shard import corpus_shard_task
from corpusforge.tasks.step import StepResult
from corpusforge.tasks.track import LiveRuns, track_results


def make_task_runner(cfg: RunnerConfig):
    """The Prefect task runner for ``runner.kind``. Shard tasks get and return only ids, paths and small dicts,
    so any runner works; with dask/ray the workers must see the store and the sources at the same paths."""
    workers = cfg.workers or os.cpu_count() or 1
    if cfg.kind == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=workers)
    if cfg.kind == "processes":
        from prefect.task_runners import ProcessPoolTaskRunner

        return ProcessPoolTaskRunner(max_workers=workers)
    try:
        if cfg.kind == "dask":
            from prefect_dask import DaskTaskRunner

            if cfg.address:
                return DaskTaskRunner(address=cfg.address)
            # A local cluster for this run: one single-threaded worker process per worker, closed when the flow
            # ends. Everything binds 127.0.0.1 on free ports (the scheduler's HTTP server too: without bokeh it
            # serves only health and metrics), and distributed's INFO chatter stays out of the command's output.
            if logging.getLogger("distributed").getEffectiveLevel() < logging.WARNING:
                logging.getLogger("distributed").setLevel(logging.WARNING)
            return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs={
                "n_workers": workers, "threads_per_worker": 1, "processes": True, "host": "127.0.0.1",
                "dashboard_address": "127.0.0.1:0", "silence_logs": logging.WARNING})
        from prefect_ray import RayTaskRunner

        if cfg.address:
            # prefect-ray starts a new local instance for "auto"; Ray's own ray.init(address="auto") joins the
            # running cluster (or fails), which is what "auto" means.
            return RayTaskRunner(init_kwargs={"address": "auto"}) if cfg.address == "auto" else RayTaskRunner(
                address=cfg.address)
        # "local": always a new instance for this run (never a running one found through /tmp/ray), with `workers`
        # CPUs and no dashboard. Ray cannot be bound to loopback only (it resolves 127.0.0.1 to the host's address
        # and its GCS and raylet listen on every interface); Ray's token authentication (on by default since
        # 2.5x, token in ~/.ray/auth_token) is what keeps others out.
        return RayTaskRunner(address="local", init_kwargs={"num_cpus": workers, "include_dashboard": False})
    except ImportError:
        raise ConfigError(
            f"runner.kind: {cfg.kind!r} needs the prefect-{cfg.kind} package: pip install 'corpusforge[{cfg.kind}]'"
        ) from None


@contextmanager
def _api_for_workers(cfg: RunnerConfig):
    """Task runs on other processes report to the Prefect API. With an ephemeral API (no PREFECT_API_URL, the
    local server off) only this process knows its URL, and each worker process would start an ephemeral API of
    its own; so for process-based runners the URL of this process's ephemeral API is handed to them."""
    if cfg.kind == "threads":
        yield
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer

    from corpusforge.settings import start_ephemeral_prefect

    start_ephemeral_prefect()
    url = SubprocessASGIServer().api_url
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url  # worker processes started by this run inherit it
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):  # and it travels in the task run context
            yield
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before


def _run_corpus_stage(corpus: dict[str, Any], store_root: str, base_dir: str | None, on_progress) -> list[StepResult]:
    discovered = discover_sources_task(corpus, base_dir)
    futures = corpus_shard_task.map(discovered["sources"], unmapped(corpus), unmapped(store_root))
    done: dict[int, dict[str, Any]] = {}
    index = {id(f): i for i, f in enumerate(futures)}
    on_progress(0, len(futures))
    for future in as_completed(futures):
        done[index[id(future)]] = future.result()
        on_progress(len(done), len(futures))
    shards = [done[i] for i in range(len(futures))]  # source order, whatever order they finished in
    merged = corpus_task(shards, corpus, store_root, discovered["skipped"])
    return [StepResult.from_dict(s) for s in shards] + [StepResult.from_dict(merged)]


def _summary_markdown(name: str, results: list[StepResult]) -> str:
    lines = [f"# corpusforge pipeline `{name}`", "", "| step | name | artifact id | outcome | seconds |",
             "|---|---|---|---|---|"]
    for r in results:
        outcome = "**reused** (cached in store)" if r.reused else "computed"
        lines.append(f"| {r.step} | {r.name} | `{r.id[:12]}` | {outcome} | {r.seconds:.2f} |")
    return "\n".join(lines)


@flow(name="corpusforge-pipeline", log_prints=True)
def pipeline_flow(config: dict[str, Any], store: str | None = None, base_dir: str | None = None) -> dict[str, Any]:
    """Run every stage in ``config``; return ids, paths, the accounting and where to look."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.runtime import flow_run

    from corpusforge.tasks.progress import shard_progress

    cfg = pipeline_config_from_dict(config)
    resolved = to_dict(cfg)
    store_root = resolve_store_root(store)
    logger = get_run_logger()
    for stale in ArtifactStore(store_root).sweep_stale_temps():
        logger.info("removed %s: the temp dir of a writer that died mid-publish", stale)
    tracker = open_tracker(store_root, cfg.name, enabled=cfg.tracking.enabled)
    for run_id in getattr(tracker, "killed_orphans", ()):
        logger.info("MLflow run %s was left RUNNING by a process that died: marked KILLED", run_id)
    parent = tracker.start_pipeline_run(
        run_name=str(flow_run.get_name() or cfg.name),
        config=resolved,
        tags={"corpusforge.pipeline": cfg.name, "corpusforge.uri": store_root.as_uri(),
              "prefect.flow_run_id": str(flow_run.get_id() or "")},
    )
    live = LiveRuns(tracker, parent)
    failed = True
    try:
        with shard_progress("corpus shards") as on_progress:
            results = _run_corpus_stage(resolved["corpus"], str(store_root), base_dir, on_progress)
        outputs: dict[str, StepResult] = {"corpus": results[-1]}
        for stage, stage_cfg in cfg.stages():
            extra = {"on_metrics": live.callback(stage.section, stage_cfg.name)} if stage.live else {}
            returned = load(stage.task)(outputs[stage.after].to_dict(), to_dict(stage_cfg), str(store_root), **extra)
            ran = [StepResult.from_dict(r) for r in (returned if isinstance(returned, list) else [returned])]
            results += ran
            outputs[stage.section] = ran[-1]
        counts = track_results(tracker, parent, results, register=cfg.tracking.register_models, live=live)
        failed = False
    finally:
        live.close(failed=True)  # a step that died while training leaves its live run open
        if failed and parent:
            tracker.finish_pipeline_run(parent, {"status": "failed"}, failed=True)
    summary = pipeline_summary(cfg, store_root, results, outputs, tracking_uri=tracker.tracking_uri,
                               experiment_id=getattr(tracker, "experiment_id", None), run_id=parent, counts=counts)
    if parent:
        tracker.finish_pipeline_run(parent, {k: v for k, v in summary.items() if k != "steps"})
    create_markdown_artifact(key="corpusforge-steps", markdown=_summary_markdown(cfg.name, results),
                             description="Which steps were computed and which were reused from the store")
    logger.info("%d step(s) computed, %d reused from the store", counts["steps_computed"], counts["steps_reused"])
    return summary


def run_pipeline(config: dict[str, Any], store: str | Path | None = None, base_dir: str | Path | None = None) -> dict[str, Any]:
    """Validate the config, choose the task runner, and run the flow (in this process)."""
    cfg = pipeline_config_from_dict(config)
    runnable = pipeline_flow.with_options(task_runner=make_task_runner(cfg.runner))
    with _api_for_workers(cfg.runner):
        return runnable(config=to_dict(cfg), store=str(resolve_store_root(store)),
                        base_dir=str(base_dir) if base_dir is not None else None)
