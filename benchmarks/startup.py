"""The fixed cost of a command: what a CLI call costs before (and besides) its work.

    .venv/bin/python benchmarks/startup.py [--repeat 5] [--quick]

Cases, each measured on the real `corpusforge` console script:

1. **A tiny step** (`corpusforge corpus tiny.txt --name ...`, a new 3-line corpus every call, so the corpus
   step really runs: read, clean, dedup, split, GX validation, Parquet, manifest, a Prefect flow run and an
   MLflow run). Two sides, interleaved:
   - *warm*: the store's local server is up (flows/server/). The command's work runs in a process
     forked from the server, so its CPU is counted from every process involved: the client's process tree
     (run_process), the forked command (its rusage, reported by the server: CORPUSFORGE_SERVER_RUSAGE), the
     server's own loop and the Prefect API server (their utime+stime from /proc, before and after);
   - *cold*: CORPUSFORGE_LOCAL_SERVER=off, the way every call ran before the local server: the whole
     process tree, Prefect's ephemeral API server included. This is the "before" column.
   Targets: warm <= 2 CPU-s and <= 3 s wall (issue 12).
2. **A fully cached demo** (`corpusforge run configs/demo.yaml` after one full run in the same store):
   every step is published, so the command answers from the store (no Prefect, no MLflow). Measured as
   `make demo STORE=...` (what the README tells users to run; make's stamp check included) and as the bare
   command. Target: <= 3 s wall.
3. **`corpusforge artifacts find`** on that store: target <= 0.3 s wall.

Interleaved repeats after one untimed round, medians and minimums, load average before and after. The
local server is stopped at the end (and on errors).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (REPO, emit, header, interleave, loadavg, proc_cpu, quiet_env, row, run_process,  # noqa: E402
                    server_state, venv_bin)

CLI = venv_bin("corpusforge")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="3 repeats")
    args = ap.parse_args()
    repeats = 3 if args.quick else args.repeat
    header("start-up: the fixed cost of a corpusforge command")
    load_before = loadavg()
    work = Path(tempfile.mkdtemp(prefix="cf-startup-"))
    warm_store, cold_store, demo_store = work / "warm", work / "cold", work / "demo"
    base = {k: v for k, v in quiet_env().items() if k not in ("PREFECT_API_URL", "PREFECT_HOME", "CORPUSFORGE_STORE")}
    warm_env = {**base, "CORPUSFORGE_LOCAL_SERVER": "on", "CORPUSFORGE_PREFECT_PORT": "0"}
    cold_env = {**base, "CORPUSFORGE_LOCAL_SERVER": "off"}
    counter = iter(range(10**6))
    rows = []
    try:
        t0 = time.perf_counter()
        run_process([CLI, "server", "start", "--store", str(warm_store)], env=warm_env)
        print(f"local server started in {time.perf_counter() - t0:.1f} s (once per store, then kept "
              f"{int(server_state(warm_store).get('idle_seconds', 0))} s while idle)")

        def tiny(store: Path, env: dict[str, str]) -> dict[str, float]:
            n = next(counter)
            src = work / f"tiny-{n}.txt"
            src.write_text(f"tiny corpus number {n}\nsecond line of {n}\nthird line {n}\n", encoding="utf-8")
            usage = work / f"usage-{n}.jsonl"
            state = server_state(store) if env is warm_env else {}
            server_pids = [state.get("pid"), state.get("prefect_pid")]
            before = sum(proc_cpu(p) for p in server_pids)
            run = run_process([CLI, "corpus", str(src), "--name", f"tiny{n}", "--store", str(store), "--json"],
                              env={**env, "CORPUSFORGE_SERVER_RUSAGE": str(usage)})
            time.sleep(0.3)  # let the Prefect API finish the writes this run caused, so they are counted
            servers = sum(proc_cpu(p) for p in server_pids) - before
            forked = sum(json.loads(line).get("cpu", 0.0) for line in usage.read_text().splitlines()) \
                if usage.exists() else 0.0
            if env is warm_env and not usage.exists():
                raise RuntimeError("the warm call did not run in the local server (no rusage report)")
            return {"wall": run.wall, "cpu": run.cpu + forked + servers, "client_cpu": run.cpu,
                    "command_cpu": forked, "servers_cpu": servers}

        res = interleave({"warm": lambda: tiny(warm_store, warm_env), "cold": lambda: tiny(cold_store, cold_env)},
                         repeats)
        w, c = res["warm"], res["cold"]
        print(f"\n[1] tiny corpus step, {repeats} interleaved pairs (medians, min)")
        print(f"  warm local server: wall {w['wall']}, CPU {w['cpu']} = client {w['client_cpu'].median:.3f} + "
              f"command {w['command_cpu'].median:.3f} + servers {w['servers_cpu'].median:.3f}")
        print(f"  cold (server off): wall {c['wall']}, CPU {c['cpu']}")
        rows += [row("startup", "tiny corpus step (warm server vs cold)", "cpu_s", w["cpu"].median, c["cpu"].median,
                     "<= 2 CPU-s", w["cpu"].median <= 2.0, f"min {w['cpu'].min:.2f}"),
                 row("startup", "tiny corpus step (warm server vs cold)", "wall_s", w["wall"].median,
                     c["wall"].median, "<= 3 s", w["wall"].median <= 3.0, f"min {w['wall'].min:.2f}")]

        # 2. the cached demo, and 3. artifacts find, on a store where the demo ran once
        t0 = time.perf_counter()
        first = run_process([CLI, "run", "configs/demo.yaml", "--store", str(demo_store)], env=warm_env, cwd=REPO)
        print(f"\n[2] demo, first run: {time.perf_counter() - t0:.1f} s wall (client CPU {first.cpu:.1f} s)")
        demo = {"make demo": lambda: run_process(["make", "-s", "demo", f"STORE={demo_store}"], env=warm_env,
                                                 cwd=REPO),
                "corpusforge run": lambda: run_process([CLI, "run", "configs/demo.yaml", "--store", str(demo_store)],
                                                       env=warm_env, cwd=REPO),
                "artifacts find": lambda: run_process([CLI, "artifacts", "find", "--store", str(demo_store)],
                                                      env=warm_env, cwd=REPO)}
        out = interleave({k: (lambda f=f: (lambda r: {"wall": r.wall, "cpu": r.cpu,
                                                         "answered": float("answered from the store" in r.stdout)})(f()))
                          for k, f in demo.items()}, repeats)
        for name, series in out.items():
            print(f"  {name:<16} wall {series['wall']}, CPU {series['cpu']}")
        if out["corpusforge run"]["answered"].min < 1:
            print("  WARNING: the cached run did not answer from the store")
        for name, target in (("make demo", 3.0), ("corpusforge run", 3.0), ("artifacts find", 0.3)):
            s = out[name]["wall"]
            rows.append(row("startup", f"cached demo: {name}" if name != "artifacts find" else "artifacts find",
                            "wall_s", s.median, None, f"<= {target:g} s", s.median <= target, f"min {s.min:.3f}"))
    finally:
        for store in (warm_store, demo_store):
            if store.exists():
                run_process([CLI, "server", "stop", "--store", str(store)], env=warm_env, check=False)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nload average before {load_before}, after {loadavg()}")
    for r in rows:
        verdict = "met" if r["met"] else "MISSED"
        anchor = f"{r['anchor']:.3f}" if r["anchor"] is not None else "-"
        print(f"  {r['case']:<42} {r['metric']:<7} ours {r['ours']:.3f}  before/anchor {anchor}  "
              f"target {r['target']:<10} {verdict}")
    emit("startup", rows, load_before=load_before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
