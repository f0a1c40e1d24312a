"""The pipeline flow: every stage present in the config, composed from tasks. No heavy logic here.

Stages so far: ``corpus`` (discover -> one ``corpus_shard`` task per source file or pack of small files, run
on the task runner -> ``corpus`` merge). Later stages (tokenizer, embeddings, ngram, lm) plug in after it.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.futures import as_completed
from prefect.utilities.annotations import unmapped

from corpusforge.pipeline_config import RunnerConfig, pipeline_config_from_dict
from corpusforge.plan import check_store_references, pipeline_summary, remember_run, stage_references
from corpusforge.stages import STAGES
from corpusforge.storage.locks import store_in_use
from corpusforge.storage.store import ArtifactStore, resolve_store_root
from corpusforge.storage.tracking import open_tracker
from corpusforge.tasks.config import ConfigError, to_dict
from corpusforge.tasks.corpus.merge import corpus_task, discover_sources_task
from corpusforge.tasks.corpus.shard import corpus_shard_task, pack_label
from corpusforge.tasks.stage import load
from corpusforge.tasks.step import StepResult
from corpusforge.tasks.track import LiveRuns, ParentRun, track_results


ABANDON_GRACE_S = 10.0  # how long a failed flow waits for its running tasks before it ends without them


def _thread_runner_class():
    from prefect.task_runners import ThreadPoolTaskRunner

    class ThreadRunner(ThreadPoolTaskRunner):
        """Prefect's thread runner, except that a flow that failed waits for its running tasks only so long.

        Prefect's ``__exit__`` joins every running task, and the flow engine swallows the flow's exception before
        it: one shard failed (a MemoryError, a validation error) while another never returned (stuck on a lock, or
        on a thread that died), and the run never ended. :func:`abandon_running_tasks` marks the runner; then
        tasks not started are cancelled, the running ones get ``ABANDON_GRACE_S`` to finish (none after SIGTERM),
        and those still running are left to the process's exit (corpusforge.termination ends it if they hold
        it)."""

        abandoned = False

        def __exit__(self, exc_type, exc_value, traceback):
            if (self.abandoned or exc_type is not None) and self._executor is not None:
                for event in self._cancel_events.values():
                    event.set()
                executor, self._executor = self._executor, None
                executor.shutdown(wait=False, cancel_futures=True)
                # tasks that end soon still end inside the flow; after SIGTERM none is waited for
                grace = 0.0 if exc_type is not None and exc_type.__name__ == "TerminationSignal" else ABANDON_GRACE_S
                deadline = time.monotonic() + grace
                for thread in list(getattr(executor, "_threads", ())):
                    thread.join(max(0.0, deadline - time.monotonic()))
                if any(t.is_alive() for t in getattr(executor, "_threads", ())):
                    # what they log after the flow's handlers closed is noise, not the run's outcome
                    logging.raiseExceptions = False
            super().__exit__(exc_type, exc_value, traceback)

    return ThreadRunner


def abandon_running_tasks() -> None:
    """Called by a flow that is failing: its thread runner will not wait for the tasks still running."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    runner = getattr(context, "task_runner", None)
    if runner is not None and hasattr(runner, "abandoned"):
        runner.abandoned = True


def make_task_runner(cfg: RunnerConfig):
    """The Prefect task runner for ``runner.kind``. Shard tasks get and return only ids, paths and small dicts,
    so any runner works; with dask/ray the workers must see the store and the sources at the same paths."""
    workers = cfg.workers or os.cpu_count() or 1
    if cfg.kind == "threads":
        return _thread_runner_class()(max_workers=workers)
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
    discovered = discover_sources_task(corpus, base_dir, store_root)
    packs = discovered["packs"]
    futures = corpus_shard_task.map(packs, unmapped(corpus), unmapped(store_root), [pack_label(p) for p in packs])
    done: dict[int, dict[str, Any]] = {}
    index = {id(f): i for i, f in enumerate(futures)}
    on_progress(0, len(futures))
    try:
        for future in as_completed(futures):
            done[index[id(future)]] = future.result()
            on_progress(len(done), len(futures))
    except BaseException:
        abandon_running_tasks()  # the run has failed: it ends now, not when (if ever) the other shards return
        raise
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


