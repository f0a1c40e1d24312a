"""N-gram LM estimation, like for like: corpusforge (DuckDB counting + numpy modified Kneser-Ney + ARPA)
next to KenLM's ``lmplz`` on Penn Treebank (../shared/corpora/ptb), orders 3 and 5.

    .venv/bin/python benchmarks/ngram_vs_kenlm.py [--repeat 5] [--cli-repeat 3] [--orders 3 5] [--quick]
                                                  [--plain] [--kenlm-bin DIR]

The same work on both sides (the choices, stated once):
- **Input**: one copy of ptb.train.txt with ``<unk>`` renamed ``_unk_`` (lmplz refuses a literal ``<unk>``;
  ../shared/DATA.md), read by both: lmplz as ``--text``; corpusforge as the ``train.parquet`` of a corpus
  artifact built from that copy before timing (the corpus step is the CLI rows' business).
- **Output**: a gzipped ARPA on both sides, deflate level 1 on both: ours writes ``model.arpa.gz``
  (zlib level 1, what the ngram step ships); lmplz writes its ARPA to stdout, piped into ``gzip -1``
  (the pipeline is timed as one process tree). ``--plain`` adds rows where both write a plain ``.arpa``.
- **Memory**: ``lmplz -S 20%`` (not its default 80%); ours: DuckDB ``memory_limit`` = 20% of physical RAM.
  Scratch files of both go to the same temp directory (``-T`` / ``temp_directory``).
- **Threads**: lmplz's defaults (a sort/IO thread pipeline); ours: DuckDB on every core, and one thread
  that compresses and writes the ARPA while the next block of lines is formatted.
- **Python path** (target <= 1.0x): a fresh interpreter imports everything first (not timed), then times
  train.parquet -> counts (counts.duckdb written) -> modified-KN estimate -> model.arpa.gz written. lmplz
  has no import cost, so its whole process is the anchor. The same child's whole process (imports
  included) is printed too.
- **CLI** (target <= 1.5x, at the highest order): ``corpusforge ngram estimate TRAIN --order N --smoothing
  modified-kneser-ney --arpa OUT.arpa.gz --json --set memory_limit=<20%> --set temp_directory=<spill>``
  as a user runs it (tracking on, the store's local server on), on a fresh store each repeat ("cold": the
  command starts the store's local server, which starts the Prefect API and imports the heavy libraries;
  the target row) and, as information, with a warm local server and the corpus already in the store
  ("warm": a new ngram artifact, only the ngram step runs). The work of a command runs in the local
  server's processes, so its CPU is the client's process tree (RUSAGE_CHILDREN) plus the growth of the
  server's process tree over the run, read from /proc (utime + stime + reaped children's, of the server,
  the forked command it reaps and the Prefect API server, a child of the server). The server's own report
  of the forked command (``CORPUSFORGE_SERVER_RUSAGE``) is printed beside it (and checked to be part of
  that growth), so the split is: client, forked command, Prefect API, server process (its imports).
  Every server the script starts is stopped (``corpusforge server stop --store X``) in a ``finally``.
- **Measurement**: repeats interleaved (ours, lmplz, lmplz, ours, ...) after one untimed round; medians
  and minimums; CPU = user + system of the whole process tree (every thread and child), steadier than
  wall on this shared machine; peak RSS of the largest process; the load average before and after.
  Every timed run happens under the machine's shared benchmark lock (flock(2) on /tmp/cf-bench.lock, the
  one ``flock /tmp/cf-bench.lock CMD`` takes), held once over all of them (skipped when a parent process
  holds it already, e.g. ``flock /tmp/cf-bench.lock benchmarks/run_all.py``), so no other CPU-heavy
  benchmark overlaps them; the wait is printed and not timed.
- **Quality**: perplexities on ptb.valid/test (``<unk>`` renamed alike) of our model (our scorer and the
  ``kenlm`` module on our ARPA) and of lmplz's ARPA (``kenlm`` module), next to ../shared/DATA.md.

Without ../shared (PTB) or without lmplz (build it: ``../shared/tools/build-kenlm.sh ../kenlm-build``) the
script says so, prints what it can, and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import REPO, SHARED, Series, emit, header, interleave, loadavg, quiet_env, row, run_process, venv_bin  # noqa: E402

PTB = SHARED / "corpora" / "ptb"
KENLM_PPL = {3: {"test": 148.2815, "valid": 157.7653}, 5: {"test": 141.1862, "valid": 148.0074}}  # DATA.md
PYTHON_PATH_TARGET, CLI_TARGET = 1.0, 1.5
LOCK = "/tmp/cf-bench.lock"  # shared with the other CPU-heavy benchmarks of this machine

# Runs a command and reports its process tree's wall, CPU and peak RSS (RUSAGE_CHILDREN of a fresh process,
# so nothing of an earlier run leaks in; this probe's own start-up is not counted on either side).
PROBE = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[2:], shell=sys.argv[1] == "sh", capture_output=True, text=True, timeout=900)
wall = time.perf_counter() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "cpu": r.ru_utime + r.ru_stime, "rss_mb": r.ru_maxrss / 1024,
                  "rc": p.returncode, "stdout": p.stdout[-4000:], "stderr": p.stderr[-4000:]}))
"""

