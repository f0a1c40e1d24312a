"""Corpus stage vs datatrove's equivalent pipeline: whole process and inner loop, interleaved, at several sizes.

    .venv/bin/python benchmarks/corpus_throughput.py [--formats txt,jsonl,csv] [--sizes 5,20,50]
        [--minhash-sizes 5,20] [--repeats 3] [--sides cold,warm,datatrove] [--no-inner] [--workdir DIR]

Work on both sides, 2 workers: read every file (.txt: one document per line; .jsonl / .csv: a ``text``
field) -> `lm` normalisation (control characters removed, NFC, whitespace runs -> one space, stripped) ->
drop empty documents -> exact dedup (first occurrence kept) -> zstd Parquet. The MinHash variant adds
near-dedup with 5-word shingles, 128 permutations in 9 bands x 13 rows (threshold 0.8).

- corpusforge cold, whole process: the real ``corpusforge corpus`` console script with
  ``CORPUSFORGE_LOCAL_SERVER=off`` so that every CPU second is in the measured process tree (the command
  runs its Prefect flow in-process with 2 thread workers and starts Prefect's temporary API server),
  tracking off, no held-out splits, a fresh store every run: the first command of a session.
- corpusforge warm, whole process: the same command with the store's local server already running
  (``corpusforge server start --store S`` once, before any timing; stopped at the end): what a user gets
  from the second command on. The command runs in a process forked from the server, so its CPU is the
  client's process tree + the forked command's rusage (reported by the server, ``CORPUSFORGE_SERVER_RUSAGE``)
  + the growth of the server's and its Prefect API's own utime+stime (/proc) over the call. One store for
  every warm call, so every call gets a new corpus name and a new ``validate.max_chars`` (100000 + n: no
  line is that long, so the work is the same) and with it new shard and corpus keys: nothing is reused,
  which each call checks (``reused`` false, shard ids never seen before, the forked command's report present).
- corpusforge does more than the anchor on both sides and that is counted against it: doc ids,
  word counts, quarantine/drop tables, per-shard GX validation, manifests with sha256 of every file, the
  merge step's re-read of the shards.
- datatrove, whole process: ``benchmarks/datatrove_pipeline.py`` (datatrove 0.10's LocalPipelineExecutor,
  one task per input file; its exact dedup is signatures -> find duplicates -> filter, which re-reads and
  re-normalises the input as datatrove's own examples do; the MinHash dedup is its four stages).
- Inner loop: each side in a fresh process with every import done first, timing the pipeline alone:
  corpusforge's Python path (``build_corpus_shard`` per shard on 2 threads, the files packed into shards as
  the pipeline packs them (``resolve_packs``, ``corpus.shard_mb``), + ``build_corpus``, no Prefect),
  datatrove's executor (``--inner``).

Every round runs each size and each side once (sizes and sides in reverse order every other round), so a
machine whose speed drifts over minutes moves all sizes alike and the marginals stay comparable.

CPU seconds are user + system of the whole process tree (getrusage), so threads and worker processes
get no free ride (warm: plus the server's share, see above). MB = bytes of text in the corpus (1e6). Marginal MB/s per core between two sizes A < B
is (B - A) / (CPU_B - CPU_A), which removes the fixed start-up cost. Peak memory is the largest resident
set of any one process of the tree (ru_maxrss), compared with the corpus size for the MinHash target (warm: the
forked command's, which counts the pages it shares with the server as its own).

Exits 0 with a message when ../shared (the PTB and Tiny Shakespeare text) or datatrove is missing.
"""

from __future__ import annotations

import argparse
import gzip  # noqa: F401  (kept for corpora someone builds with .txt.gz by hand)
import json
import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (REPO, SHARED, ProcessRun, emit, header, loadavg, proc_cpu,  # noqa: E402
                    quiet_env, row, run_process, server_state, venv_bin)

