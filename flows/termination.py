"""A command run in this process always ends: after SIGTERM, and after it has said how it ended.

Prefect owns SIGTERM while a flow runs: its handler raises TerminationSignal in the main thread, the flow is
marked Crashed, and then its thread task runner *waits for every task still running* (``shutdown(wait=True)``),
as the interpreter's exit waits for those threads again. A worker that never returns (one stuck on a lock, or
waiting on a thread that died on MemoryError) kept the command alive for as long as it was stuck: under a
memory limit a corpus run sat for 10+ minutes with 20 threads in futex waits, SIGTERM ignored (issue 30, 7).

:func:`end_on_sigterm` arms a watchdog thread that learns of SIGTERM whoever's Python handler runs (the
signal's number is written to a wakeup file descriptor by the C-level handler), lets the graceful path run for
``grace`` seconds, then ends the process with status 143 and one line. :func:`exit_within` does the same for a
command that has finished and reported its outcome but whose leftover threads keep the interpreter from
exiting. Standard library only: the console script imports it before anything else.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

GRACE_S = 10.0  # how long the graceful path (flow state, logs, locks) may take before the process is ended
_armed = False


def end_on_sigterm(grace: float = GRACE_S) -> None:
    """From the main thread, before any thread starts: SIGTERM ends this process within ``grace`` seconds."""
    global _armed
    if _armed or threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # the C handler must never block
    try:
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main thread of the main interpreter
        os.close(read_fd)
        os.close(write_fd)
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        # a Python handler, so that the C handler runs and writes the wakeup byte; it ends the command as the
        # default action would (SystemExit unwinds the main thread), and Prefect puts its own in while a flow runs
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    _armed = True
    threading.Thread(target=_watch, args=(read_fd, grace), name="corpusforge-sigterm", daemon=True).start()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _watch(read_fd: int, grace: float) -> None:
    while True:
        try:
            data = os.read(read_fd, 512)
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM in data:
            _end_after(grace, 128 + signal.SIGTERM, f"still running {grace:.0f} s after SIGTERM "
                                                     "(a worker did not stop): ended now")
            return


def exit_within(code: int, grace: float = GRACE_S) -> None:
    """The command has ended with ``code`` and said so: if threads it left (a stuck task) keep the interpreter
    from exiting, end the process with that code after ``grace`` seconds."""
    threading.Thread(target=_end_after, args=(grace, code, None), name="corpusforge-exit", daemon=True).start()


def _end_after(grace: float, code: int, message: str | None) -> None:
    time.sleep(grace)
    if message:
        try:
            sys.stderr.write(f"error: {message}\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - nothing may stop the exit
            pass
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(code)
