"""The store's local server: one Prefect API and one warm corpusforge process, shared by every CLI call.

Without it, every command started its own ephemeral Prefect API (~10 CPU-s) and imported Prefect, MLflow
and Great Expectations again (~7 CPU-s) before doing any work. The local server pays for both once:

- a **Prefect API server** for the store (``prefect server start`` on 127.0.0.1, its database under
  ``<store>/prefect``, the same one ``corpusforge ui`` shows), so flow runs are recorded without a
  server start per command (prefect_api.py: its port, and the check that the port is its own);
- a **warm process** (process.py) that has imported the heavy libraries (warm.py) and forks a child per command
  (see corpusforge.entry and corpusforge.door for the client side): the child runs the command with the caller's
  arguments, working directory, environment, terminal, umask and resource limits.

The first command that needs orchestration starts it in the background (client.py; ``CORPUSFORGE_LOCAL_SERVER=off``
turns that off and falls back to an ephemeral API per command); it stops itself after
``CORPUSFORGE_LOCAL_SERVER_IDLE`` seconds without a command (default 1200). ``corpusforge server
start|stop|status`` control it by hand. One server per store: a lock file makes a second start exit.
When corpusforge's code changes (an edited checkout, a reinstall) the server finishes its running
commands and re-executes itself; meanwhile commands run in their own processes as before. The server process's
entry point is corpusforge.cli.server_main (it wires in the CLI, which imports this package, not the reverse).

Everything binds 127.0.0.1; the command socket lives in a 0700 directory of the user (checked without following
links), and both ends check the other's uid (README "Security").
"""