FILE_MB = 2.5  # one input file (= one datatrove task; corpusforge packs ~3 into a shard of ~8 MB) per 2.5 MB of text
TARGET_MARGINAL = {"txt": 20.0, "jsonl": 10.0, "csv": 10.0}
TARGET_MINHASH = 5.0
TARGET_MINHASH_MEM = 3.0  # peak RSS / corpus size


# ---------------------------------------------------------------------------------------------- corpora

def _base_lines() -> list[str]:
    base: list[str] = []
    for rel in ("corpora/ptb/ptb.train.txt", "corpora/tinyshakespeare/input.txt"):
        base += [line for line in (SHARED / rel).read_text(encoding="utf-8").split("\n") if line.strip()]
    return base


def build_corpus(out: Path, fmt: str, target_mb: float, base: list[str], seed: int = 0) -> float:
    """``target_mb`` MB of documents in ``FILE_MB`` files of one format: ~10% exact duplicates, ~5% near
    duplicates (one word changed), BEL control characters, doubled spaces, a few blank documents and,
    in .txt, one Latin-1 line per file. Returns the MB of document text written."""
    rng = random.Random(seed)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    target, per_file = int(target_mb * 1e6), int(FILE_MB * 1e6)
    written, part = 0, 0
    seen: list[str] = []
    while written < target:
        part += 1
        lines: list[str] = []
        size = 0
        while size < min(per_file, target - written):
            r = rng.random()
            if r < 0.10 and seen:
                line = rng.choice(seen)
            elif r < 0.15 and seen:
                words = rng.choice(seen).split()
                words[rng.randrange(len(words))] = "perturbed"
                line = " ".join(words)
            else:
                words = rng.choice(base).split()
                rng.shuffle(words)
                line = " ".join(words + rng.choice(base).split()[:8])
                if len(seen) < 20_000:
                    seen.append(line)
            x = rng.random()
            if x < 0.002:
                line += " \x07bell"
            elif x < 0.004:
                line = line.replace(" ", "  ", 3)
            elif x < 0.005:
                line = "   "
            lines.append(line)
            size += len(line.encode()) + 1
        path = out / f"part{part:04d}.{fmt}"
        if fmt == "txt":
            data = ("\n".join(lines) + "\n").encode() + b"caf\xe9 latin-1 noise\n"
        elif fmt == "jsonl":
            data = "".join(json.dumps({"text": t, "part": part}) + "\n" for t in lines).encode()
        elif fmt == "csv":
            data = ("text,part\n" + "".join('"' + t.replace('"', '""') + f'",{part}\n' for t in lines)).encode()
        else:
            raise ValueError(fmt)
        path.write_bytes(data)
        written += size
    return written / 1e6


# ----------------------------------------------------------------------------------------------- sides

def cf_args(src: Path, store: Path, minhash: bool, n: int = 0) -> list[str]:
    """The corpus command's arguments; ``n`` > 0 gives a new name and shard config (max_chars 100000 + n,
    longer than any line either way): new artifact keys in a store that already has this corpus."""
    return [str(src), "--name", f"bench{n}" if n else "bench", "--store", str(store), "--json",
            "--set", "runner.workers=2", "--set", "tracking.enabled=false",
            "--set", "split.valid=0", "--set", "split.test=0",
            "--set", "validate.min_chars=1", "--set", f"validate.max_chars={100000 + n}",
            "--set", f"dedup.near.enabled={'true' if minhash else 'false'}"]


