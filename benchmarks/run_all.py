"""Run every benchmark in benchmarks/ and print one table of their results.

    .venv/bin/python benchmarks/run_all.py                       # every benchmark, short settings
    .venv/bin/python benchmarks/run_all.py --only tokenizer,lm   # some of them
    .venv/bin/python benchmarks/run_all.py --full --json all.json

Each benchmark runs as its own subprocess (the same interpreter, cwd = the repository), one after the other,
with its short option: ``--quick`` where the script defines one, else the short settings listed in QUICK
below (each flag only if the script's source still defines it); ``--full`` passes nothing, so every script
runs with its own defaults. A script's output goes to a log file in a fresh temporary directory (its path is
printed before the script starts). The ``BENCH_JSON {...}`` lines it prints (benchmarks/common.py ``emit``)
are collected; the table has one line per row they carry: benchmark, case, metric, ours, anchor,
ratio (ours / anchor), target, met, then the machine and the load average. Missing scripts are skipped
with a note; scripts that print no BENCH_JSON line are listed. Exit status 1 if any script failed.

On a machine shared with other benchmarks, serialise heavy runs: ``flock /tmp/cf-bench.lock .venv/bin/python
benchmarks/run_all.py`` (this script takes no lock itself, so it can be wrapped that way).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import REPO, loadavg, machine  # noqa: E402

# (name, script): the name is what --only takes (a script's file stem works too)
BENCHMARKS = [
    ("corpus", "corpus_throughput.py"),
    ("ngram", "ngram_vs_kenlm.py"),
    ("tokenizer", "tokenizers_bench.py"),
    ("embeddings", "embeddings_bench.py"),
    ("lm", "lm_cpu.py"),
    ("startup", "startup.py"),
    ("crf", "crf.py"),
]
# short settings for scripts without --quick: (flag, value or None), each used only if the script defines the flag
QUICK: dict[str, list[tuple[str, str | None]]] = {
    "corpus": [("--sizes", "5"), ("--minhash-sizes", "5"), ("--repeats", "1")],
    "tokenizer": [("--sections", "1"), ("--repeats", "3"), ("--skip-naive", None)],
    "embeddings": [("--repeats", "1"), ("--glove-epochs", "2")],
    "crf": [("--repeat", "10")],
}
COLUMNS = ("benchmark", "case", "metric", "ours", "anchor", "ratio", "target", "met")


def defines(source: str, flag: str) -> bool:
    """Whether the script's argparse defines ``flag`` (looked up in its source, not by running --help)."""
    return re.search(r"add_argument\(\s*[\"']" + re.escape(flag) + r"[\"']", source) is not None


def short_args(name: str, script: Path) -> list[str]:
    source = script.read_text(encoding="utf-8")
    if defines(source, "--quick"):
        return ["--quick"]
    out: list[str] = []
    for flag, value in QUICK.get(name, []):
        if defines(source, flag):
            out += [flag] if value is None else [flag, value]
    return out


def run_one(name: str, cmd: list[str], log: Path, timeout: float | None, echo: bool) -> dict:
    """Run one benchmark, streaming its stdout+stderr into ``log``; collect its BENCH_JSON payloads."""
    payloads, bad = [], []
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                encoding="utf-8", errors="replace", bufsize=1, start_new_session=True)
        killed = []

        def kill_group() -> None:  # the script and whatever it started (CLI runs, servers)
            killed.append(True)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill_group) if timeout else None
        if timer:
            timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                f.write(line)
                f.flush()
                if echo:
                    sys.stdout.write(f"  [{name}] {line}")
                if line.startswith("BENCH_JSON "):
                    try:
                        payloads.append(json.loads(line[len("BENCH_JSON "):]))
                    except json.JSONDecodeError as exc:
                        bad.append(str(exc))
            rc = proc.wait()
        except BaseException:  # Ctrl-C here: the script runs in its own session, so stop it too
            kill_group()
            proc.wait()
            raise
        finally:
            if timer:
                timer.cancel()
    seconds = time.perf_counter() - start
    timed_out = bool(killed)
    return {"name": name, "cmd": cmd, "rc": rc, "seconds": seconds, "log": str(log), "payloads": payloads,
            "bad_json": bad, "timed_out": timed_out}


def fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}" if abs(value) >= 0.01 else f"{value:.3g}"
    return str(value)


def table(rows: list[dict]) -> str:
    cells = [list(COLUMNS)] + [[fmt(r.get(c)) if c != "ratio" or r.get(c) is None else f"{r[c]:.3f}"
                                for c in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(line, widths)) + " |" for line in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated names: " + ",".join(n for n, _ in BENCHMARKS))
    ap.add_argument("--full", action="store_true", help="run each script with its own defaults (no short option)")
    ap.add_argument("--json", dest="json_out", type=Path, help="write the combined results to this file")
    ap.add_argument("--timeout", type=float, default=0, help="seconds per script (0: none); a script past it is killed")
    ap.add_argument("--echo", action="store_true", help="also print every script's output here")
    args = ap.parse_args()

    chosen = BENCHMARKS
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [w for w in wanted if not any(w in (n, Path(s).stem) for n, s in BENCHMARKS)]
        if unknown:
            ap.error(f"--only: unknown benchmark(s) {', '.join(unknown)}; choose from "
                     f"{', '.join(n for n, _ in BENCHMARKS)}")
        chosen = [(n, s) for n, s in BENCHMARKS if n in wanted or Path(s).stem in wanted]

    m = machine()
    load_before = loadavg()
    logs = Path(tempfile.mkdtemp(prefix="cf-bench-all-"))
    print(f"machine: {m['cores']} cores ({m['cpu']}), {m['mem_gb']} GB, Python {m['python']}, {m['platform']}")
    print(f"load average before: {load_before}; {m['date']}; logs in {logs}")
    results, missing = [], []
    for name, script in chosen:
        path = HERE / script
        if not path.is_file():
            missing.append(script)
            print(f"- {name}: benchmarks/{script} does not exist (yet): skipped")
            continue
        extra = [] if args.full else short_args(name, path)
        cmd = [sys.executable, str(path), *extra]
        log = logs / f"{name}.log"
        print(f"- {name}: {Path(sys.executable).name} benchmarks/{script} {' '.join(extra)}".rstrip()
              + f"  (log: {log}; load {loadavg()})", flush=True)
        res = run_one(name, cmd, log, args.timeout or None, args.echo)
        status = ("timed out" if res["timed_out"] else "ok" if res["rc"] == 0 else f"FAILED (exit {res['rc']})")
        print(f"  {status} in {res['seconds']:.0f} s, {len(res['payloads'])} BENCH_JSON line(s)", flush=True)
        results.append(res)
    load_after = loadavg()

    rows = [r for res in results for p in res["payloads"] for r in p.get("rows", [])]
    print()
    print(table(rows) if rows else "(no rows)")
    notes = [(i, r["note"]) for i, r in enumerate(rows, 1) if r.get("note")]
    if notes:
        print("\nnotes (row number: note)")
        for i, note in notes:
            print(f"  {i}: {note}")
    print(f"\nmachine: {m['cores']} cores ({m['cpu']}), {m['mem_gb']} GB, Python {m['python']}")
    print(f"load average: before {load_before}, after {load_after}; per benchmark at its end: "
          + ", ".join(f"{res['name']} {p.get('loadavg')}" for res in results for p in res["payloads"]))
    failed = [res for res in results if res["rc"] != 0 or res["timed_out"]]
    silent = [res for res in results if not res["payloads"]]
    for script in missing:
        print(f"missing: benchmarks/{script} (skipped)")
    for res in silent:
        print(f"no BENCH_JSON line: {res['name']} (log: {res['log']})")
    for res in results:
        for err in res["bad_json"]:
            print(f"unreadable BENCH_JSON line in {res['name']}: {err}")
    for res in failed:
        print(f"FAILED: {res['name']} (exit {res['rc']}{', timed out' if res['timed_out'] else ''}); "
              f"log: {res['log']}")
    if args.json_out:
        combined = {"machine": m, "loadavg_before": load_before, "loadavg_after": load_after, "logs": str(logs),
                    "full": args.full, "missing": missing, "rows": rows,
                    "runs": [{k: v for k, v in res.items()} for res in results]}
        args.json_out.write_text(json.dumps(combined, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"combined JSON: {args.json_out}")
    print(f"logs: {logs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
