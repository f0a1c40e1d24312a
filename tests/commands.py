"""Running ``corpusforge`` commands from tests.

:func:`corpusforge` runs a command in this process by default, through the same typer app the console script
calls (the arguments, output, JSON and exit code are the command's own), so that a test pays Prefect's, MLflow's,
Great Expectations' and torch's imports once per test process instead of once per command (about 20 s each on
the 2-core machine: issue 43). ``subprocess=True`` runs the installed console script in a process of its own: what
the tests of the command line itself use (the entry point, the local server, signals, a cold start), and one
end-to-end test per command keeps (deploy/docs/pages/internals/tests.md).

In this process, ``env`` is applied to ``os.environ`` for the command's duration and undone after, ``cwd`` is the
working directory for its duration, and the torch thread count a training command sets is put back.
"""

from __future__ import annotations

import contextlib
import os
import subprocess as _subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CLI = str(Path(sys.executable).parent / "corpusforge")


@dataclass
class Ran:
    """What a command did, named like ``subprocess.CompletedProcess``'s fields."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    exception: BaseException | None = None

    def json(self):
        """The last line of stdout as JSON (a ``--json`` command's answer)."""
        import json

        return json.loads(self.stdout.strip().splitlines()[-1])


def _overrides(env: Mapping[str, str] | None) -> dict[str, str | None]:
    """``env`` as changes to this process's environment: a full environment (a copy of os.environ with a few
    keys changed, as the subprocess tests build them) or just the keys to set; a key of os.environ that a full
    environment lacks is unset."""
    if env is None:
        return {}
    changes: dict[str, str | None] = {k: v for k, v in env.items() if os.environ.get(k) != v}
    if len(env) >= len(os.environ) // 2:  # a whole environment: what it leaves out is unset
        changes.update({k: None for k in os.environ if k not in env})
    return changes


@contextlib.contextmanager
def _applied(changes: Mapping[str, str | None], cwd: str | Path | None):
    saved = {k: os.environ.get(k) for k in changes}
    threads = None
    if "torch" in sys.modules:
        threads = sys.modules["torch"].get_num_threads()
    try:
        for k, v in changes.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if threads is not None:
            sys.modules["torch"].set_num_threads(threads)


def corpusforge(*args: str, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                subprocess: bool = False, timeout: float = 900, code: int | None = None,
                input: str | None = None) -> Ran:
    """Run ``corpusforge ARGS``; with ``code``, assert the exit status (the stderr tail in the message)."""
    args = [str(a) for a in args]
    if subprocess:
        full = {**os.environ, **{k: v for k, v in _overrides(env).items() if v is not None}}
        for k, v in _overrides(env).items():
            if v is None:
                full.pop(k, None)
        proc = _subprocess.run([CLI, *args], capture_output=True, text=True, env=full, cwd=cwd, timeout=timeout,
                               input=input)
        ran = Ran(args, proc.returncode, proc.stdout, proc.stderr)
    else:
        from typer.testing import CliRunner

        from corpusforge.cli import app

        with _applied(_overrides(env), cwd):
            result = CliRunner().invoke(app, args, input=input, catch_exceptions=True)
        stderr = result.stderr
        exception = result.exception if not isinstance(result.exception, SystemExit) else None
        if exception is not None:  # a traceback, as the console script would have printed it
            import traceback

            stderr += "".join(traceback.format_exception(exception))
        ran = Ran(args, result.exit_code, result.stdout, stderr, exception)
    if code is not None:
        assert ran.returncode == code, (f"corpusforge {' '.join(args)} exited {ran.returncode}, not {code}:\n"
                                        f"{ran.stderr[-4000:]}")
    return ran