# The Python path: imports first (not timed), then count -> estimate -> ARPA, timed with the CPU of every thread.
CHILD = r"""
import json, sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
import duckdb, numpy, zlib
import corpusforge.models.ngram, corpusforge.models.ngram_arpa, corpusforge.models.ngram_arpa_text, corpusforge.storage.ngram_counts
from corpusforge.models.ngram_arpa import write_arpa
from corpusforge.tasks.ngram.build import estimate_from_corpus
from corpusforge.tasks.ngram.config import NgramConfig
cfg = NgramConfig(order={order}, smoothing="modified-kneser-ney", memory_limit={memory!r},
                  temp_directory={spill!r}, threads={threads})
out = Path({out!r})
out.mkdir(parents=True, exist_ok=True)
marks = [(time.perf_counter(), time.process_time())]
model, summary, tables = estimate_from_corpus(Path({corpus!r}), out, cfg,
                                              on_progress=lambda done, total: marks.append((time.perf_counter(), time.process_time())))
write_arpa(model, out / {arpa!r})
marks.append((time.perf_counter(), time.process_time()))
phase = lambda i, k: marks[i + 1][k] - marks[i][k]
print(json.dumps({{"wall": marks[-1][0] - marks[0][0], "cpu": marks[-1][1] - marks[0][1],
                  "count_cpu": phase(0, 1), "estimate_cpu": phase(1, 1), "arpa_cpu": phase(2, 1),
                  "count_wall": phase(0, 0), "estimate_wall": phase(1, 0), "arpa_wall": phase(2, 0),
                  "ngrams": sum(len(c) for _, c in tables)}}))
"""


def probe(cmd: list[str], shell: bool = False, env: dict | None = None) -> dict:
    run = run_process([sys.executable, "-c", PROBE, "sh" if shell else "exec", *cmd], env=env, timeout=1800)
    result = json.loads(run.stdout)
    if result["rc"] != 0:
        raise RuntimeError(f"{cmd[:3]} exited {result['rc']}: {result['stderr'][-2000:]}")
    return result


def find_kenlm(explicit: str | None) -> Path | None:
    candidates = [Path(explicit)] if explicit else []
    candidates += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    candidates += [REPO.parent / "kenlm-build" / "kenlm" / "build" / "bin", Path.home() / ".cache/kenlm/kenlm/build/bin"]
    for d in candidates:
        if (d / "lmplz").is_file() and os.access(d / "lmplz", os.X_OK):
            return d
    return None


