"""``corpusforge ui``: a Prefect server and the MLflow UI for one store, bound to 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

READY_TIMEOUT_S = 120


def _executable(name: str) -> str:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def _wait_ready(url: str, proc: subprocess.Popen, timeout: float) -> bool:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def latest_data_docs(store_root: Path) -> str | None:
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    hits = Catalog(ArtifactStore(store_root)).find(step="corpus", latest=True)
    if not hits or not hits[0].manifest.get("data_docs"):
        return None
    return str(hits[0].path / hits[0].manifest["data_docs"])


def serve_uis(store_root: Path, host: str, prefect_port: int, mlflow_port: int, *, fail, console) -> None:
    from corpusforge.server.client import hold_local_server
    from corpusforge.settings import configure_environment

    store_root.mkdir(parents=True, exist_ok=True)
    os.environ.pop("PREFECT_API_URL", None)  # the server we start is the API; the store's PREFECT_HOME holds past runs
    configure_environment(store_root)
    logs = store_root / "logs"
    logs.mkdir(exist_ok=True)
    procs: dict[str, tuple[subprocess.Popen, str, Path]] = {}
    # The store's local server already is (or becomes) this store's Prefect API: the UI is served by it, so
    # commands run meanwhile use the same server and the UI shows their runs at once.
    local_url, hold = hold_local_server(store_root, console, prefect_port) if host == "127.0.0.1" else (None, None)
    if local_url is None:
        prefect_log = logs / "prefect-server.log"
        procs["Prefect UI"] = (
            subprocess.Popen([_executable("prefect"), "server", "start", "--host", host, "--port", str(prefect_port)],
                             stdout=open(prefect_log, "w"), stderr=subprocess.STDOUT, start_new_session=True),
            f"http://{host}:{prefect_port}/api/health", prefect_log,
        )
    tracking = os.environ.get("CORPUSFORGE_TRACKING_URI") or os.environ.get("MLFLOW_TRACKING_URI")
    if tracking and not tracking.startswith("sqlite:"):
        console.print(f"MLflow: using the tracking server at {tracking} (not starting one)")
    else:
        mlflow_log = logs / "mlflow-ui.log"
        procs["MLflow UI"] = (
            subprocess.Popen([_executable("mlflow"), "server", "--backend-store-uri",
                              tracking or f"sqlite:///{store_root / 'mlflow.db'}",
                              "--artifacts-destination", str(store_root / "mlartifacts"),
                              "--host", host, "--port", str(mlflow_port), "--workers", "1"],
                             stdout=open(mlflow_log, "w"), stderr=subprocess.STDOUT, start_new_session=True),
            f"http://{host}:{mlflow_port}/health", mlflow_log,
        )

    def stop(*_):
        for proc, _, _ in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _, _ in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if hold is not None:
            hold.close()

    signal.signal(signal.SIGTERM, lambda *a: (stop(), sys.exit(0)))
    try:
        console.print(f"starting the UIs for store {store_root} (logs in {logs}) ...")
        for label, (proc, health, log) in procs.items():
            if not _wait_ready(health, proc, READY_TIMEOUT_S):
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                stop()
                fail(f"{label} did not start (see {log}):\n{tail}", 1)
        prefect_url = local_url or f"http://{host}:{prefect_port}"
        print(f"Prefect UI:  {prefect_url}", flush=True)
        if local_url and not local_url.endswith(f":{prefect_port}"):
            console.print(f"(the store's local server was already running on {local_url}; --prefect-port applies "
                          "when the UI starts it)")
        if "MLflow UI" in procs:
            print(f"MLflow UI:   http://{host}:{mlflow_port}", flush=True)
        docs = latest_data_docs(store_root)
        print(f"Data Docs:   {docs or '(none yet: run a pipeline first)'}", flush=True)
        print(f"To schedule runs: export PREFECT_API_URL={prefect_url}/api", flush=True)
        if local_url:
            console.print("Ctrl-C stops the MLflow UI; the local server keeps serving the Prefect UI until it has "
                          "been idle for a while (`corpusforge server stop` stops it).")
        else:
            console.print("Ctrl-C stops both servers.")
        while all(proc.poll() is None for proc, _, _ in procs.values()):
            if local_url and running_prefect_url_or_none(store_root) is None:
                break
            time.sleep(1)
        dead = [label for label, (proc, _, _) in procs.items() if proc.poll() is not None] or ["the local server"]
        stop()
        fail(f"{', '.join(dead)} exited unexpectedly; see {logs}", 1)
    except KeyboardInterrupt:
        stop()


def running_prefect_url_or_none(store_root: Path) -> str | None:
    from corpusforge.door import pid_alive, read_state

    state = read_state(store_root)
    return state.get("prefect_url") if state and pid_alive(int(state.get("pid", 0))) else None
