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
    "start one with `corpusforge ui` (or `prefect server start --host 127.0.0.1`) in another terminal, then\n"
    "    export PREFECT_API_URL=http://127.0.0.1:4200/api\n"
    "and run this command again."
)


@flow(name="corpusforge-scheduled-pipeline")
def scheduled_pipeline(config_path: str, overrides: list[str], store: str) -> dict:
    """Load the YAML at run time and run the pipeline flow (as a subflow) against the store."""
    from flows.pipeline import run_pipeline
    from tasks.config import apply_overrides, load_yaml

    data = apply_overrides(load_yaml(config_path), overrides)
    return run_pipeline(data, store=store, base_dir=Path(config_path).parent)


def prefect_api_healthy(api_url: str, timeout: float = 3.0) -> bool:
    import httpx

    try:
        return httpx.get(api_url.rstrip("/") + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def serve_schedule(config: Path, cron: str, name: str | None, overrides: list[str], store_root: Path, *, fail, console) -> None:
    from flows.settings import configure_environment
    from tasks.config import ConfigError, apply_overrides, load_yaml

    try:
        data = apply_overrides(load_yaml(config), overrides)
    except ConfigError as exc:
        fail(str(exc), 2)
    api = os.environ.get("PREFECT_API_URL")
    if not api:
        fail("PREFECT_API_URL is not set, so there is no Prefect server to register the schedule with;\n" + START_HINT, 1)
    if not prefect_api_healthy(api):
        fail(f"no Prefect server answers at {api};\n" + START_HINT, 1)
    configure_environment(store_root)

    from prefect.client.schemas.schedules import CronSchedule

    from flows.pipeline import pipeline_config_from_dict

    try:
        cfg = pipeline_config_from_dict(data)
        CronSchedule(cron=cron)
    except ConfigError as exc:
        fail(str(exc), 2)
    except ValueError as exc:
        fail(f"--cron {cron!r} is not a valid cron expression (five fields: minute hour day month weekday): "
             f"{str(exc).splitlines()[0]}", 2)
    deployment = name or cfg.name
    console.print(f"serving deployment [bold]{deployment}[/] on cron '{cron}' against {api} (Ctrl-C stops serving)")
    scheduled_pipeline.serve(
        name=deployment,
        cron=cron,
        parameters={"config_path": str(config.resolve()), "overrides": list(overrides), "store": str(store_root)},
        tags=["corpusforge"],
    )