def memory_setting() -> tuple[str, str]:
    """(lmplz -S, DuckDB memory_limit): 20% of physical RAM on both sides."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return "20%", f"{int(total * 0.2 / 1e6)}MB"


def build_corpus_artifact(store_root: Path, text: Path) -> Path:
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.corpus.config import corpus_config_from_dict
    from corpusforge.tasks.corpus.merge import build_corpus, resolve_sources
    from corpusforge.tasks.corpus.shard import build_corpus_shard

    cfg = corpus_config_from_dict({"name": "ptb-train", "sources": [str(text)], "reader": {"txt_mode": "line"},
                                   "clean": {"preset": "raw"}, "dedup": {"exact": False},
                                   "split": {"valid": 0, "test": 0}, "validate": {"max_chars": 100_000_000}})
    store = ArtifactStore(store_root)
    shards = [build_corpus_shard(r, cfg, store) for r in resolve_sources(cfg)]
    return Path(build_corpus(shards, cfg, store).path)


def proc_cpu_table() -> tuple[dict[int, list[int]], dict[int, tuple[float, float]]]:
    """Every live process: its children, and (own CPU s, CPU s of its reaped children) from /proc/PID/stat."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, tuple[float, float]] = {}
    hz = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        # utime stime | cutime cstime (children this process waited for, their descendants included)
        cpu[int(entry)] = ((int(fields[11]) + int(fields[12])) / hz, (int(fields[13]) + int(fields[14])) / hz)
    return children, cpu


def tree_cpu(root_pid: int | None, table=None) -> float:
    """CPU seconds (user + system, reaped children included) of a live process and all its descendants."""
    if not root_pid:
        return 0.0
    children, cpu = table or proc_cpu_table()
    total, stack = 0.0, [root_pid]
    while stack:
        pid = stack.pop()
        total += sum(cpu.get(pid, (0.0, 0.0)))
        stack.extend(children.get(pid, []))
    return total


def server_state(store: Path) -> dict:
    try:
        return json.loads((store / "prefect" / "local-server.json").read_text())
    except (OSError, ValueError):
        return {}


def server_cpu(store: Path) -> dict[str, float]:
    """The store's local server's CPU now: its whole tree, and the Prefect API's subtree (a child of it)."""
    state = server_state(store)
    table = proc_cpu_table()
    return {"tree": tree_cpu(state.get("pid"), table), "prefect": tree_cpu(state.get("prefect_pid"), table)}


def stop_server(store: Path) -> None:
    """`corpusforge server stop --store X` (then SIGTERM if it is still there)."""
    if not server_state(store):
        return
    subprocess.run([venv_bin("corpusforge"), "server", "stop", "--store", str(store)], env=quiet_env(),
                   capture_output=True, timeout=120, check=False)
    pid = server_state(store).get("pid")
    if not pid:
        return
    for i in range(600):
        if not alive(int(pid)):
            return
        if i == 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def lock_held_above() -> bool:
    """An ancestor holds the benchmark lock already (run as `flock /tmp/cf-bench.lock ... run_all.py`): taking it
    again from here would wait for ever."""
    pid = os.getppid()
    while pid > 1:
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == LOCK for fd in os.listdir(f"/proc/{pid}/fd")):
                return True
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            return False
    return False


