"""What every benchmark shares: interleaved timing of whole processes, statistics, machine details, one result line.

The rules (README "Benchmarks"): both sides do the same work; the whole process and the inner loop are
reported separately; repeats are interleaved (ours, anchor, ours, anchor, ...) so a load spike hits both
sides; medians and minimums are printed with the load average. CPU seconds are those of the whole process
tree (``RUSAGE_CHILDREN`` of a waited-for child: every thread and every grandchild it waited for), which is
steadier than wall time on a shared machine.

Each benchmark ends by printing one line ``BENCH_JSON {...}`` (see :func:`emit`); ``benchmarks/run_all.py``
runs every benchmark and turns those lines into one table.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@dataclass
class ProcessRun:
    wall: float
    cpu: float  # user + system seconds of the child and every descendant it waited for
    peak_rss_mb: float  # the largest resident set of any one process in the tree
    returncode: int
    stdout: str = ""
    stderr: str = ""


def run_process(cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
                check: bool = True, timeout: float | None = None, stdin: str | None = None) -> ProcessRun:
    """Run ``cmd`` to completion and measure its whole process tree (wall, CPU, peak RSS)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(list(cmd), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          input=stdin)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    run = ProcessRun(wall, cpu, after.ru_maxrss / 1024, proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return run


@dataclass
class Series:
    """Repeated measurements of one quantity."""

    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(float(value))

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def min(self) -> float:
        return min(self.values) if self.values else float("nan")

    def __str__(self) -> str:
        return f"{self.median:.3f} (min {self.min:.3f}, n={len(self.values)})"


def interleave(sides: dict[str, Callable[[], dict[str, float]]], repeats: int,
               warmup: int = 1) -> dict[str, dict[str, Series]]:
    """Run each side's callable ``repeats`` times, alternating sides (A B A B ...; the starting side alternates
    too), after ``warmup`` untimed rounds. Each callable returns named measurements, e.g. {"wall": .., "cpu": ..}."""
    names = list(sides)
    for _ in range(warmup):
        for name in names:
            sides[name]()
    out: dict[str, dict[str, Series]] = {name: {} for name in names}
    for i in range(repeats):
        for name in (names if i % 2 == 0 else names[::-1]):
            for key, value in sides[name]().items():
                out[name].setdefault(key, Series()).add(value)
    return out


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "mem_gb": mem_gb, "python": platform.python_version(),
            "platform": platform.platform(), "date": time.strftime("%Y-%m-%d %H:%M")}


def header(title: str) -> None:
    """Print what the reader needs to judge the figures that follow."""
    m = machine()
    print(f"== {title}")
    print(f"   machine: {m['cores']} cores ({m['cpu']}), {m['mem_gb']} GB, Python {m['python']}; "
          f"load average {loadavg()}; {m['date']}")
    print(f"   command: {' '.join([Path(sys.executable).name, *sys.argv])}")


def row(benchmark: str, case: str, metric: str, ours: float, anchor: float | None, target: str = "",
        met: bool | None = None, note: str = "") -> dict[str, Any]:
    """One line of the final table. ``ratio`` is ours / anchor (a time: lower is better for us)."""
    ratio = (ours / anchor) if anchor not in (None, 0) else None
    return {"benchmark": benchmark, "case": case, "metric": metric, "ours": ours, "anchor": anchor,
            "ratio": ratio, "target": target, "met": met, "note": note}


def emit(benchmark: str, rows: list[dict[str, Any]], **extra: Any) -> None:
    """The benchmark's last line: ``BENCH_JSON`` + JSON with the rows, the machine and the load average."""
    payload = {"benchmark": benchmark, "rows": rows, "machine": machine(), "loadavg": loadavg(), **extra}
    print("BENCH_JSON " + json.dumps(payload, default=str), flush=True)


def venv_bin(name: str) -> str:
    """A console script of the interpreter running this benchmark (the project's .venv)."""
    return str(Path(sys.executable).parent / name)


def quiet_env(**extra: str) -> dict[str, str]:
    """The environment for CLI runs: offline and quiet (no telemetry), plus ``extra``."""
    env = dict(os.environ)
    env.update({"DO_NOT_TRACK": "true", "MLFLOW_DISABLE_TELEMETRY": "true",
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "GX_ANALYTICS_ENABLED": "false"})
    env.update(extra)
    return env
