"""``corpusforge ui``: the Prefect UI and the MLflow UI for one store, bound to 127.0.0.1.

Every URL it prints shows this store's data, whatever port it got:

- the Prefect UI is served by the store's local server (corpusforge.server), whose Prefect API tells its UI to
  read that same API (PREFECT_UI_API_URL; Prefect's default is port 4200 whatever port it listens on);
- the MLflow UI listens on ``--mlflow-port`` if given (a taken port is a one-line error), else on the port this
  store's MLflow UI had last (``<store>/logs/mlflow-ui.json``), else on 5000, else on a port the kernel picks.
  A server is trusted to be ours only when the kernel says our process holds the port (``mlflow server`` keeps
  running after ``Errno 98``, while another store's MLflow UI answers on that port).

The MLflow links a run prints and puts in its report (``report:``, ``runs:``) use the same remembered port
(``store_mlflow_ui``), so they open this store's experiments once ``corpusforge ui`` runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

READY_TIMEOUT_S = 120
DEFAULT_MLFLOW_PORT = 5000
LOOPBACK = "127.0.0.1"
MLFLOW_UI_RECORD = ("logs", "mlflow-ui.json")  # under the store: the port its MLflow UI has (or will try first)
PORT_TAKEN = ("errno 98", "address already in use", "is already in use")


def _executable(name: str) -> str:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _valid_port(port) -> bool:
    return isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536


# --- the store's MLflow UI address -----------------------------------------------------------------------------
def read_mlflow_ui_record(store_root: Path) -> dict:
    try:
        record = json.loads(Path(store_root).joinpath(*MLFLOW_UI_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _write_mlflow_ui_record(store_root: Path, record: dict) -> None:
    path = Path(store_root).joinpath(*MLFLOW_UI_RECORD)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _serving(record: dict) -> bool:
    """The MLflow UI the record names runs: its process group holds the listening socket (the kernel's word)."""
    from corpusforge.server.prefect_api import group_listens_on

    pgid, port = record.get("pgid"), record.get("port")
    return _valid_port(port) and isinstance(pgid, int) and pgid > 1 and group_listens_on(pgid, port)


def store_mlflow_ui(store_root: Path) -> str:
    """The address of this store's MLflow UI, for links: where ``corpusforge ui`` serves it now, else the port it
    will try first. A store without one (or whose port another process took meanwhile) gets one now: 5000 when
    free, else a port the kernel picks, remembered for the next ``corpusforge ui``."""
    from corpusforge.server.prefect_api import free_port, port_free

    record = read_mlflow_ui_record(store_root)
    port = record.get("port")
    if _valid_port(port):
        if _serving(record):
            return record.get("url") or _url(LOOPBACK, port)
        if port_free(port):
            return _url(LOOPBACK, port)
    port = free_port(DEFAULT_MLFLOW_PORT)
    if Path(store_root).is_dir():  # a store, not a path a summary merely names: never made here
        _write_mlflow_ui_record(store_root, {"port": port})
    return _url(LOOPBACK, port)


def mlflow_ui_base(tracking_uri: str | None, store_root: str | Path | None = None) -> str:
    """The MLflow UI that shows a run tracked at ``tracking_uri``: a tracking server is its own UI; a store's
    embedded database is shown by ``corpusforge ui`` (store_mlflow_ui)."""
    uri = tracking_uri or ""
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    if store_root:
        try:
            return store_mlflow_ui(Path(store_root))
        except OSError:  # a read-only store, no free port: the default is the best guess
            pass
    return _url(LOOPBACK, DEFAULT_MLFLOW_PORT)


# --- starting the servers --------------------------------------------------------------------------------------
def _pick_port(host: str, explicit: int | None, preferred: list, flag: str, fail) -> int:
    from corpusforge.server.prefect_api import free_port, port_free

    if explicit is not None:
        if not port_free(explicit, host):
            fail(f"{flag} {explicit}: the port is taken on {host} by another process; choose another port, or leave "
                 f"{flag} out to use a free one", 1)
        return explicit
    for port in preferred:
        if _valid_port(port) and port_free(port, host):
            return port
    return free_port(0, host)


def _port_taken_in(log: Path) -> bool:
    try:
        text = log.read_text(errors="replace").lower()
    except OSError:
        return False
    return any(words in text for words in PORT_TAKEN)


def _wait_ready(proc: subprocess.Popen, port: int, health: str, log: Path, timeout: float) -> str:
    """``ready`` once our process group holds ``port`` and answers ``health`` (no request goes to a listener that
    is not ours); ``taken`` when it could not bind the port; ``died`` or ``timeout`` otherwise."""
    import httpx

    from corpusforge.server.prefect_api import group_listens_on

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if group_listens_on(proc.pid, port):
            try:
                if httpx.get(health, timeout=2).status_code == 200:
                    return "ready"
            except httpx.HTTPError:
                pass
        elif _port_taken_in(log):
            return "taken"
        if proc.poll() is not None:
            return "taken" if _port_taken_in(log) else "died"
        time.sleep(0.5)
    return "timeout"


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, then SIGKILL to whatever of it is left (a worker that outlived it)."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass


def mlflow_ui_env(environ) -> dict[str, str]:
    """The MLflow UI's environment: without MLflow's job runner, whose consumer processes (7 of ~290 MiB each)
    serve only server-side jobs the UI of a local store never starts; they held 2.95 GiB of the UI's 3 GiB and
    made Ctrl-C take 20 s (issue 50). The user's own setting wins."""
    return {**environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": environ.get("MLFLOW_SERVER_ENABLE_JOB_EXECUTION",
                                                                          "false")}


