"""The local server's Prefect API: where it listens, and whether what answers there is really ours.

A port is free when chosen, but anyone may bind it before Prefect does (another store's server starting at the
same moment, another user): before a request is sent, the listening socket must be held by the Prefect process
the server started (``listens_on``: the kernel's word from /proc, not the answer of whatever replies).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import urllib.request
from pathlib import Path

READY_TIMEOUT_S = 180
PREFERRED_PREFECT_PORT = 4200


def prefect_healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/api/health", timeout=timeout) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def tcp_listener_inodes(port: int) -> set[int]:
    """Inodes of the sockets listening on TCP ``port`` (IPv4 and IPv6) in this network namespace."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                next(fh, None)
                for line in fh:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(int(fields[9]))
        except OSError:
            continue
    return inodes


def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on 127.0.0.1:``port``: the kernel's word, not the
    answer of whatever replies on that port (another store's Prefect API, or another user's listener that took
    the port between our check and its bind)."""
    inodes = tcp_listener_inodes(port)
    return bool(inodes) and _holds_socket(pid, inodes)


def _holds_socket(pid: int, inodes: set[int]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and int(target[8:-1]) in inodes:
            return True
    return False


def group_listens_on(pgid: int, port: int) -> bool:
    """Whether a process of process group ``pgid`` holds the socket listening on TCP ``port``: for a server
    started in its own session whose listener may be a worker it started (``mlflow server``'s uvicorn). A
    server that could not bind (``Errno 98``) may keep running while another process answers on its port."""
    inodes = tcp_listener_inodes(port)
    if not inodes:
        return False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and _holds_socket(int(entry), inodes):
            return True
    return False


def url_port(url: str) -> int:
    from urllib.parse import urlsplit

    return urlsplit(url).port or 80


def own_prefect_healthy(url: str, pid: int | None, timeout: float = 2.0) -> bool:
    """A Prefect API we started is healthy: its port is held by its process (checked before a request is
    sent, so nothing reaches a listener that is not ours), and it answers /api/health."""
    if not pid or not listens_on(int(pid), url_port(url)):
        return False
    return prefect_healthy(url, timeout)


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether TCP ``port`` can be bound on ``host`` now (as uvicorn binds: TIME_WAIT is no obstacle)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(preferred: int, host: str = "127.0.0.1") -> int:
    """``preferred`` if it can be bound on ``host``, else a port the kernel picks (0: always the kernel's)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port in (preferred, 0):
        with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(f"no free TCP port on {host}")


# Prefect's UI asks its server's /ui-settings where the API is; the server answers PREFECT_UI_API_URL, which
# Prefect derives from PREFECT_SERVER_API_HOST/PORT (4200 by default), not from `prefect server start --port`.
# A server on any other port then serves a UI that shows whatever answers on 4200 (another store's runs).
UI_API_VARS = ("PREFECT_UI_API_URL", "PREFECT_SERVER_UI_API_URL")


def ui_api_env(environ, base_url: str) -> dict[str, str]:
    """The variables a Prefect server we start on ``base_url`` needs so that its UI reads its own API; none when
    the user set the UI's API address (a proxy in front of it: theirs to choose)."""
    if any(environ.get(k) for k in UI_API_VARS):
        return {}
    return {"PREFECT_UI_API_URL": base_url.rstrip("/") + "/api"}


def ui_api_matches(base_url: str, environ=os.environ, timeout: float = 5.0) -> bool:
    """Whether the Prefect server at ``base_url`` tells its UI to use its own API (or the one the user set), as
    its /ui-settings says; True when that cannot be read (an older server without the endpoint)."""
    import json

    expected = next((environ[k] for k in UI_API_VARS if environ.get(k)), base_url.rstrip("/") + "/api")
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/ui-settings", timeout=timeout) as response:
            served = json.loads(response.read()).get("api_url")
    except (OSError, ValueError, AttributeError):
        return True
    return not served or served.rstrip("/") == expected.rstrip("/")


def executable(name: str) -> str:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else name


def state_prefect_url(state: dict) -> str | None:
    """The Prefect API a server's state names, if it answers: one the server started must be served by the
    process the state names (own_prefect_healthy); an external (team) API has no pid of ours to check."""
    url = state.get("prefect_url")
    if not url:
        return None
    if state.get("prefect_pid"):
        return url if own_prefect_healthy(url, state["prefect_pid"]) else None
    return url if state.get("status") in ("warming", "ready") and prefect_healthy(url) else None


def prefect_items(environ) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith("PREFECT_")}


def refresh_prefect_settings(logging_too: bool = False) -> None:
    """Prefect reads its settings from the environment when it is imported; after the environment changed
    (a forked command, PREFECT_API_URL set to the local server), make it read them again."""
    if "prefect.context" not in sys.modules:
        return
    from prefect.context import refresh_global_settings_context

    refresh_global_settings_context()
    if logging_too:
        from prefect.logging.configuration import setup_logging

        setup_logging(incremental=False)
