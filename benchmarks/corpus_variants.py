"""Corpus stage: corpusforge against itself under different settings, interleaved (an A/B, not an anchor).

    .venv/bin/python benchmarks/corpus_variants.py --variant zstd:shard_compression=zstd \\
        --variant none:shard_compression=none [--sizes 5,20,50] [--repeats 5] [--inner]

Where ``benchmarks/corpus_throughput.py`` compares the stage with datatrove, this script decides between
settings of our own: each ``--variant NAME:KEY=VALUE,...`` is a set of ``corpus.*`` config overrides (``--set``
on the command line) and of environment variables for the process that does the work (``env.NAME=VALUE``, e.g.
``env._RJEM_MALLOC_CONF=dirty_decay_ms:-1``). The work is corpus_throughput's .txt corpora (the same files),
exact dedup, 2 workers, tracking off, no held-out splits.

- whole process (default): the warm side of corpus_throughput, one local server per variant (its environment
  is the variant's, so allocator settings reach the forked command); CPU = client + forked command + the
  server's and its Prefect API's growth, each call on new artifact keys (checked).
- ``--inner``: corpus_throughput's inner loop (a fresh process per call, imports first, then shards + merge timed), with
  the variant's environment; also reports the page faults (minflt) of the timed part.

Every round runs every (size, variant) once, in reverse order every other round; medians and minimums of the
rounds after the warm-up, the marginal MB/s per core per variant (least squares of CPU over MB), peak RSS, and
the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus_throughput as ct  # noqa: E402
from common import SHARED, Series, header, loadavg, run_process  # noqa: E402

def parse_variant(text: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """``name:key=value,env.VAR=value`` -> (name, config overrides, environment)."""
    name, colon, spec = text.partition(":")
    if not name or not colon:
        raise SystemExit(f"--variant {text!r}: give NAME:KEY=VALUE,...")
    pairs: list[list[str]] = []
    for item in filter(None, spec.split(",")):
        key, eq, value = item.partition("=")
        if eq:
            pairs.append([key, value])
        elif pairs:  # a value with commas (env._RJEM_MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1)
            pairs[-1][1] += "," + item
        else:
            raise SystemExit(f"--variant {text!r}: {item!r} is not KEY=VALUE")
    sets = {k: v for k, v in pairs if not k.startswith("env.")}
    env = {k.removeprefix("env."): v for k, v in pairs if k.startswith("env.")}
    return name, sets, env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", required=True, help="NAME:KEY=VALUE,...  (env.VAR=VALUE for the environment)")
    ap.add_argument("--sizes", default="5,20,50", help="corpus sizes in MB (.txt, exact dedup)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--inner", action="store_true", help="time the Python path in a fresh process instead")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/corpusforge-bench-variants"))
    args = ap.parse_args()
    if not (SHARED / "corpora/ptb/ptb.train.txt").is_file():
        print(f"skipped: needs ../shared with corpora/ptb and corpora/tinyshakespeare ({SHARED})")
        return 0
    variants = [parse_variant(v) for v in args.variant]
    sizes = [float(s) for s in args.sizes.split(",") if s]
    header(f"corpus stage, {'inner loop' if args.inner else 'whole process (warm)'}: "
           + " vs ".join(f"{n} ({', '.join(f'{k}={v}' for k, v in {**s, **{'env.' + e: x for e, x in env.items()}}.items()) or 'defaults'})"
                         for n, s, env in variants))
    load_before = loadavg()
    args.workdir.mkdir(parents=True, exist_ok=True)
    base = ct._base_lines()
    corpora = {}
    for size in sizes:
        src = args.workdir / f"src-txt-{size:g}"
        corpora[size] = (src, ct.build_corpus(src, "txt", size, base))

    benches: dict[str, ct.Bench] = {}
    current: dict[str, str] = {}  # the variant whose warm call runs next: its --set overrides
    plain_args = ct.cf_args
    ct.cf_args = lambda *a, **k: plain_args(*a, **k) + [x for key, value in current.items() for x in ("--set", f"{key}={value}")]
    calls = 0
    inner_env = ct.quiet_env(PYTHONHASHSEED="0")

    def call(size: float, name: str, sets: dict[str, str], env: dict[str, str]) -> dict[str, float]:
        nonlocal calls
        src = corpora[size][0]
        if args.inner:
            calls += 1
            store = args.workdir / f"inner-store-{calls}"
            overrides = {k: (float(v) if k == "shard_mb" else v) for k, v in sets.items()}
            run = run_process([sys.executable, "-c", ct.INNER_CF, str(src), str(store), "0", json.dumps(overrides)],
                              env={**inner_env, **env}, cwd=str(ct.REPO))
            shutil.rmtree(store, ignore_errors=True)
            res = json.loads(run.stdout.split("INNER_JSON ", 1)[1])
            return {"cpu": res["cpu"], "wall": res["wall"], "minflt": res["minflt"], "rss": run.peak_rss_mb}
        current.clear()
        current.update(sets)
        return benches[name].corpusforge_warm(src, False)()

    results: dict[tuple[float, str], dict[str, Series]] = {}
    try:
        if not args.inner:
            for name, _, env in variants:
                (args.workdir / f"warm-{name}").mkdir(exist_ok=True)
                bench = ct.Bench(args.workdir / f"warm-{name}")
                bench.warm_env.update(env)
                bench.start_server()
                benches[name] = bench
        order = [(size, v) for size in sizes for v in variants]
        for r in range(args.warmup + args.repeats):
            for size, (name, sets, env) in (order if r % 2 == 0 else order[::-1]):
                out = call(size, name, sets, env)
                if r >= args.warmup:
                    for key, value in out.items():
                        results.setdefault((size, name), {}).setdefault(key, Series()).add(value)
    finally:
        for bench in benches.values():
            bench.stop_server()
    print(f"   load average before {load_before}, after {loadavg()}; {args.repeats} interleaved repeats after "
          f"{args.warmup} warm-up round(s); MB = MB of text")
    for name, _, _ in variants:
        for size in sizes:
            s = results[(size, name)]
            extra = f"  minflt {s['minflt'].median:,.0f}" if "minflt" in s else (
                f"  [command {s['command_cpu'].median:.2f} + Prefect API {s['prefect_cpu'].median:.2f}]")
            print(f"   {name:12s} {corpora[size][1]:5.1f} MB  cpu {s['cpu']}  wall {s['wall']}  peak RSS "
                  f"{s['rss'].median:.0f} MB{extra}")
        mb = [corpora[size][1] for size in sizes]
        med = ct.marginal(mb, [results[(size, name)]["cpu"].median for size in sizes])
        low = ct.marginal(mb, [results[(size, name)]["cpu"].min for size in sizes])
        grew = med is not None and low is not None and math.isfinite(med) and math.isfinite(low)
        print(f"   {name:12s} marginal {med:.1f} MB/s/core (medians), {low:.1f} (minimums)" if grew else
              f"   {name:12s} marginal: CPU did not grow with size (noise larger than the work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