INNER_CF = r"""
import json, os, resource, sys, time
from concurrent.futures import ThreadPoolExecutor
sys.path.insert(0, os.getcwd())
src, store, near = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
overrides = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}  # corpus config keys (benchmarks/corpus_variants.py)
from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.corpus.config import corpus_config_from_dict
from corpusforge.tasks.corpus.merge import build_corpus, resolve_sources
from corpusforge.tasks.corpus.shard import build_corpus_shard
try:
    from corpusforge.tasks.corpus.merge import resolve_packs
except ImportError:  # code from before shards packed small files (--code): one shard per file
    resolve_packs = lambda cfg: [[r] for r in resolve_sources(cfg)]  # noqa: E731
import great_expectations, polars, pyarrow.parquet, duckdb, rensa, matplotlib.pyplot  # noqa: F401 - imports outside the timing
def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
cfg = corpus_config_from_dict({"name": "bench", "sources": [src], "reader": {"txt_mode": "line"},
    "validate": {"min_chars": 1, "max_chars": 100000}, "split": {"valid": 0.0, "test": 0.0},
    "dedup": {"exact": True, "near": {"enabled": near}}, **overrides})
st = ArtifactStore(store)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
c0, w0 = cpu(), time.perf_counter()
packs = resolve_packs(cfg)
with ThreadPoolExecutor(2) as pool:
    shards = list(pool.map(lambda p: build_corpus_shard(p if len(p) > 1 else p[0], cfg, st), packs))
res = build_corpus(shards, cfg, st)
cpu_s, wall = cpu() - c0, time.perf_counter() - w0
acc = json.load(open(os.path.join(res.path, "manifest.json")))["accounting"]
print("INNER_JSON " + json.dumps({"cpu": cpu_s, "wall": wall, "kept": acc["kept"],
                                  "minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}), flush=True)
"""


# Runs one command as the child of a small launcher that is a child subreaper (Linux): descendants that
# outlive their parent are re-parented to the launcher and waited for there, so its RUSAGE_CHILDREN covers
# the whole tree. Without it the CPU of orphans is lost: datatrove's pool workers are children of a
# forkserver that its main process never waits for (RUSAGE_CHILDREN alone counted ~1 of ~5 CPU seconds).
# The launcher's own RUSAGE_CHILDREN is per run, so its ru_maxrss is this run's peak (common.run_process now
# reports per-run figures too, from wait4 of its child, but without the orphans).
LAUNCHER = r"""
import ctypes, json, os, resource, subprocess, sys, time
ok = ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
t0 = time.perf_counter()
rc = subprocess.call(sys.argv[1:])
wall = time.perf_counter() - t0
left = 0
while True:
    try:
        pid, _ = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    left += 1
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("TREE_JSON " + json.dumps({"cpu": r.ru_utime + r.ru_stime, "wall": wall, "rss_mb": r.ru_maxrss / 1024,
      "subreaper": ok, "orphans_reaped": left}), file=sys.stderr, flush=True)
sys.exit(rc)
"""


def run_tree(cmd: list[str], **kw) -> ProcessRun:
    """Run ``cmd`` under the launcher: CPU of the whole tree, orphans included, and this run's peak RSS."""
    run = run_process([sys.executable, "-c", LAUNCHER, *cmd], **kw)
    tree = json.loads(run.stderr.rsplit("TREE_JSON ", 1)[1])
    if not tree["subreaper"]:
        print("   warning: not a child subreaper: CPU of orphaned descendants is not counted")
    run.cpu, run.wall, run.peak_rss_mb = tree["cpu"], tree["wall"], tree["rss_mb"]
    return run


def kept_rows(parquet_dir: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in parquet_dir.rglob("*.parquet"))


