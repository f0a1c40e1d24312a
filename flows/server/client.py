"""The client side of the local server's life cycle, for commands: start it, wait for it, hand a command over,
point Prefect at its API, keep it alive while `ui` or `schedule` runs, stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from corpusforge.door import (
    UnsafeSocketPlace,
    connect_to_server,
    effective_environ,
    env_fingerprint,
    pid_alive,
    read_state,
    send_message,
    server_enabled,
    socket_path,
)
from corpusforge.server.prefect_api import READY_TIMEOUT_S, refresh_prefect_settings, state_prefect_url
from corpusforge.server.process import IDLE_SECONDS, SERVER_MODULE


def start_in_background(store_root: Path, idle_seconds: float | None = None) -> subprocess.Popen:
    logs = store_root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    idle = idle_seconds if idle_seconds is not None else float(os.environ.get("CORPUSFORGE_LOCAL_SERVER_IDLE",
                                                                             IDLE_SECONDS))
    with open(logs / "local-server.log", "ab") as log:
        return subprocess.Popen([sys.executable, "-m", SERVER_MODULE, "serve", "--store", str(store_root),
                                 "--idle", str(idle)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)


def wait_for(store_root: Path, statuses: tuple[str, ...], proc: subprocess.Popen | None,
             timeout: float = READY_TIMEOUT_S, warm: bool = False) -> dict | None:
    """The server's state once its status is one of ``statuses`` (and, with ``warm``, once it has imported
    LATER_MODULES too); None if it died or timed out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(store_root)
        if (state and state.get("status") in statuses and pid_alive(int(state.get("pid", 0)))
                and (state.get("warm") or not warm)):
            return state
        if proc is not None and proc.poll() is not None:
            state = read_state(store_root)  # lost the start race to another server: use that one
            if not (state and pid_alive(int(state.get("pid", 0)))):
                return None
        time.sleep(0.1)
    return None


def running_prefect_url(store_root: Path) -> str | None:
    state = read_state(store_root)
    if not state or not pid_alive(int(state.get("pid", 0))):
        return None
    return state_prefect_url(state)


_socket_place_problem: str | None = None


def socket_place_problem(console=None) -> str:
    """Why this user's local-server socket place cannot be used (empty if it can), checked once per process
    before any server is started; the first caller with a problem says it in one line."""
    global _socket_place_problem
    if _socket_place_problem is None:
        try:
            socket_path(Path("/"), create=True)
            _socket_place_problem = ""
        except UnsafeSocketPlace as exc:
            _socket_place_problem = str(exc)
            line = (f"not using the local server: {exc}; running this command in its own process "
                    "(CORPUSFORGE_LOCAL_SERVER=off says this without the check)")
            if console is not None:
                console.print(line, highlight=False, markup=False, soft_wrap=True)
            else:
                print(line, file=sys.stderr, flush=True)
    return _socket_place_problem


def hand_over(store_root: Path, console=None, timeout: float = READY_TIMEOUT_S) -> int | None:
    """For a command that runs in its own process and has work to orchestrate: start the store's local server
    if none runs, wait until it is warm, and run this same command there. Returns its exit code, or None
    when this process should run the command itself (server turned off, not the real CLI, a server started
    with another environment, or a server that failed to start)."""
    from corpusforge import door

    if (not door.ENTRY_USED or door.IN_SERVER or not server_enabled() or door.limits_need_own_process()
            or socket_place_problem(console)):
        return None
    state = read_state(store_root)
    mine = env_fingerprint(effective_environ(os.environ, store_root))
    proc = None
    if state and pid_alive(int(state.get("pid", 0))):
        if state.get("env") != mine:
            return None  # another environment's server: run here, against its Prefect API
    else:
        proc = start_in_background(store_root)
        if console is not None:
            console.print("starting the local server for this store in the background (Prefect API + warm "
                          "imports; it stops after 20 min idle, `corpusforge server stop` stops it now) ...",
                          highlight=False)
    if wait_for(store_root, ("ready",), proc, timeout) is None:
        return None
    return door.delegate(sys.argv[1:], store_root)


def ensure_prefect_api(store_root: Path, console=None) -> str | None:
    """Point Prefect at an API for this command: $PREFECT_API_URL if set, else the store's local server
    (started in the background on first use), else an ephemeral API in this process. Returns the URL, or
    None for the ephemeral fallback."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    url = running_prefect_url(store_root)
    if url is None and server_enabled() and not socket_place_problem(console):
        state = read_state(store_root)
        proc = None if state and pid_alive(int(state.get("pid", 0))) else start_in_background(store_root)
        state = wait_for(store_root, ("warming", "ready"), proc)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while state is not None:  # the server warms up while its Prefect API starts (maybe on a second port)
            url = state_prefect_url(state)
            if url or time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
                break
            time.sleep(0.2)
            state = read_state(store_root)
    if url is None:
        from corpusforge.settings import start_ephemeral_prefect

        start_ephemeral_prefect()
        return None
    os.environ["PREFECT_API_URL"] = url + "/api"
    refresh_prefect_settings()
    return os.environ["PREFECT_API_URL"]


def hold_local_server(store_root: Path, console=None, prefect_port: int | None = None):
    """The store's local server's Prefect API (started if needed) and a connection that keeps the server from
    stopping while a long-lived command (`ui`, `schedule`) runs; (None, None) when the local server is turned
    off or cannot start."""
    if not server_enabled():
        return None, None
    url = running_prefect_url(store_root)
    if url is None:
        if socket_place_problem(console):
            return None, None
        if prefect_port:
            os.environ.setdefault("CORPUSFORGE_PREFECT_PORT", str(prefect_port))
        if console is not None:
            console.print("starting the store's local server (Prefect API + warm imports) ...")
        state = wait_for(store_root, ("ready",), start_in_background(store_root))
        url = state.get("prefect_url") if state else None
        if url is None:
            return None, None
    state = wait_for(store_root, ("ready",), None, timeout=READY_TIMEOUT_S) or {}
    hold = None
    if state:
        try:
            hold = connect_to_server(store_root, state)
            send_message(hold, {"keepalive": True})
        except OSError:
            hold = None
    return url, hold


def stop(store_root: Path, timeout: float = 60) -> bool:
    """Ask the store's local server to stop (it lets running commands finish first). True if it was running."""
    state = read_state(store_root)
    if not state or not pid_alive(int(state.get("pid", 0))):
        return False
    os.kill(int(state["pid"]), signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(int(state["pid"])) and time.monotonic() < deadline:
        time.sleep(0.1)
    return True