# The one-step commands (`tokenizer train`, `ngram estimate`, `embed train`, `lm train --preset P`) name their
# pipelines after themselves; they share the default pipeline's experiment instead of making one each (the
# pipeline name stays on the run: tag corpusforge.pipeline, and in the run name).
COMMAND_PIPELINES = ("tokenizer", "ngram", "embed")
DEFAULT_EXPERIMENT = "corpusforge"


def experiment_name(pipeline: str) -> str:
    """The MLflow experiment of a pipeline: its name; the one-step commands' pipelines share ``corpusforge``."""
    return DEFAULT_EXPERIMENT if pipeline in COMMAND_PIPELINES or pipeline.startswith("lm-") else pipeline


NOTHING_NEW_TAG = "corpusforge:nothing-new"
REPORT_KEY = "corpusforge-report"
def tag_flow_run(tag: str) -> None:
    """Add ``tag`` to the current Prefect flow run (best effort: a tag is not worth failing a run over)."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    run_id = flow_run.get_id()
    if not run_id:
        return
    try:
        with get_client(sync_client=True) as client:
            tags = list(client.read_flow_run(run_id).tags or [])
            if tag not in tags:
                client.update_flow_run(run_id, tags=[*tags, tag])
    except Exception as exc:  # noqa: BLE001
        logging.getLogger("corpusforge").warning("could not tag flow run %s: %s", run_id, exc)


def _publish_report(tracker, run_id: str, summary: dict[str, Any]) -> None:
    """The run report: a Markdown artifact of this flow run (Prefect UI) and report.html plus the run's
    description in MLflow, each linking to the other. Best effort: a report never fails a finished run."""
    import tempfile

    from prefect.artifacts import create_markdown_artifact
    from prefect.runtime import flow_run

    from corpusforge.tasks.report import run_report

    try:
        from corpusforge.ui import mlflow_ui_base  # the port the store's `corpusforge ui` serves MLflow on

        mlflow_run = mlflow_ui_base(tracker.tracking_uri, summary.get("store")) + "/" + tracker.run_url(run_id)
        prefect_url = prefect_flow_run_url(flow_run.get_id())
        links = {"MLflow run (report.html in its artifacts)": mlflow_run}
        if prefect_url:
            links["Prefect flow run (the corpusforge-report artifact)"] = prefect_url
        with tempfile.TemporaryDirectory(prefix="corpusforge-report-") as scratch:
            report = run_report(summary, links=links, scratch=Path(scratch), stages=STAGES)
        tracker.log_report(run_id, report["html"], report["note"])
        tracker.set_tags(run_id, {"corpusforge.report": "report.html", "prefect.flow_run_url": prefect_url or "",
                                  "prefect.artifact_key": REPORT_KEY})
        create_markdown_artifact(key=REPORT_KEY, markdown=report["markdown"],
                                 description=f"Run report: steps, accounting, metrics and plots; MLflow: {mlflow_run}")
    except Exception as exc:  # noqa: BLE001
        logging.getLogger("corpusforge").warning("the run report was not published: %s", exc)


def prefect_flow_run_url(flow_run_id: str | None) -> str | None:
    """The flow run's page in the Prefect UI: $PREFECT_UI_URL, else the one beside the API in use."""
    from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL

    if not flow_run_id:
        return None
    ui = PREFECT_UI_URL.value() or (str(PREFECT_API_URL.value() or "").removesuffix("/api") or None)
    return f"{ui.rstrip('/')}/runs/flow-run/{flow_run_id}" if ui else None


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
    artifacts = ArtifactStore(store_root)
    check_store_references(cfg, artifacts, Path(base_dir) if base_dir is not None else None)  # before any work
    for stale in artifacts.sweep_stale_temps():
        logger.info("removed %s: the temp dir of a writer that died mid-publish", stale)
    tracker = open_tracker(store_root, experiment_name(cfg.name), enabled=cfg.tracking.enabled)
    for run_id in getattr(tracker, "killed_orphans", ()):
        logger.info("MLflow run %s was left RUNNING by a process that died: marked KILLED", run_id)
    # opened when a step computes (or an lm is registered): a run that reuses everything makes no MLflow run
    run_name = str(flow_run.get_name() or cfg.name)
    if experiment_name(cfg.name) != cfg.name:
        run_name = f"{cfg.name}: {run_name}"
    parent = ParentRun(tracker, run_name=run_name, config=resolved,
                       tags={"corpusforge.pipeline": cfg.name, "corpusforge.uri": store_root.as_uri(),
                             "prefect.flow_run_id": str(flow_run.get_id() or "")})
    live = LiveRuns(tracker, parent)
    failed = True
    try:
        with shard_progress("corpus shards") as on_progress:
            results = _run_corpus_stage(resolved["corpus"], str(store_root), base_dir, on_progress)
        outputs: dict[str, StepResult] = {"corpus": results[-1]}
        ran: dict[str, list[StepResult]] = {"corpus": list(results)}  # what each stage ran: references pick here
        for stage, stage_cfg in cfg.stages(base_dir):
            extra = {"on_metrics": live.callback(stage.section, stage_cfg.name)} if stage.live else {}
            if stage.references():
                refs = stage_references(stage, stage_cfg, artifacts, ran)
                extra["refs"] = {field: r.to_dict() for field, r in refs.items()}
            returned = load(stage.task)(outputs[stage.after].to_dict(), to_dict(stage_cfg), str(store_root), **extra)
            returned = returned if isinstance(returned, list) else [returned]
            ran[stage.section] = [StepResult.from_dict(r) for r in returned]
            results += ran[stage.section]
            outputs[stage.section] = ran[stage.section][-1]
        counts = track_results(tracker, parent, results, register=cfg.tracking.register_models, live=live,
                               stages=STAGES)
        failed = False
    finally:
        live.close(failed=True)  # a step that died while training leaves its live run open
        if failed and parent.run_id:
            tracker.finish_pipeline_run(parent.run_id, {"status": "failed"}, failed=True)
    summary = pipeline_summary(cfg, store_root, results, outputs, tracking_uri=tracker.tracking_uri,
                               experiment_id=getattr(tracker, "experiment_id", None), run_id=parent.run_id,
                               counts=counts)
    remember_run(cfg, store_root, results)
    create_markdown_artifact(key="corpusforge-steps", markdown=_summary_markdown(cfg.name, results),
                             description="Which steps were computed and which were reused from the store")
    if parent.run_id:
        _publish_report(tracker, parent.run_id, summary)
        tracker.finish_pipeline_run(parent.run_id, {k: v for k, v in summary.items() if k != "steps"})
    else:  # nothing computed: no MLflow run and no report, only a tag on this flow run
        tag_flow_run(NOTHING_NEW_TAG)
    logger.info("%d step(s) computed, %d reused from the store", counts["steps_computed"], counts["steps_reused"])
    return summary


def run_pipeline(config: dict[str, Any], store: str | Path | None = None, base_dir: str | Path | None = None) -> dict[str, Any]:
    """Validate the config, choose the task runner, and run the flow (in this process)."""
    cfg = pipeline_config_from_dict(config)
    runnable = pipeline_flow.with_options(task_runner=make_task_runner(cfg.runner))
    root = resolve_store_root(store)
    # held shared for the whole run: `artifacts gc` (exclusive) never removes what this run reads or reuses
    with _api_for_workers(cfg.runner), store_in_use(root):
        return runnable(config=to_dict(cfg), store=str(root),
                        base_dir=str(base_dir) if base_dir is not None else None)
