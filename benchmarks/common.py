"""What every benchmark shares: interleaved timing of whole processes, statistics, machine details, one result line.

The rules (docs: "Benchmarks"): both sides do the same work; the whole process and the inner loop are
reported separately; repeats are interleaved (ours, anchor, ours, anchor, ...) so a load spike hits both
sides; medians and minimums are printed with the load average. CPU seconds are those of the whole process
tree (the child's own rusage from ``wait4``: every thread, and every descendant it waited for), which is
steadier than wall time on a shared machine. Work done in another process (the store's local server and
its Prefect API) is counted from /proc with :func:`proc_cpu`.

Each benchmark ends by printing one line ``BENCH_JSON {...}`` (see :func:`emit`); ``benchmarks/run_all.py``
runs every benchmark and turns those lines into one table.
"""

from __future__ import annotations

import json
import locale
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
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
    peak_rss_mb: float  # the largest resident set of the child or of any descendant it waited for, this run only
    returncode: int
    stdout: str = ""
    stderr: str = ""


def _text(fh) -> str:
    fh.seek(0)
    data = fh.read().decode(locale.getpreferredencoding(False), errors="replace")
    return data.replace("\r\n", "\n")


def run_process(cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
                check: bool = True, timeout: float | None = None, stdin: str | None = None) -> ProcessRun:
    """Run ``cmd`` to completion and measure its whole process tree (wall, CPU, peak RSS).

    The child is reaped with ``os.wait4(pid)``, whose rusage is that child's own: its CPU and that of every
    descendant it waited for, and the largest ``maxrss`` among them. (``RUSAGE_CHILDREN`` of this process
    would give the same CPU as a difference, but its ``ru_maxrss`` is a running maximum over every child
    ever waited for, so one large run would set the peak of all later ones.) Descendants that outlive
    their parent and are re-parented to init are not counted: run such commands under a child subreaper
    (benchmarks/corpus_throughput.py's launcher). Output goes to temporary files, not pipes, so nothing
    needs reading while the child runs; ``timeout`` kills the child and raises ``subprocess.TimeoutExpired``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
        if stdin is not None:
            inp.write(stdin.encode(locale.getpreferredencoding(False)))
            inp.seek(0)
        start = time.perf_counter()
        proc = subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=out, stderr=err,
                                stdin=inp if stdin is not None else subprocess.DEVNULL)
        timer = None
        timed_out = threading.Event()
        if timeout is not None:
            def kill() -> None:
                timed_out.set()
                try:
                    os.kill(proc.pid, 9)
                except ProcessLookupError:
                    pass
            timer = threading.Timer(timeout, kill)
            timer.daemon = True
            timer.start()
        try:
            while True:
                try:
                    _, status, usage = os.wait4(proc.pid, 0)
                    break
                except InterruptedError:
                    continue
        finally:
            if timer is not None:
                timer.cancel()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
        stdout, stderr = _text(out), _text(err)
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(list(cmd), timeout, stdout, stderr)
    run = ProcessRun(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode, stdout, stderr)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{stderr[-3000:]}")
    return run


TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int | None) -> float:
    """utime + stime of one live process (all its threads, not its children), in seconds; 0 if it is gone.

    For work done outside the measured process tree, e.g. by the store's local server and its Prefect API:
    read it before and after a run and count the difference."""
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # fields 14 and 15 of proc(5), counted after ')'


def server_state(store: Path) -> dict:
    """The store's local server (flows/server/): its pid, its Prefect API's pid and URL, ...; {} if none."""
    path = Path(store) / "prefect" / "local-server.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


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


def timed(fn: Callable[[], Any]) -> Callable[[], dict[str, float]]:
    """``fn`` as an :func:`interleave` side: its wall seconds per call, under the key ``s``."""
    def side() -> dict[str, float]:
        start = time.perf_counter()
        fn()
        return {"s": time.perf_counter() - start}
    return side


def sst2_bilstm(batches: int = 1):
    """The sst2-bilstm preset's classifier (15k words x 300, one bidirectional LSTM of 300, max pooling, dropout
    0.5; seed 0) and ``batches`` batches of 64 with SST-2-like lengths (Poisson(9.4) + 1 words): (model, [(ids,
    mask, labels), ...]). Shared by the CPU benchmarks of issue 51."""
    import torch

    from corpusforge.models.rnn_classifier.config import RNNClassifierConfig
    from corpusforge.models.rnn_classifier.model import RNNClassifier

    torch.manual_seed(0)
    model = RNNClassifier(RNNClassifierConfig(vocab_size=15000, pad_id=0, cell="lstm", n_embd=300, n_hidden=300,
                                              n_layer=1, bidirectional=True, pooling="max", dropout=0.5, max_len=64))
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(batches):
        lengths = torch.clamp(torch.poisson(torch.full((64,), 9.4), generator=gen).long() + 1, 1, 64)
        T = int(lengths.max())
        mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
        out.append((torch.randint(1, 15000, (64, T), generator=gen) * mask, mask,
                    torch.randint(0, 2, (64,), generator=gen)))
    return model, out


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
