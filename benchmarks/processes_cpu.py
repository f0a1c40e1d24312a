"""Training on 2 processes through the stage's task (issue 49) beside plain torchrun, on CPU (gloo).

Three sides train the same GPT on the same char shards with the same TrainConfig (grad_accum 2, so 2 processes run
one micro-batch each per step):

- ``task N=2``: the lm stage's Prefect task with ``train.processes: 2`` (corpusforge.tasks.launch: torch's elastic
  launch, each rank repeats the stage's build, rank 0's reports forwarded, the weights published);
- ``torchrun N=2`` (the anchor): ``torchrun --standalone --nproc_per_node 2`` of a script that builds the same model
  and data and calls the same trainer (corpusforge.models.training.train): no stage, no task, no publish;
- ``task N=1``: the same task in one process (what 2 processes buy on this machine).

Whole: wall seconds of the task call / the torchrun process. Inner loop: the trainer's tokens/s (all ranks' tokens).
Interleaved repeats; medians and minimums; the load average before each run.

    .venv/bin/python benchmarks/processes_cpu.py [--repeats 3] [--iters 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT.parent)) if (ROOT.parent / "corpusforge").exists() else None

MODEL = {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 64, "dropout": 0.0}


def train_section(iters: int) -> dict:
    return {"max_iters": iters, "batch_size": 16, "grad_accum": 2, "lr": 1e-3, "warmup_iters": 10,
            "eval_interval": iters, "eval_iters": 4, "log_interval": 50, "cpu_threads": 1}


def shards(root: Path) -> Path:
    """Char shards of the shipped demo text (data/), repeated to ~400k characters: meta.json + <split>.bin."""
    import numpy as np

    from corpusforge.models.tokenization import make_tokenizer

    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted((ROOT / "data").rglob("*.txt"))]
    text = "\n".join(texts)
    text = (text * (1 + 400_000 // max(1, len(text))))[:400_000]
    docs = [line for line in text.split("\n") if line.strip()]
    tok = make_tokenizer("char")
    tok.train(docs)
    tok.save(root / "tokenizer")
    enc = root / "encoded"
    enc.mkdir(parents=True)
    n = len(docs)
    parts = {"train": docs[: int(n * 0.9)], "valid": docs[int(n * 0.9): int(n * 0.95)], "test": docs[int(n * 0.95):]}
    tokens = {}
    for split, part in parts.items():
        ids = [i for d in part for i in (*tok.encode(d), tok.eot_id)]
        np.asarray(ids, dtype="<u2").tofile(enc / f"{split}.bin")
        tokens[split] = len(ids)
    (enc / "meta.json").write_text(json.dumps({
        "dtype": "uint16", "vocab_size": tok.vocab_size, "eot_id": tok.eot_id, "tokenizer_id": "f" * 64,
        "tokenizer_path": str(root / "tokenizer"), "tokens": tokens,
        "documents": {k: len(v) for k, v in parts.items()}}))
    return enc


ANCHOR = '''
import json, sys, time
import numpy as np, torch
from corpusforge.models.configs import TrainConfig
from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.model import GPT
from corpusforge.models.training import train
from corpusforge.models.zoo import objective_for
enc, model_cfg, train_cfg = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
meta = json.load(open(enc + "/meta.json"))
data = {s: np.memmap(f"{enc}/{s}.bin", dtype="uint16", mode="r") for s in ("train", "valid")}
torch.manual_seed(train_cfg["seed"] if "seed" in train_cfg else 1337)
model = GPT(GPTConfig(vocab_size=meta["vocab_size"], **model_cfg))
result = train(model, objective_for(model, data), TrainConfig(**train_cfg))
import torch.distributed as dist
if dist.get_rank() == 0:
    print("TOKENS_PER_S", result.metrics["tokens_per_s"])
dist.destroy_process_group()
'''


def run_task(lm_task, upstream, section: dict, store: Path) -> tuple[float, float]:
    from prefect import flow

    @flow(name="processes-bench")
    def one():
        return lm_task(upstream.to_dict(), section, str(store))

    started = time.perf_counter()
    out = one()
    whole = time.perf_counter() - started
    result = out[-1] if isinstance(out, list) else out
    metrics = json.loads((Path(result["path"]) / "manifest.json").read_text())["metrics"]
    return whole, float(metrics["tokens_per_s"])


def run_anchor(enc: Path, iters: int, script: Path) -> tuple[float, float]:
    torchrun = Path(sys.executable).parent / "torchrun"
    started = time.perf_counter()
    out = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2", str(script), str(enc),
                          json.dumps(MODEL), json.dumps(train_section(iters))],
                         capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=1800)
    whole = time.perf_counter() - started
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    tps = float(next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("TOKENS_PER_S")))
    return whole, tps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=300)
    args = parser.parse_args()
    __import__("corpusforge")  # sets OMP_WAIT_POLICY before torch loads
    from prefect.testing.utilities import prefect_test_harness

    from corpusforge.tasks.lm.train import lm_task
    from corpusforge.tasks.step import StepResult

    work = Path(tempfile.mkdtemp(prefix="cf-processes-bench-"))
    enc = shards(work / "data")
    upstream = StepResult(id="e" * 64, step="encode", name="bench", path=str(enc), reused=False, seconds=0.0)
    script = work / "anchor.py"
    script.write_text(ANCHOR)
    figures: dict[str, list[tuple[float, float, float]]] = {"task N=2": [], "torchrun N=2": [], "task N=1": []}
    with prefect_test_harness(server_startup_timeout=180):
        for r in range(args.repeats):
            for side in figures:
                load = os.getloadavg()[0]
                if side == "torchrun N=2":
                    whole, tps = run_anchor(enc, args.iters, script)
                else:
                    section = {"name": "bench", "family": "gpt", "model": MODEL, "sample": {"max_new_tokens": 0},
                               "train": {**train_section(args.iters), "processes": 2 if "2" in side else 1}}
                    whole, tps = run_task(lm_task, upstream, section, work / f"store-{side[-1]}-{r}")
                figures[side].append((whole, tps, load))
                print(f"{side:13s} repeat {r}: whole {whole:6.1f} s, inner loop {tps:8.0f} tokens/s, load {load:.1f}",
                      flush=True)
    print(f"\nmachine: {os.cpu_count()} cores, torch {__import__('torch').__version__}; {args.iters} steps, "
          f"batch 16 x 64 tokens, grad_accum 2, GPT {MODEL}")
    print(f"{'side':13s} {'whole median':>12s} {'whole min':>9s} {'tokens/s median':>15s} {'tokens/s max':>12s}")
    for side, rows in figures.items():
        wholes, speeds = [w for w, _, _ in rows], [t for _, t, _ in rows]
        print(f"{side:13s} {statistics.median(wholes):11.1f}s {min(wholes):8.1f}s {statistics.median(speeds):15.0f} "
              f"{max(speeds):12.0f}")


if __name__ == "__main__":
    main()
