"""Process-wide defaults for offline, quiet runs (STACK.md). Call before importing prefect/mlflow/gx."""

from __future__ import annotations

import os
from pathlib import Path

QUIET_DEFAULTS = {
    "DO_NOT_TRACK": "true",  # MLflow accepts only the literal 'true'
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "GX_ANALYTICS_ENABLED": "false",
}


def configure_environment(store_root: Path) -> None:
    """Quiet telemetry and, unless a Prefect API or home is configured, keep Prefect's state in the store.

    Keeping ``PREFECT_HOME`` under the store means the ephemeral API of every CLI run writes to one
    database, so a later ``corpusforge ui`` shows all past flow runs of this store.
    """
    for key, value in QUIET_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if not os.environ.get("PREFECT_API_URL") and not os.environ.get("PREFECT_HOME"):
        home = Path(store_root) / "prefect"
        home.mkdir(parents=True, exist_ok=True)
        os.environ["PREFECT_HOME"] = str(home)