class Bench:
    def __init__(self, workdir: Path, code: Path = REPO):
        self.workdir, self.code = workdir, code
        self.env = quiet_env(CORPUSFORGE_LOCAL_SERVER="off", PYTHONHASHSEED="0", DATATROVE_COLORIZE_LOGS="0")
        # corpusforge's code from ``code`` (a clean export of a commit while others edit the checkout):
        # PYTHONPATH comes before the editable install's path entry, for the console script too
        self.cf_env = dict(self.env, PYTHONPATH=str(code)) if code != REPO else self.env
        # warm: the store's local server on (the same environment for `server start` and every call, or the
        # call would not be handed over); the store's own Prefect API, not one from the caller's environment
        self.warm_env = {k: v for k, v in self.cf_env.items()
                         if k not in ("PREFECT_API_URL", "PREFECT_HOME", "CORPUSFORGE_STORE")}
        self.warm_env.update(CORPUSFORGE_LOCAL_SERVER="on", CORPUSFORGE_PREFECT_PORT="0")
        self.warm_store = workdir / "cf-warm-store"
        self.warm_calls = 0
        self.seen_shards: set[str] = set()
        self.kept: dict[str, set[int]] = {}

    def start_server(self) -> None:
        shutil.rmtree(self.warm_store, ignore_errors=True)
        t0 = time.perf_counter()
        run_process([venv_bin("corpusforge"), "server", "start", "--store", str(self.warm_store)],
                    env=self.warm_env, cwd=self.workdir, timeout=600)
        state = server_state(self.warm_store)
        print(f"   local server for the warm side: started in {time.perf_counter() - t0:.1f} s (not timed), "
              f"pid {state.get('pid')}, Prefect API pid {state.get('prefect_pid')}")

    def stop_server(self) -> None:
        if self.warm_store.exists():
            run_process([venv_bin("corpusforge"), "server", "stop", "--store", str(self.warm_store)],
                        env=self.warm_env, cwd=self.workdir, check=False, timeout=300)
            shutil.rmtree(self.warm_store, ignore_errors=True)

    def _fresh(self, name: str) -> Path:
        path = self.workdir / name
        shutil.rmtree(path, ignore_errors=True)
        return path

    def corpusforge(self, src: Path, minhash: bool, inner: bool):
        def go() -> dict[str, float]:
            store = self._fresh("cf-store")
            if inner:
                run = run_tree([sys.executable, "-c", INNER_CF, str(src), str(store), "1" if minhash else "0"],
                                  env=self.cf_env, cwd=self.code)
                res = json.loads(run.stdout.split("INNER_JSON ", 1)[1])
                kept = res["kept"]
                out = {"cpu": res["cpu"], "wall": res["wall"], "rss": run.peak_rss_mb}
            else:
                run = run_tree([venv_bin("corpusforge"), "corpus", *cf_args(src, store, minhash)],
                                  env=self.cf_env, cwd=self.workdir)
                kept = json.loads(run.stdout.strip().splitlines()[-1])["accounting"]["kept"]
                out = {"cpu": run.cpu, "wall": run.wall, "rss": run.peak_rss_mb}
            self.kept.setdefault("corpusforge", set()).add(kept)
            return out
        return go

    def corpusforge_warm(self, src: Path, minhash: bool):
        def once() -> dict[str, float] | None:
            self.warm_calls += 1
            n = self.warm_calls
            usage = self.workdir / f"warm-usage-{n}.jsonl"
            state = server_state(self.warm_store)
            pids = [state.get("pid"), state.get("prefect_pid")]
            before = [proc_cpu(p) for p in pids]
            run = run_tree([venv_bin("corpusforge"), "corpus", *cf_args(src, self.warm_store, minhash, n)],
                           env={**self.warm_env, "CORPUSFORGE_SERVER_RUSAGE": str(usage)}, cwd=self.workdir)
            time.sleep(0.5)  # let the Prefect API finish the writes this call caused, so they are counted
            after = [proc_cpu(p) for p in pids]
            if not usage.exists() or server_state(self.warm_store).get("pid") != pids[0] or not all(after):
                return None  # not run by the same warm server (it restarted: code or packages changed)
            reports = [json.loads(line) for line in usage.read_text().splitlines() if line.strip()]
            usage.unlink()
            payload = json.loads(run.stdout.strip().splitlines()[-1])
            shards = set(payload["shards"])
            if payload["reused"] or shards & self.seen_shards:
                raise RuntimeError(f"warm call {n} reused an artifact: corpus reused={payload['reused']}, "
                                   f"{len(shards & self.seen_shards)} shard(s) seen before")
            self.seen_shards |= shards
            self.kept.setdefault("corpusforge warm", set()).add(payload["accounting"]["kept"])
            command = sum(r.get("cpu", 0.0) for r in reports)
            server, prefect = after[0] - before[0], after[1] - before[1]
            return {"cpu": run.cpu + command + server + prefect, "wall": run.wall,
                    "rss": max([run.peak_rss_mb] + [r.get("maxrss_kb", 0) / 1024 for r in reports]),
                    "client_cpu": run.cpu, "command_cpu": command, "server_cpu": server, "prefect_cpu": prefect}

        def go() -> dict[str, float]:
            for attempt in range(3):
                out = once()
                if out is not None:
                    return out
                print("   warm call not run by the warm server (restarting?): waiting for it, then again")
                time.sleep(20)
                self.start_server_if_gone()
            raise RuntimeError("the warm side could not run in the store's local server")
        return go

    def start_server_if_gone(self) -> None:
        run_process([venv_bin("corpusforge"), "server", "start", "--store", str(self.warm_store)],
                    env=self.warm_env, cwd=self.workdir, timeout=600, check=False)

    def datatrove(self, src: Path, minhash: bool, inner: bool):
        def go() -> dict[str, float]:
            work = self._fresh("dt-work")
            cmd = [sys.executable, str(REPO / "benchmarks" / "datatrove_pipeline.py"), str(src), str(work),
                   "--workers", "2", *(["--minhash"] if minhash else []), *(["--inner"] if inner else [])]
            run = run_tree(cmd, env=self.env, cwd=self.workdir)
            self.kept.setdefault("datatrove", set()).add(kept_rows(work / "out"))
            if inner:
                res = json.loads(run.stdout.split("INNER_JSON ", 1)[1])
                return {"cpu": res["cpu"], "wall": res["wall"], "rss": run.peak_rss_mb}
            return {"cpu": run.cpu, "wall": run.wall, "rss": run.peak_rss_mb}
        return go