@contextlib.contextmanager
def bench_lock():
    """The shared benchmark lock (flock(2) on /tmp/cf-bench.lock, the lock `flock /tmp/cf-bench.lock CMD` takes)
    held over every timed run of this script, so no other CPU-heavy benchmark overlaps them. Taken once: the
    lock is not fair, and a short release between runs lets a waiting whole benchmark in for many minutes."""
    if lock_held_above():
        print(f"   {LOCK}: held by a parent process already")
        yield
        return
    with open(LOCK, "a") as fh:
        t = time.perf_counter()
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"   waiting for {LOCK} (another benchmark is running) ...", flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
            print(f"   got {LOCK} after {time.perf_counter() - t:.0f} s; load average {loadavg()}", flush=True)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class Sides:
    """The measured commands of one order; each call is one timed run."""

    def __init__(self, args, tmp: Path, kenlm: Path | None, corpus: Path, text: Path, order: int):
        self.args, self.tmp, self.kenlm, self.corpus, self.text, self.order = args, tmp, kenlm, corpus, text, order
        self.lmplz_memory, self.duck_memory = memory_setting()
        self.spill = tmp / "spill"
        self.spill.mkdir(exist_ok=True)
        self.runs = 0
        self.started_stores: list[Path] = []
        self.phases: dict[str, Series] = {}

    def _next(self, name: str) -> Path:
        self.runs += 1
        return self.tmp / f"{name}-o{self.order}-{self.runs}"

    def ours(self, suffix: str = ".arpa.gz") -> dict:
        out = self._next("ours")
        code = CHILD.format(repo=str(REPO), order=self.order, memory=self.duck_memory, spill=str(self.spill),
                            threads=0, out=str(out), corpus=str(self.corpus), arpa="model" + suffix)
        result = probe([sys.executable, "-c", code])
        inner = json.loads(result["stdout"].strip().splitlines()[-1])
        for key in ("count_cpu", "estimate_cpu", "arpa_cpu", "count_wall", "estimate_wall", "arpa_wall"):
            self.phases.setdefault(key + suffix, Series()).add(inner[key])
        shutil.copyfile(out / ("model" + suffix), self.tmp / f"ours-o{self.order}{suffix}")  # for the quality check
        shutil.rmtree(out, ignore_errors=True)
        return {"wall": inner["wall"], "cpu": inner["cpu"], "process_wall": result["wall"],
                "process_cpu": result["cpu"], "rss_mb": result["rss_mb"], "ngrams": inner["ngrams"]}

    def lmplz(self, gzip: bool = True) -> dict:
        out = self.tmp / f"lmplz-o{self.order}.arpa"
        base = (f"'{self.kenlm}/lmplz' -o {self.order} -S {self.lmplz_memory} -T '{self.spill}' "
                f"--text '{self.text}'")
        cmd = f"{base} | gzip -1 > '{out}.gz'" if gzip else f"{base} --arpa '{out}'"
        result = probe([cmd], shell=True)
        return {"wall": result["wall"], "cpu": result["cpu"], "rss_mb": result["rss_mb"]}

    def cli(self, warm_store: Path | None = None) -> dict:
        """One `ngram estimate` command: on a fresh store (cold: the command starts the store's local server,
        which starts the Prefect API) or on ``warm_store`` (server up, corpus in the store).

        CPU = the client's process tree (RUSAGE_CHILDREN of the probe) + the local server's process tree's
        growth over the run, read from /proc: the server process itself, the forked command it reaped (cutime)
        and the Prefect API server with its children. The server's own report of the forked command
        (CORPUSFORGE_SERVER_RUSAGE) is kept beside it as a check: it must be part of the server's growth."""
        n = self._next("cli")
        store = warm_store or (self.tmp / f"store-{n.name}")
        name = [] if warm_store is None else ["--set", f"ngram.name=warm-{self.runs}"]  # a new artifact each time
        report = self.tmp / f"{n.name}.rusage.jsonl"
        cmd = [venv_bin("corpusforge"), "ngram", "estimate", str(self.text), "--order", str(self.order),
               "--smoothing", "modified-kneser-ney", "--arpa", f"{n}.arpa.gz", "--json", "--store", str(store),
               "--set", f"memory_limit={self.duck_memory}", "--set", f"temp_directory={self.spill}", *name]
        if warm_store is None:
            self.started_stores.append(store)
        try:
            before = server_cpu(store) if warm_store is not None else {"tree": 0.0, "prefect": 0.0}
            result = probe(cmd, env=quiet_env(CORPUSFORGE_SERVER_RUSAGE=str(report)))
            after = server_cpu(store)  # the server replies after reaping the command: its CPU is in cutime
            delegated = report.exists()
            if not delegated:  # ran in the client's own process: say why (the server's log has it)
                log = (store / "logs" / "local-server.log")
                why = [line for line in (log.read_text(errors="replace").splitlines() if log.exists() else [])
                       if "code changed" in line or "refused" in line or "error" in line.lower()]
                print(f"    ({'cold' if warm_store is None else 'warm'} run {self.runs}: NOT run by the local "
                      f"server, ran in the client; server log: {why[-1][-120:] if why else 'nothing said'})")
        finally:
            if warm_store is None:
                stop_server(store)
                shutil.rmtree(store, ignore_errors=True)
        try:
            payload = json.loads(result["stdout"][result["stdout"].index("{"):])
        except ValueError:
            payload = {}
        if warm_store is not None and payload.get("reused"):
            raise RuntimeError("the warm CLI run reused an earlier artifact: nothing was estimated")
        try:
            command = sum(json.loads(line)["cpu"] for line in report.read_text().splitlines() if line.strip())
        except (OSError, ValueError, KeyError):
            command = float("nan")  # ran in the client's own process (no local server)
        server = after["tree"] - before["tree"]
        prefect = after["prefect"] - before["prefect"]
        if server + 0.05 < command:
            raise RuntimeError(f"server tree grew {server:.2f} CPU-s, less than its forked command's {command:.2f}")
        if not Path(f"{n}.arpa.gz").is_file():
            raise RuntimeError("the CLI wrote no ARPA")
        Path(f"{n}.arpa.gz").unlink()
        return {"delegated": float(delegated), "wall": result["wall"], "cpu": result["cpu"] + server,
                "client_cpu": result["cpu"],
                "server_cpu": server, "command_cpu": command, "prefect_cpu": prefect,
                "server_other_cpu": server - prefect - (command if command == command else 0.0),
                "rss_mb": max(result["rss_mb"], json.loads(report.read_text().splitlines()[-1]).get("maxrss_kb", 0) / 1024
                              if report.exists() else 0.0)}


