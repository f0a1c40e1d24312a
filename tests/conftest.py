"""Shared test setup: quiet offline environment, one Prefect test harness per session, tmp stores."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Before anything imports prefect/mlflow: no telemetry, and a throwaway PREFECT_HOME.
_PREFECT_HOME = tempfile.mkdtemp(prefix="corpusforge-prefect-home-")
# corpusforge's per-user cache (object-store caches, the Prefect/MLflow database templates of
# corpusforge.storage.db_templates): one per session, never the user's ~/.cache/corpusforge.
_CACHE_DIR = tempfile.mkdtemp(prefix="corpusforge-cache-")
for key, value in {
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "GX_ANALYTICS_ENABLED": "false",
    "PREFECT_HOME": _PREFECT_HOME,
    "CORPUSFORGE_CACHE_DIR": _CACHE_DIR,
    "PREFECT_LOGGING_LEVEL": "WARNING",
    # torch's OpenMP threads spin while waiting; on a busy 2-core machine that makes CPU training 5-20x slower
    "OMP_WAIT_POLICY": "PASSIVE",
    # Commands run in their own processes against the session's Prefect harness: no test starts a store's
    # background local server by accident (tests/flows/test_local_server.py turns it on where it is tested).
    "CORPUSFORGE_LOCAL_SERVER": "off",
    "PYTHONIOENCODING": "utf-8",
}.items():
    os.environ[key] = value
for key in ("PREFECT_API_URL", "CORPUSFORGE_STORE", "CORPUSFORGE_TRACKING_URI", "MLFLOW_TRACKING_URI"):
    os.environ.pop(key, None)

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def prefect_harness():
    """One real Prefect API (ephemeral, sqlite) for the whole test session; yields its API URL."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    root.mkdir()
    return root


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path