class _Server:
    """One UI server we start in its own session (its process group is what we stop and what must hold its port)."""

    def __init__(self, label: str, argv: list[str], host: str, port: int, health: str, log: Path,
                 env: Callable[[str], dict[str, str]] | None = None):
        self.label, self.argv, self.host, self.port, self.health_path, self.log = label, argv, host, port, health, log
        self.env = env
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return _url(self.host, self.port)

    def start(self) -> None:
        argv = [*self.argv, "--host", self.host, "--port", str(self.port)]
        env = self.env(self.url) if self.env else None
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_ready(self, explicit: bool, fail) -> None:
        """Wait until it serves; if its port was taken meanwhile (someone bound it after we chose it), start it
        again on a port the kernel picks, unless the user named the port."""
        from corpusforge.server.prefect_api import free_port

        for attempt in range(3):
            outcome = _wait_ready(self.proc, self.port, self.url + self.health_path, self.log, READY_TIMEOUT_S)
            if outcome == "ready":
                return
            self.stop()
            if outcome == "taken" and not explicit and attempt < 2:
                self.port = free_port(0, self.host)
                self.start()
                continue
            if outcome == "taken":
                fail(f"the {self.label} could not listen on {self.url}: the port is taken (see {self.log})", 1)
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            fail(f"{self.label} did not start (see {self.log}):\n{tail}", 1)

    def stop(self) -> None:
        if self.proc is not None:
            _stop_group(self.proc)