def summary_line(label: str, s: dict[str, Series], keys=("cpu", "wall")) -> str:
    return f"  {label:<42}" + "  ".join(f"{k} {s[k]}" for k in keys if k in s)


def ratio_rows(rows: list, case: str, ours: dict, anchor: dict | None, target: float | None) -> None:
    for metric in ("cpu", "wall"):
        o = ours[metric].median
        a = anchor[metric].median if anchor else None
        met = None if (a is None or target is None) else o / a <= target
        rows.append(row("ngram", case, f"{metric} s (median)", round(o, 3), None if a is None else round(a, 3),
                        f"≤{target}x" if target else "", met))


def quality(order: int, tmp: Path, corpus: Path, ours_arpa: Path, lmplz_arpa: Path | None) -> dict:
    """Perplexities (renamed <unk>, like the training text) next to DATA.md's KenLM figures."""
    from corpusforge.tasks.ngram.build import estimate_from_corpus
    from corpusforge.tasks.ngram.config import NgramConfig

    out = tmp / f"quality-o{order}"
    out.mkdir()
    model, _, _ = estimate_from_corpus(corpus, out, NgramConfig(order=order))
    result = {}
    splits = {s: [["_unk_" if w == "<unk>" else w for w in line.split()]
                  for line in (PTB / f"ptb.{s}.txt").read_text().splitlines() if line.split()] for s in ("valid", "test")}
    for split, sents in splits.items():
        result[f"ours_{split}"] = model.evaluate(sents)["perplexity"]
    try:
        import kenlm
    except ImportError:
        return result
    for label, path in (("ours_arpa_kenlm", ours_arpa), ("lmplz_arpa_kenlm", lmplz_arpa)):
        if path is None or not path.exists():
            continue
        ken = kenlm.Model(str(path))
        for split, sents in splits.items():
            total = sum(ken.score(" ".join(s), bos=True, eos=True) for s in sents)
            result[f"{label}_{split}"] = 10 ** (-total / sum(len(s) + 1 for s in sents))
    return result


