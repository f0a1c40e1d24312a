"""``corpusforge schedule``: serve the pipeline as a Prefect deployment on a cron schedule.

The deployment's parameters are the config *path* and the overrides, not a frozen copy of the config:
each scheduled run re-reads the YAML and re-discovers the sources, and the store skips every step whose
inputs did not change, so a nightly run recomputes only what new or changed files touch.
"""

from __future__ import annotations

import os
from pathlib import Path

from prefect import flow

START_HINT = (
    "unset PREFECT_API_URL to use the store's local server, or start one with `prefect server start --host "
    "127.0.0.1` and point PREFECT_API_URL at it."
)


@flow(name="corpusforge-scheduled-pipeline")
def scheduled_pipeline(config_path: str, overrides: list[str], store: str) -> dict:
    """Load the YAML at run time; when a source is new or changed, run the pipeline flow (as a subflow) against
    the store. When every step is already published the run stops here: this flow run is the only trace (no
    subflow, no MLflow run), tagged ``corpusforge:nothing-new``, so a frequent schedule over unchanged data does
    not pile up empty runs. A subflow that ends up computing nothing makes no MLflow run either."""
    from prefect import get_run_logger

    from corpusforge.pipeline import run_pipeline
    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.plan import answer_from_store, plan_pipeline
    from corpusforge.storage.store import resolve_store_root
    from corpusforge.tasks.config import apply_overrides, load_yaml

    data = apply_overrides(load_yaml(config_path), overrides)
    root = resolve_store_root(store)
    cfg = pipeline_config_from_dict(data)
    summary = answer_from_store(cfg, root, plan_pipeline(cfg, root, Path(config_path).parent))
    if summary is not None:
        from corpusforge.pipeline import NOTHING_NEW_TAG, tag_flow_run

        get_run_logger().info("nothing new: all %d steps are already published, nothing to run", len(summary["steps"]))
        tag_flow_run(NOTHING_NEW_TAG)  # the only trace: no subflow, no MLflow run, no report
        return summary
    return run_pipeline(data, store=store, base_dir=Path(config_path).parent)


def prefect_api_healthy(api_url: str, timeout: float = 3.0) -> bool:
    import httpx

    try:
        return httpx.get(api_url.rstrip("/") + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def serve_schedule(config: Path, cron: str, name: str | None, overrides: list[str], store_root: Path, *, fail, console) -> None:
    from corpusforge.settings import configure_environment
    from corpusforge.tasks.config import ConfigError, apply_overrides, load_yaml

    try:
        data = apply_overrides(load_yaml(config), overrides)
    except ConfigError as exc:
        fail(str(exc), 2)
    from prefect.client.schemas.schedules import CronSchedule

    from corpusforge.pipeline_config import pipeline_config_from_dict

    try:  # bad input is answered before any server starts
        cfg = pipeline_config_from_dict(data)
        CronSchedule(cron=cron)
    except ConfigError as exc:
        fail(str(exc), 2)
    except ValueError as exc:
        errors = exc.errors() if hasattr(exc, "errors") else []  # pydantic: say what is wrong, not its class name
        why = "; ".join(str(e.get("msg", "")).removeprefix("Value error, ") for e in errors) or str(exc).splitlines()[0]
        fail(f"--cron {cron!r} is not a valid cron expression (five fields: minute hour day month weekday): {why}", 2)
    configure_environment(store_root)
    api = os.environ.get("PREFECT_API_URL")
    keepalive = None  # held while serving, so the local server does not stop as idle
    if not api:  # the store's local server (started if needed) holds the deployment and its runs
        from corpusforge.door import server_enabled
        from corpusforge.server.client import hold_local_server
        from corpusforge.server.prefect_api import refresh_prefect_settings

        url, keepalive = hold_local_server(store_root, console)
        if url is None:
            why = ("is turned off (CORPUSFORGE_LOCAL_SERVER=off)" if not server_enabled()
                   else f"did not start (see {store_root / 'logs' / 'local-server.log'})")
            fail(f"no Prefect server to register the schedule with: the store's local server {why}. Unset "
                 "CORPUSFORGE_LOCAL_SERVER, or start a server (`prefect server start --host 127.0.0.1`) and set "
                 "PREFECT_API_URL to its API (http://127.0.0.1:4200/api)", 1)
        api = os.environ["PREFECT_API_URL"] = url + "/api"
        refresh_prefect_settings()
    if not prefect_api_healthy(api):
        fail(f"no Prefect server answers at {api};\n" + START_HINT, 1)
    deployment = name or cfg.name
    console.print(f"serving deployment [bold]{deployment}[/] on cron '{cron}' against {api} (Ctrl-C stops serving)")
    scheduled_pipeline.serve(
        name=deployment,
        cron=cron,
        parameters={"config_path": str(config.resolve()), "overrides": list(overrides), "store": str(store_root)},
        tags=["corpusforge"],
    )
    if keepalive is not None:
        keepalive.close()