def serve_uis(store_root: Path, host: str, prefect_port: int | None, mlflow_port: int | None, *, fail,
              console) -> None:
    """Serve this store's Prefect and MLflow UIs until Ctrl-C; ``None`` ports: the defaults, or free ones."""
    from corpusforge.server.client import hold_local_server, running_prefect_url
    from corpusforge.server.client import stop as stop_local_server
    from corpusforge.server.prefect_api import PREFERRED_PREFECT_PORT, ui_api_env, ui_api_matches, url_port
    from corpusforge.settings import configure_environment

    store_root.mkdir(parents=True, exist_ok=True)
    os.environ.pop("PREFECT_API_URL", None)  # the server we start is the API; the store's PREFECT_HOME holds past runs
    configure_environment(store_root)
    logs = store_root / "logs"
    logs.mkdir(exist_ok=True)
    servers: list[_Server] = []
    tracking = os.environ.get("CORPUSFORGE_TRACKING_URI") or os.environ.get("MLFLOW_TRACKING_URI")
    remote_tracking = bool(tracking) and not tracking.startswith("sqlite:")
    mlflow_url = mlflow_note = None
    record = {} if remote_tracking else read_mlflow_ui_record(store_root)
    if not remote_tracking:
        if _serving(record) and mlflow_port in (None, record["port"]):
            mlflow_url = record.get("url") or _url(LOOPBACK, record["port"])
            mlflow_note = "(the MLflow UI of this store already runs, started by another `corpusforge ui`)"
        else:  # a taken --mlflow-port fails here, before any server starts
            port = _pick_port(host, mlflow_port, [record.get("port"), DEFAULT_MLFLOW_PORT], "--mlflow-port", fail)
            servers.append(_Server("MLflow UI", [_executable("mlflow"), "server", "--backend-store-uri",
                                                 tracking or f"sqlite:///{store_root / 'mlflow.db'}",
                                                 "--artifacts-destination", str(store_root / "mlartifacts"),
                                                 "--workers", "1"], host, port, "/health", logs / "mlflow-ui.log",
                                   env=lambda _url: mlflow_ui_env(os.environ)))
    local_url = hold = None
    was_running = False

    def stop(*_):
        for server in servers:
            server.stop()
        if hold is not None:
            hold.close()

    def bail(message: str, code: int) -> None:
        stop()
        fail(message, code)

    signal.signal(signal.SIGTERM, lambda *a: (stop(), sys.exit(0)))
    try:
        console.print(f"starting the UIs for store {store_root} (logs in {logs}) ...")
        for server in servers:  # the MLflow UI starts while the local server does
            server.start()
        # The store's local server already is (or becomes) this store's Prefect API: the UI is served by it, so
        # commands run meanwhile use the same server and the UI shows their runs at once.
        if host == LOOPBACK:
            was_running = running_prefect_url(store_root) is not None
            local_url, hold = hold_local_server(store_root, console, prefect_port)
            if local_url and not ui_api_matches(local_url):  # a server of older code: its UI reads the API on 4200
                console.print("the store's local server serves a Prefect UI that reads another API (older code): "
                              "restarting it ...")
                if hold is not None:
                    hold.close()
                stop_local_server(store_root)
                was_running = False
                local_url, hold = hold_local_server(store_root, console, prefect_port)
        if local_url is None:
            port = _pick_port(host, prefect_port, [PREFERRED_PREFECT_PORT], "--prefect-port", bail)
            servers.insert(0, _Server("Prefect UI", [_executable("prefect"), "server", "start"], host, port,
                                      "/api/health", logs / "prefect-server.log",
                                      env=lambda url: {**os.environ, **ui_api_env(os.environ, url)}))
            servers[0].start()
        for server in servers:
            explicit = (mlflow_port if server.label == "MLflow UI" else prefect_port) is not None
            server.wait_ready(explicit, bail)
            if server.label == "MLflow UI":
                mlflow_url = server.url
                _write_mlflow_ui_record(store_root, {"port": server.port, "url": server.url, "pgid": server.proc.pid,
                                                     "host": host, "ui_pid": os.getpid()})
                if mlflow_port is None and server.port != DEFAULT_MLFLOW_PORT:
                    mlflow_note = (f"(port {DEFAULT_MLFLOW_PORT} is taken: the MLflow UI of this store is on port "
                                   f"{server.port}; the links runs print follow it)")
        prefect_url = local_url or next(s.url for s in servers if s.label == "Prefect UI")
        print(f"Prefect UI:  {prefect_url}", flush=True)
        if local_url and was_running:
            if prefect_port and url_port(local_url) != prefect_port:
                console.print(f"(the store's local server was already running on {local_url}; --prefect-port "
                              "applies when the UI starts it)")
        else:
            wanted = prefect_port or PREFERRED_PREFECT_PORT
            if local_url and not prefect_port:
                wanted = int(os.environ.get("CORPUSFORGE_PREFECT_PORT") or wanted)
            if wanted and url_port(prefect_url) != wanted:
                console.print(f"(port {wanted} is taken: the Prefect UI of this store is on port "
                              f"{url_port(prefect_url)})")
        if mlflow_url:
            print(f"MLflow UI:   {mlflow_url}", flush=True)
            if mlflow_note:
                console.print(mlflow_note)
        else:
            console.print(f"MLflow: using the tracking server at {tracking} (not starting one)")
        docs = latest_data_docs(store_root)
        print(f"Data Docs:   {docs or '(none yet: run a pipeline first)'}", flush=True)
        print(f"To schedule runs: export PREFECT_API_URL={prefect_url}/api", flush=True)
        if local_url:
            console.print(f"Ctrl-C {'stops the MLflow UI' if servers else 'ends this command'}; the local server keeps "
                          "serving the Prefect UI until it has been idle for a while (`corpusforge server stop` stops "
                          "it).")
        else:
            console.print("Ctrl-C stops both servers." if len(servers) > 1 else "Ctrl-C stops the server.")
        while all(s.proc.poll() is None for s in servers):
            if local_url and running_prefect_url_or_none(store_root) is None:
                break
            time.sleep(1)
        dead = [s.label for s in servers if s.proc.poll() is not None] or ["the local server"]
        stop()
        fail(f"{', '.join(dead)} exited unexpectedly; see {logs}", 1)
    except KeyboardInterrupt:
        stop()


def latest_data_docs(store_root: Path) -> str | None:
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    hits = Catalog(ArtifactStore(store_root)).find(step="corpus", latest=True)
    if not hits or not hits[0].manifest.get("data_docs"):
        return None
    return str(hits[0].path / hits[0].manifest["data_docs"])


def running_prefect_url_or_none(store_root: Path) -> str | None:
    from corpusforge.door import pid_alive, read_state

    state = read_state(store_root)
    return state.get("prefect_url") if state and pid_alive(int(state.get("pid", 0))) else None
