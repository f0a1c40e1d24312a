"""The local server's log lines (its stderr is <store>/logs/local-server.log)."""

from __future__ import annotations

import os
import sys
import time


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {message}", file=sys.stderr, flush=True)