def interleave_cases(cases: dict, kept_by_size: dict, bench: Bench, repeats: int, warmup: int) -> dict:
    """``{size: {side: {measure: Series}}}``: every (size, side) callable run once per round, ``repeats`` rounds
    after ``warmup`` untimed ones; sizes and sides in reverse order every other round."""
    from common import Series

    sizes = list(cases)
    out = {size: {name: {} for name in cases[size]} for size in sizes}
    for r in range(warmup + repeats):
        for size in (sizes if r % 2 == 0 else sizes[::-1]):
            bench.kept = kept_by_size[size]
            names = list(cases[size])
            for name in (names if r % 2 == 0 else names[::-1]):
                values = cases[size][name]()
                if r >= warmup:
                    for key, value in values.items():
                        out[size][name].setdefault(key, Series()).add(value)
    return out


def marginal(mb: list[float], cpu: list[float]) -> float | None:
    """MB/s per core from the least-squares slope of CPU seconds over MB (two sizes: the plain difference)."""
    if len(mb) < 2:
        return None
    mx, my = statistics.fmean(mb), statistics.fmean(cpu)
    slope = sum((x - mx) * (y - my) for x, y in zip(mb, cpu)) / sum((x - mx) ** 2 for x in mb)
    return 1.0 / slope if slope > 0 else float("inf")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default="txt,jsonl,csv")
    ap.add_argument("--sizes", default="5,20,50", help="corpus sizes in MB (exact dedup)")
    ap.add_argument("--minhash-sizes", default="5,20", help="corpus sizes in MB (MinHash); empty: skip")
    ap.add_argument("--minhash-format", default="txt")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per side (after one warm-up round)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds per side before the timed ones")
    ap.add_argument("--no-inner", action="store_true", help="skip the inner-loop measurements")
    ap.add_argument("--sides", default="cold,warm,datatrove",
                    help="which sides to run: cold (server off), warm (the store's local server up), datatrove")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/corpusforge-bench"))
    ap.add_argument("--code", type=Path, default=REPO,
                    help="corpusforge code to measure, e.g. a `git archive HEAD` export (default: this checkout)")
    args = ap.parse_args()

    if not (SHARED / "corpora/ptb/ptb.train.txt").is_file():
        print(f"skipped: needs ../shared with corpora/ptb and corpora/tinyshakespeare next to the repository ({SHARED})")
        return 0
    try:
        import datatrove  # noqa: F401
    except ImportError:
        print("skipped: datatrove is not installed (pip install -e '.[bench]')")
        return 0

    header("corpus stage vs datatrove (read -> lm normalisation -> empty filter -> dedup -> Parquet, 2 workers)")
    sides = [x for x in args.sides.split(",") if x]
    print(f"   CPU = user+sys of the whole process tree (warm: + forked command + server and Prefect API growth); "
          f"{args.repeats} interleaved repeats after {args.warmup} warm-up(s); {FILE_MB} MB per input file; "
          f"sides: {', '.join(sides)} (cold: CORPUSFORGE_LOCAL_SERVER=off; warm: the store's local server up)")
    args.workdir.mkdir(parents=True, exist_ok=True)
    base = _base_lines()
    bench = Bench(args.workdir, args.code.resolve())
    print(f"   corpusforge code: {bench.code}")
    rows: list[dict] = []
    results: dict = {}
    plan = [(fmt, False, [float(s) for s in args.sizes.split(",") if s]) for fmt in args.formats.split(",") if fmt]
    if args.minhash_sizes:
        plan.append((args.minhash_format, True, [float(s) for s in args.minhash_sizes.split(",") if s]))
    modes = ["whole"] + ([] if args.no_inner else ["inner"])
    load_before = loadavg()
    loads: list[list[float]] = [load_before]
    names = {"cold": "corpusforge", "warm": "corpusforge warm", "datatrove": "datatrove"}
    whole_target = "faster than datatrove (whole process, >= 5 MB)"

    try:
        if "warm" in sides and "whole" in modes:
            bench.start_server()
        for fmt, minhash, sizes in plan:
            variant = f"{fmt}{' +minhash' if minhash else ''}"
            per_size: dict[str, dict[str, list[float]]] = {m: {"mb": []} for m in modes}
            corpora = {}
            for size in sizes:
                src = args.workdir / f"src-{fmt}-{size:g}"
                corpora[size] = (src, build_corpus(src, fmt, size, base), len(list(src.iterdir())))
            for mode in modes:
                inner = mode == "inner"
                cases: dict[float, dict] = {}
                for size, (src, mb, n_files) in corpora.items():
                    funcs = {}
                    for side in sides:
                        if side == "cold" or (side == "warm" and inner and "cold" not in sides):
                            # the inner loop has no server: warm and cold share it (run once, as "cold")
                            funcs[names["cold"]] = bench.corpusforge(src, minhash, inner)
                        elif side == "warm" and not inner:
                            funcs[names[side]] = bench.corpusforge_warm(src, minhash)
                        elif side == "datatrove":
                            funcs[names[side]] = bench.datatrove(src, minhash, inner)
                    cases[size] = funcs
                # Sizes are interleaved as well as sides: each round runs every size and side once (the order
                # reversed every other round), so a machine that slows down over minutes (seen here: the same
                # code 25% slower half an hour apart) shifts every size alike instead of bending the slope.
                kept_by_size: dict[float, dict] = {size: {} for size in sizes}
                measured = interleave_cases(cases, kept_by_size, bench, args.repeats, args.warmup)
                for size in sizes:
                    src, mb, n_files = corpora[size]
                    res = measured[size]
                    bench.kept = kept_by_size[size]
                    per_size[mode]["mb"].append(mb)
                    for name, series in res.items():
                        per_size[mode].setdefault(name, []).append(series["cpu"].median)
                        per_size[mode].setdefault(f"{name} rss", []).append(series["rss"].median)
                    results[f"{variant} {mb:.1f}MB {mode}"] = {
                        side: {k: v.values for k, v in s.items()} for side, s in res.items()}
                    loads.append(loadavg())
                    print(f"\n-- {variant}, {mb:.1f} MB in {n_files} files, {mode} "
                          f"({'pipeline only, imports outside' if inner else 'whole process'}), load average {loads[-1]}")
                    for side, s in res.items():
                        extra = ""
                        if "command_cpu" in s:
                            extra = (f"  [= client {s['client_cpu'].median:.2f} + command {s['command_cpu'].median:.2f}"
                                     f" + server {s['server_cpu'].median:.2f} + Prefect API {s['prefect_cpu'].median:.2f}]")
                        print(f"   {side:17s} cpu {s['cpu']}  wall {s['wall']}  peak RSS MB {s['rss'].median:.0f}  "
                              f"-> {mb / s['cpu'].median:5.1f} MB/s/core (median)  "
                              f"kept {sorted(bench.kept.get(side, []))}{extra}")
                    kept = {side: tuple(sorted(v)) for side, v in bench.kept.items()}
                    if len(set(kept.values())) > 1 and not minhash:
                        print(f"   WARNING: the sides kept different documents: {kept}")
                    dt = res.get("datatrove")
                    for side in (names["cold"], names["warm"]):
                        if side not in res or dt is None:
                            continue
                        cf = res[side]
                        label = "cold" if side == names["cold"] else "warm"
                        ratio = cf["cpu"].median / dt["cpu"].median
                        wall_ratio = cf["wall"].median / dt["wall"].median
                        print(f"   {side} / datatrove: CPU {ratio:.2f}, wall {wall_ratio:.2f}")
                        faster = cf["cpu"].median < dt["cpu"].median and cf["wall"].median < dt["wall"].median
                        case = f"{variant} {mb:.0f}MB {mode}" + ("" if inner else f" {label}")
                        note = (f"wall {cf['wall'].median:.2f}s vs {dt['wall'].median:.2f}s (ratio {wall_ratio:.2f}); "
                                f"min cpu {cf['cpu'].min:.2f} vs {dt['cpu'].min:.2f}")
                        if "command_cpu" in cf:
                            note += (f"; cpu = client {cf['client_cpu'].median:.2f} + command "
                                     f"{cf['command_cpu'].median:.2f} + server {cf['server_cpu'].median:.2f} "
                                     f"+ Prefect API {cf['prefect_cpu'].median:.2f}")
                        rows.append(row("corpus", case, "cpu_s", cf["cpu"].median, dt["cpu"].median,
                                        whole_target if not inner else "",
                                        faster if not inner and mb >= 5 else None, note))
                        if minhash and not inner:
                            mem_ratio = cf["rss"].median / mb
                            rows.append(row("corpus", f"{variant} {mb:.0f}MB {label}", "peak_rss_mb", cf["rss"].median,
                                            dt["rss"].median,
                                            f"<= {TARGET_MINHASH_MEM:g}x corpus ({TARGET_MINHASH_MEM * mb:.0f} MB)",
                                            mem_ratio <= TARGET_MINHASH_MEM, f"{mem_ratio:.1f}x the corpus"))
            for mode in modes:
                m = per_size[mode]
                dt_marg = marginal(m["mb"], m["datatrove"]) if "datatrove" in m else None
                target = TARGET_MINHASH if minhash else TARGET_MARGINAL[fmt]
                for side in (names["cold"], names["warm"]):
                    if side not in m:
                        continue
                    cf_marg = marginal(m["mb"], m[side])
                    if cf_marg is None:
                        continue
                    label = "" if mode == "inner" else (" cold" if side == names["cold"] else " warm")
                    print(f"\n== {variant} {mode}{label}: marginal MB/s per core over "
                          f"{', '.join(f'{x:.1f}' for x in m['mb'])} MB: {side} {cf_marg:.1f}, datatrove "
                          f"{dt_marg if dt_marg is None else round(dt_marg, 1)} (target >= {target:g} for corpusforge)")
                    if minhash and mode == "whole" and len(m["mb"]) > 1:
                        # the process' own 550-800 MB (Prefect, GX, polars, DuckDB, torch-free) is there at any
                        # size; what the corpus adds is the growth of peak RSS between the smallest and largest
                        growth = (m[f"{side} rss"][-1] - m[f"{side} rss"][0]) / (m["mb"][-1] - m["mb"][0])
                        dt_growth = ((m["datatrove rss"][-1] - m["datatrove rss"][0]) / (m["mb"][-1] - m["mb"][0])
                                     if "datatrove rss" in m else None)
                        print(f"== {variant} {mode}{label}: peak RSS growth {growth:.2f} MB per MB of corpus "
                              f"({m[f'{side} rss'][0]:.0f} -> {m[f'{side} rss'][-1]:.0f} MB; target <= "
                              f"{TARGET_MINHASH_MEM:g})")
                        rows.append(row("corpus", f"{variant} peak RSS growth{label}", "MB/MB", growth, dt_growth,
                                        f"<= {TARGET_MINHASH_MEM:g} (growth over the sizes)",
                                        growth <= TARGET_MINHASH_MEM,
                                        "peak RSS added per MB of corpus between the smallest and largest size"))
                        if len(m["mb"]) > 2:
                            # Between the two largest sizes: what one more MB costs once the shards in flight
                            # (two workers, packs of at most 2x shard_mb) are as large as they get, i.e. the
                            # growth that goes on with the corpus (the merge's per-document state).
                            span = m["mb"][-1] - m["mb"][-2]
                            scale = (m[f"{side} rss"][-1] - m[f"{side} rss"][-2]) / span
                            dt_scale = ((m["datatrove rss"][-1] - m["datatrove rss"][-2]) / span
                                        if "datatrove rss" in m else None)
                            print(f"== {variant} {mode}{label}: peak RSS growth at scale {scale:.2f} MB per MB "
                                  f"({m['mb'][-2]:.0f} -> {m['mb'][-1]:.0f} MB of corpus: {m[f'{side} rss'][-2]:.0f} -> "
                                  f"{m[f'{side} rss'][-1]:.0f} MB)")
                            rows.append(row("corpus", f"{variant} peak RSS growth at scale{label}", "MB/MB", scale,
                                            dt_scale, f"<= {TARGET_MINHASH_MEM:g} (the two largest sizes)",
                                            scale <= TARGET_MINHASH_MEM,
                                            "peak RSS added per MB of corpus between the two largest sizes"))
                    noise = cf_marg == float("inf")  # CPU did not grow with the size: noise larger than the work
                    rows.append(row("corpus", f"{variant} marginal {mode}{label}", "MB/s/core", cf_marg, dt_marg,
                                    f">= {target:g}" if mode == "whole" else "",
                                    cf_marg >= target if mode == "whole" and not noise else None,
                                    "higher is better; ratio = ours/anchor" +
                                    ("; CPU did not grow with size (noise): not judged" if noise else "")))
    finally:
        bench.stop_server()
    print(f"\nload average before {load_before}, after each case {loads[1:]}")
    for r in rows:
        verdict = {True: "met", False: "MISSED", None: ""}[r["met"]]
        anchor = f"{r['anchor']:.2f}" if r["anchor"] is not None else "-"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        print(f"  {r['case']:<32} {r['metric']:<11} ours {r['ours']:8.2f}  datatrove {anchor:>8}  ratio {ratio:>5}  "
              f"{r['target']:<48} {verdict}")
    emit("corpus", rows, results=results, repeats=args.repeats, file_mb=FILE_MB, sides=sides,
         load_before=load_before, loads=loads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
