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
    if not inodes:
        return False
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


def url_port(url: str) -> int:
    from urllib.parse import urlsplit

    return urlsplit(url).port or 80


def own_prefect_healthy(url: str, pid: int | None, timeout: float = 2.0) -> bool:
    """A Prefect API we started is healthy: its port is held by its process (checked before a request is
    sent, so nothing reaches a listener that is not ours), and it answers /api/health."""
    if not pid or not listens_on(int(pid), url_port(url)):
        return False
    return prefect_healthy(url, timeout)


def free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free TCP port on 127.0.0.1")


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