def measure(args, tmp: Path, kenlm: Path | None, corpus: Path, text: Path, rows: list) -> None:
    """Every timed run (under the benchmark lock): the Python path per order, then the CLI rows."""
    duck_memory = memory_setting()[1]
    for order in ([] if args.cli_only else args.orders):
        print(f"\n-- order {order}: Python path (train.parquet -> counts -> estimate -> model.arpa.gz), "
              f"{args.repeat} interleaved repeats; load average {loadavg()}")
        s = Sides(args, tmp, kenlm, corpus, text, order)
        sides = {"ours": s.ours}
        if kenlm:
            sides["lmplz"] = s.lmplz
        res = interleave(sides, args.repeat)
        ours, anchor = res["ours"], res.get("lmplz")
        print(summary_line("ours, counting + estimate + ARPA.gz", ours))
        print(summary_line("ours, whole process incl. imports", ours, ("process_cpu", "process_wall")))
        print("  ours by phase (CPU s, median): " + ", ".join(
            f"{k.split('_')[0]} {s.phases[k + '.arpa.gz'].median:.3f}" for k in ("count_cpu", "estimate_cpu", "arpa_cpu")))
        print(f"  ours peak RSS {ours['rss_mb'].median:.0f} MB; {int(ours['ngrams'].median):,} n-grams")
        if anchor:
            print(summary_line("lmplz | gzip -1 (whole process)", anchor))
            print(f"  lmplz peak RSS {anchor['rss_mb'].median:.0f} MB")
            for m in ("cpu", "wall"):
                print(f"  ratio ours/lmplz {m}: median {ours[m].median / anchor[m].median:.2f}x, "
                      f"min {ours[m].min / anchor[m].min:.2f}x")
        ratio_rows(rows, f"o{order} Python path, ARPA.gz", ours, anchor, PYTHON_PATH_TARGET)
        rows.append(row("ngram", f"o{order} Python path whole process (imports incl.)", "cpu s (median)",
                        round(ours["process_cpu"].median, 3), round(anchor["cpu"].median, 3) if anchor else None))
        if args.plain:
            plain = interleave({"ours": lambda: s.ours(".arpa"),
                                **({"lmplz": lambda: s.lmplz(gzip=False)} if kenlm else {})}, args.repeat)
            print(summary_line("plain ARPA: ours", plain["ours"]))
            if kenlm:
                print(summary_line("plain ARPA: lmplz --arpa", plain["lmplz"]))
            ratio_rows(rows, f"o{order} Python path, plain ARPA", plain["ours"], plain.get("lmplz"), None)
        q = quality(order, tmp, corpus, tmp / f"ours-o{order}.arpa.gz",
                    tmp / f"lmplz-o{order}.arpa.gz" if kenlm else None)
        for split in ("valid", "test"):
            ref = KENLM_PPL[order][split]
            figures = ", ".join(f"{k[:-len(split) - 1]} {v:.4f} ({v / ref - 1:+.5%})" for k, v in q.items()
                                if k.endswith(split))
            print(f"  {split} perplexity vs DATA.md's KenLM {ref}: {figures}")
        if "ours_arpa_kenlm_test" in q and "lmplz_arpa_kenlm_test" in q:
            rel = q["ours_arpa_kenlm_test"] / q["lmplz_arpa_kenlm_test"] - 1
            rows.append(row("ngram", f"o{order} test perplexity (kenlm on each ARPA)", "perplexity",
                            round(q["ours_arpa_kenlm_test"], 4), round(q["lmplz_arpa_kenlm_test"], 4),
                            "±0.0004%", abs(rel) <= 4e-6))
    if not args.no_cli:
        order = max(args.orders)
        s = Sides(args, tmp, kenlm, corpus, text, order)
        warm = tmp / "warm-store"
        try:
            probe([venv_bin("corpusforge"), "ngram", "estimate", str(text), "--order", "2", "--json", "--store",
                   str(warm), "--set", f"memory_limit={duck_memory}", "--set", f"temp_directory={s.spill}"],
                  env=quiet_env())  # untimed: the corpus in the store, the local server up and warm
            print(f"\n-- order {order}: CLI `corpusforge ngram estimate TRAIN --order {order} --smoothing "
                  f"modified-kneser-ney --arpa OUT.arpa.gz --json --set memory_limit={duck_memory}`, "
                  f"{args.cli_repeat} interleaved repeats; load average {loadavg()}")
            sides = {"cold": s.cli, "warm": lambda: s.cli(warm_store=warm)}
            if kenlm:
                sides["lmplz"] = s.lmplz
            res = interleave(sides, args.cli_repeat)
        finally:
            for store in [warm, *s.started_stores]:
                stop_server(store)
        for name in ("cold", "warm"):  # every run, so a mixed median can be seen for what it is
            r = res[name]
            print(f"  {name} runs (cpu/wall s): " + ", ".join(
                f"{c:.2f}/{w:.2f}{'' if d else ' (NOT delegated)'}" for c, w, d in
                zip(r["cpu"].values, r["wall"].values, r["delegated"].values)))
            kept = [i for i, d in enumerate(r["delegated"].values) if d]
            if kept and len(kept) < len(r["delegated"].values):
                # the working tree's code changed under the server (another engineer's edit): that run
                # fell back to running in the client; the target row takes the runs the server ran
                res[name] = {k: Series([v.values[i] for i in kept]) for k, v in r.items()}
                print(f"    {name}: figures below from the {len(kept)} delegated run(s) only")
        for name, label in (("cold", "CLI, fresh store (starts the local server)"),
                            ("warm", "CLI, warm local server, corpus in store")):
            r = res[name]
            print(summary_line(label, r))
            print(f"    CPU-s (median): client tree {r['client_cpu'].median:.2f} + server tree "
                  f"{r['server_cpu'].median:.2f} (= forked command {r['command_cpu'].median:.2f}, Prefect API "
                  f"{r['prefect_cpu'].median:.2f}, server process {r['server_other_cpu'].median:.2f}); "
                  f"peak RSS {r['rss_mb'].median:.0f} MB")
        if kenlm:
            print(summary_line("lmplz | gzip -1", res["lmplz"]))
            for name in ("cold", "warm"):
                print(f"  ratio {name}/lmplz: " + ", ".join(
                    f"{m} median {res[name][m].median / res['lmplz'][m].median:.2f}x "
                    f"(min {res[name][m].min / res['lmplz'][m].min:.2f}x)" for m in ("cpu", "wall")))
        ratio_rows(rows, f"o{order} CLI, fresh store", res["cold"], res.get("lmplz"), CLI_TARGET)
        ratio_rows(rows, f"o{order} CLI, warm server + corpus in store", res["warm"], res.get("lmplz"), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="interleaved repeats of the Python path (default 5)")
    ap.add_argument("--cli-repeat", type=int, default=3, help="interleaved repeats of the CLI (default 3)")
    ap.add_argument("--orders", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--quick", action="store_true", help="order 3 only, 2 repeats")
    ap.add_argument("--plain", action="store_true", help="also compare plain (uncompressed) ARPA output")
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI rows")
    ap.add_argument("--cli-only", action="store_true", help="only the CLI rows (at the highest of --orders)")
    ap.add_argument("--kenlm-bin", help="directory holding lmplz (default: PATH, ../kenlm-build, ~/.cache/kenlm)")
    args = ap.parse_args()
    if args.quick:
        args.orders, args.repeat, args.cli_repeat = [3], 2, 2
    header("ngram: corpusforge vs KenLM lmplz (PTB, modified Kneser-Ney, gzipped ARPA on both sides)")
    if not (PTB / "ptb.train.txt").exists():
        print(f"   {PTB} is missing (no ../shared): nothing to measure")
        emit("ngram", [], skipped="no ../shared")
        return
    kenlm = find_kenlm(args.kenlm_bin)
    lmplz_memory, duck_memory = memory_setting()
    print(f"   lmplz: {kenlm / 'lmplz' if kenlm else 'NOT FOUND (build: ../shared/tools/build-kenlm.sh ../kenlm-build)'}"
          f"; memory: lmplz -S {lmplz_memory}, DuckDB memory_limit {duck_memory}; threads: DuckDB {os.cpu_count()} "
          f"+ 1 ARPA writer, lmplz default")
    rows: list = []
    with tempfile.TemporaryDirectory(prefix="ngram-bench-") as d:
        tmp = Path(d)
        text = tmp / "ptb.train.unk-renamed.txt"
        text.write_text((PTB / "ptb.train.txt").read_text().replace("<unk>", "_unk_"))
        corpus = build_corpus_artifact(tmp / "corpus-store", text)
        with bench_lock():
            measure(args, tmp, kenlm, corpus, text, rows)
    print(f"\n   load average at the end {loadavg()}")
    if not kenlm:
        print("   lmplz not found: our side only, no ratios (see above for how to build it)")
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        print(f"   {r['case']:<48} {r['metric']:<16} ours {r['ours']:<10} anchor {r['anchor']!s:<10} "
              f"{ratio:<7} {r['target']:<9} {'' if r['met'] is None else ('met' if r['met'] else 'NOT met')}")
    emit("ngram", rows, lmplz=str(kenlm / "lmplz") if kenlm else None, memory={"lmplz": lmplz_memory,
         "duckdb": duck_memory}, orders=args.orders, repeats=args.repeat, cli_repeats=args.cli_repeat)


if __name__ == "__main__":
    main()
