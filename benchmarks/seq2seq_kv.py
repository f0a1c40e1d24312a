"""What the Transformer's key/value cache saves when decoding, on a trained seq2seq artifact: greedy decoding of the
same sentences with the cache (each step computes one new position per layer) and without it (each step recomputes
the whole prefix), interleaved repeats, ms per decoded token (median and min), and whether both gave the same
tokens. Also beam 4 against greedy (sentences/s).

    .venv/bin/python benchmarks/seq2seq_kv.py SEQ2SEQ_ID SRC_FILE [--store DIR] [--sentences 64] [--repeats 3]

Prints one line of JSON last (and a BENCH_JSON line for benchmarks/run_all.py's table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("artifact")
    ap.add_argument("source", type=Path)
    ap.add_argument("--store", default=os.environ.get("CORPUSFORGE_STORE", ".corpusforge"))
    ap.add_argument("--sentences", type=int, default=64, help="the longest N sources of the file, one batch")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import torch

    from corpusforge.models.batching import pad
    from corpusforge.models.decoding import beam_search, greedy
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.seq2seq.inference import load_translator

    found = Catalog(ArtifactStore(args.store)).get(args.artifact)
    translator = load_translator(found.path)
    model = translator.model.eval()
    d = translator.direction(None)
    lines = args.source.read_text(encoding="utf-8").splitlines()
    ids = sorted(translator.encode(lines, d), key=len)[-args.sentences:]
    src, mask = pad(ids, translator.pad_id, model.cfg.max_len)
    bos, eos, cap = translator.bos_id, translator.eos_id, model.cfg.max_len
    loads = [os.getloadavg()[0]]
    runs: dict[str, list[float]] = {"cached": [], "uncached": [], "beam4": []}
    tokens: dict[str, int] = {}
    outputs: dict[str, list] = {}
    with torch.no_grad():
        for _ in range(args.repeats):  # interleaved: each repeat runs every variant once
            for label in runs:
                started = time.perf_counter()
                if label == "beam4":
                    out = beam_search(model, src, mask, bos, eos, 4, cap, 0.6)
                else:
                    out = greedy(model, src, mask, bos, eos, cap, use_cache=label == "cached")
                seconds = time.perf_counter() - started
                tokens[label] = sum(len(x) + 1 for x in out)
                outputs[label] = out
                runs[label].append(seconds)
    loads.append(os.getloadavg()[0])
    report = {"artifact": found.manifest["id"][:12], "family": translator.spec.get("family"),
              "sentences": len(ids), "threads": torch.get_num_threads(), "repeats": args.repeats,
              "same_tokens": outputs["cached"] == outputs["uncached"], "load_before_after": loads}
    for label, times in runs.items():
        report[label] = {"ms_per_token_median": round(1000 * statistics.median(times) / tokens[label], 3),
                         "ms_per_token_min": round(1000 * min(times) / tokens[label], 3), "tokens": tokens[label],
                         "sentences_per_s_median": round(len(ids) / statistics.median(times), 1)}
    report["cache_speedup_median"] = round(statistics.median(runs["uncached"]) / statistics.median(runs["cached"]), 2)
    print("BENCH_JSON " + json.dumps({"benchmark": "seq2seq_kv", "case": f"{report['family']} greedy, "
                                      f"{len(ids)} longest sources", "metric": "ms per decoded token",
                                      "ours": report["cached"]["ms_per_token_median"],
                                      "anchor": report["uncached"]["ms_per_token_median"],
                                      "note": "anchor: the same model recomputing the prefix at every step"}))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
