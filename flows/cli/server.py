"""``corpusforge server ...``: the store's local server (a Prefect API plus warm imports), by hand.

The first command that has work to orchestrate starts it in the background anyway; these commands are
for seeing what runs, starting it ahead of time, and stopping it. See flows/server/ (corpusforge.server).
"""

from __future__ import annotations

import os
import time
from typing import Annotated, Optional

import typer

app = typer.Typer(help="The store's local server: one Prefect API and warm imports shared by every command.",
                  no_args_is_help=True)

from corpusforge.cli.common import (  # noqa: E402
    JsonOpt,
    StoreOpt,
    _fail,
    _store,
    err,
    out,
    print_json,
)


@app.command()
def start(
    store: StoreOpt = None,
    idle: Annotated[Optional[float], typer.Option("--idle", help="Stop after this many seconds without a "
                                                                  "command (default 1200, or "
                                                                  "$CORPUSFORGE_LOCAL_SERVER_IDLE).")] = None,
) -> None:
    """Start the local server for a store in the background and wait until it is warm (every library a stage
    may need imported; a command that starts the server itself waits only for the ones every pipeline uses)."""
    from corpusforge.door import pid_alive, read_state
    from corpusforge.door import UnsafeSocketPlace, socket_path
    from corpusforge.server.client import start_in_background, wait_for
    from corpusforge.settings import configure_environment

    root = _store(store)
    try:
        socket_path(root, create=True)
    except UnsafeSocketPlace as exc:
        _fail(f"the local server cannot run: {exc}", 1)
    configure_environment(root)
    state = read_state(root)
    if state and pid_alive(int(state.get("pid", 0))) and state.get("status") == "ready" and state.get("warm"):
        out.print(f"already running: Prefect API {state['prefect_url']} (pid {state['pid']})", highlight=False)
        return
    started = time.monotonic()
    proc = None if state and pid_alive(int(state.get("pid", 0))) else start_in_background(root, idle)
    err.print(f"starting the local server for {root} ...", highlight=False)
    state = wait_for(root, ("ready",), proc, warm=True)
    if state is None:
        _fail(f"the local server did not start; see {root / 'logs' / 'local-server.log'}", 1)
    out.print(f"ready in {time.monotonic() - started:.1f} s: Prefect API {state['prefect_url']} (pid {state['pid']}, "
              f"stops after {state['idle_seconds']:.0f} s idle)", highlight=False)


@app.command()
def stop(store: StoreOpt = None) -> None:
    """Stop the store's local server (running commands finish first) and its Prefect API."""
    from corpusforge.server.client import stop as stop_server

    root = _store(store)
    if stop_server(root):
        out.print(f"stopped the local server of {root}", highlight=False)
    else:
        out.print(f"no local server runs for {root}", highlight=False)


@app.command()
def status(store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Is a local server running for the store, where is its Prefect API, and would this shell use it?"""
    from corpusforge.door import effective_environ, env_fingerprint, pid_alive, read_state, server_enabled

    root = _store(store)
    state = read_state(root)
    running = bool(state) and pid_alive(int(state.get("pid", 0)))
    usable = running and state.get("env") == env_fingerprint(effective_environ(os.environ, root))
    report = {"store": str(root), "running": running, "enabled": server_enabled(),
              "status": state.get("status") if running else None,
              "pid": state.get("pid") if running else None,
              "prefect_url": state.get("prefect_url") if running else None,
              "idle_seconds": state.get("idle_seconds") if running else None,
              "warm": bool(state.get("warm")) if running else None,
              "same_environment": usable}
    if as_json:
        print_json(report)
        return
    if not running:
        out.print(f"no local server runs for {root}"
                  + ("" if report["enabled"] else " (CORPUSFORGE_LOCAL_SERVER=off: commands start none)"),
                  highlight=False)
        return
    status_word = report["status"] + ("" if report["warm"] or report["status"] != "ready" else ", still importing "
                                      "the tokenizer/embedding/neural libraries")
    out.print(f"local server for {root}: {status_word}, pid {report['pid']}, Prefect API "
              f"{report['prefect_url']}, stops after {report['idle_seconds']:.0f} s idle", highlight=False)
    if not usable:
        err.print("this shell's environment differs in import-time settings (PREFECT_*, MLFLOW_*, OMP_* ...): its "
                  "commands run in their own processes, against the same Prefect API", highlight=False)
