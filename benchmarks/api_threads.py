"""The Python API trains as fast as the command on a busy machine (issue 50, item 1).

    .venv/bin/python benchmarks/api_threads.py [--repeat 3] [--steps 120] [--load 2]

The same training, three ways, each in a fresh process and on a fresh store (so every step runs), interleaved:

- *command*: ``corpusforge classify train data/labelled/reviews.tsv --preset sst2-bilstm --set ...``: the console
  script sets OMP_WAIT_POLICY=PASSIVE before torch loads (corpusforge.door.CLI_DEFAULTS);
- *api*: ``import corpusforge as cf; cf.classify.train(...)`` with the same preset and overrides (the API builds the
  same config, so the same artifact id): ``import corpusforge`` now sets the same default before torch loads;
- *api, torch first*: ``import torch`` before ``import corpusforge`` with OMP_WAIT_POLICY unset: OpenMP has read
  its (spinning) default before corpusforge could set it. This is how every API run trained before the change.

Meanwhile ``--load`` processes spin on the CPU (a busy machine: other jobs, a second training, the test suite):
OpenMP threads that spin while they wait then take cores from the threads doing the work. The training loop's own
time is the artifact's ``train_seconds``; the whole process is wall and CPU seconds of the process tree. Medians,
minimums and the load average are printed; the last line is BENCH_JSON (benchmarks/run_all.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, emit, header, interleave, loadavg, quiet_env, row, run_process, venv_bin  # noqa: E402

DATA = REPO / "data" / "labelled" / "reviews.tsv"
API_SCRIPT = """
import json, sys
{first}
import corpusforge as cf
a = cf.classify.train(sys.argv[1], "sst2-bilstm", overrides=json.loads(sys.argv[2]), store=sys.argv[3])
print(json.dumps({{"id": a.id, "train_seconds": a.metrics["train_seconds"]}}))
"""


def overrides(steps: int) -> list[str]:
    return [f"train.max_iters={steps}", f"train.eval_interval={steps}", f"train.log_interval={steps}",
            "train.eval_iters=2", "embeddings.epochs=1", "embeddings.dim=50", "model.n_hidden=128",
            "tracking.enabled=false", "corpus.split.valid=0.1"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=120, help="training steps per run")
    ap.add_argument("--load", type=int, default=os.cpu_count() or 2, help="busy processes beside the runs")
    args = ap.parse_args()
    header(f"API vs command: sst2-bilstm on {DATA.name}, {args.steps} steps, {args.load} busy processes beside")
    env = quiet_env(CORPUSFORGE_LOCAL_SERVER="off")
    env.pop("OMP_WAIT_POLICY", None)  # what a user's shell has: nothing set
    env.pop("PREFECT_API_URL", None)
    sets = overrides(args.steps)
    ids: dict[str, set[str]] = {}

    def side(name: str, cmd_for) -> callable:
        def run() -> dict[str, float]:
            with tempfile.TemporaryDirectory(prefix="cf-api-threads-") as tmp:
                done = run_process(cmd_for(Path(tmp) / "store"), env=env, cwd=REPO, timeout=1800)
                answer = json.loads(done.stdout.strip().splitlines()[-1])
                ids.setdefault(name, set()).add(answer["id"])
                train = answer.get("train_seconds")
                if train is None:  # the command's --json: the classifier's metrics
                    train = answer["metrics"]["train_seconds"]
                return {"wall": done.wall, "cpu": done.cpu, "train_seconds": float(train)}
        return run

    cli = [venv_bin("corpusforge"), "classify", "train", str(DATA), "--preset", "sst2-bilstm", "--json",
           *sum((["--set", s] for s in sets), [])]
    sides = {
        "command": side("command", lambda store: [*cli, "--store", str(store)]),
        "api": side("api", lambda store: [sys.executable, "-c", API_SCRIPT.format(first=""), str(DATA),
                                          json.dumps(sets), str(store)]),
        "api, torch first": side("api, torch first", lambda store: [
            sys.executable, "-c", API_SCRIPT.format(first="import torch"), str(DATA), json.dumps(sets), str(store)]),
    }
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        before = loadavg()
        results = interleave(sides, args.repeat, warmup=0)
        after = loadavg()
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    same_id = len(set().union(*ids.values())) == 1
    print(f"   load average before {before}, after {after}; one artifact id on every side: {same_id}")
    print(f"   {'side':<18} {'training loop s':>22} {'whole process wall s':>24} {'whole process CPU s':>24}")
    for name, series in results.items():
        print(f"   {name:<18} {str(series['train_seconds']):>22} {str(series['wall']):>24} {str(series['cpu']):>24}")
    cmd, api, old = (results[k] for k in ("command", "api", "api, torch first"))
    ratio = api["train_seconds"].median / cmd["train_seconds"].median
    print(f"   api / command, training loop (medians): {ratio:.2f} (target <= 1.10); "
          f"torch first / command: {old['train_seconds'].median / cmd['train_seconds'].median:.2f}")
    rows = [row("api_threads", "training loop", "seconds", api["train_seconds"].median, cmd["train_seconds"].median,
                "api within 10% of the command", ratio <= 1.10),
            row("api_threads", "whole process", "wall seconds", api["wall"].median, cmd["wall"].median),
            row("api_threads", "torch imported first (before the change)", "training loop seconds",
                old["train_seconds"].median, cmd["train_seconds"].median)]
    emit("api_threads", rows, same_id=same_id, load=args.load, steps=args.steps)
    return 0 if same_id else 1


if __name__ == "__main__":
    raise SystemExit(main())
