"""The ``corpusforge`` console script: hand the command to the store's warm local server, else run it here.

This module imports nothing but the standard library, so a command handed to the local server costs a
few hundredths of a second of start-up. The local server (flows/server/) has Prefect, MLflow,
Great Expectations, torch and the rest imported already; it forks a child per command, and the child
runs the command with this process's arguments, working directory, environment and terminal (stdin,
stdout and stderr are passed over the socket), so output, colours, progress bars, ``--json`` and exit
codes are the same as a command run in this process. Ctrl-C and other signals are forwarded to the
child; if this process dies, the server stops the child. This is the design of Spring (the Rails
preloader) and of the Gradle and Bazel servers: pay for imports once, not on every call.

The command runs here instead (the classic path) when no server is ready for this store, the server was
started with a different environment for import-time settings, the command is one the server does not
take (``server``, ``ui``, ``schedule``), or ``CORPUSFORGE_LOCAL_SERVER=off``.
"""

from __future__ import annotations

import os
import sys

from corpusforge import door


def main() -> None:
    door.ENTRY_USED = True
    for key, value in door.CLI_DEFAULTS.items():
        os.environ.setdefault(key, value)
    argv = sys.argv[1:]
    code = door.delegate(argv)
    if code is not None:
        sys.stdout.flush()
        os._exit(code)  # nothing of ours to tear down; skip the interpreter's teardown
    from corpusforge import termination

    termination.end_on_sigterm()  # before any thread starts: SIGTERM ends the command even if a worker is stuck
    from corpusforge.cli import main as run_here

    try:
        run_here()
    except SystemExit as exc:  # the command has said how it ended; leftover threads must not keep it alive
        termination.exit_within(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
        raise
    termination.exit_within(0)


if __name__ == "__main__":
    main()
