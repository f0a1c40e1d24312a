"""Tagging throughput of a registered tagger (issue 46): sentences per second of the MLflow pyfunc the tag stage
registers (raw text in: words split, looked up, tagged, spans out; what `mlflow models serve` runs), beside the
same model's inner loop (the sentences' words already split and encoded, batched, forward and decode only), on
the same sentences (the surface text of a CoNLL-U file's sentences, by default UD English-EWT dev: 2,001), with
interleaved repeats. There is no outside anchor doing the same work here (no spaCy model or Flair can be fetched
on this machine): the inner loop is the ceiling the whole path is measured against.

Command: .venv/bin/python benchmarks/tag_throughput.py --store STORE --model NAME [--file dev.conllu] [--repeat 5]
(a store where `corpusforge tag train ... --preset NAME` registered NAME).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SHARED, emit, header, interleave, row  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, type=Path)
    parser.add_argument("--model", required=True, help="the registered model's name (the preset's tag.name)")
    parser.add_argument("--file", type=Path, default=SHARED / "corpora" / "ud-ewt" / "en_ewt-ud-dev.conllu")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import os

    uri = f"sqlite:///{args.store.resolve() / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ["MLFLOW_REGISTRY_URI"] = uri
    import mlflow
    import torch

    from corpusforge.storage.tagged import TagColumns, read_conllu
    from corpusforge.tasks.tag.inference import predict_words

    torch.set_num_threads(args.threads)
    header(f"tagging throughput of models:/{args.model}@latest on {args.file.name}")
    records = [r for r in read_conllu(args.file, TagColumns({"upos": "upos"})) if r.ok]
    texts = [r.text for r in records]
    served = mlflow.pyfunc.load_model(f"models:/{args.model}@latest")
    tagger = served._model_impl.tagger  # a custom-loader pyfunc (tasks/tag/pyfunc.py): its implementation holds it
    words = [r.fields["tokens"] for r in records]
    n_words = sum(len(w) for w in words)

    def whole() -> dict[str, float]:
        start, cpu = time.perf_counter(), time.process_time()
        frame = served.predict(texts)
        assert len(frame) == len(texts)
        wall = time.perf_counter() - start
        return {"wall": wall, "cpu": time.process_time() - cpu, "sentences_per_s": len(texts) / wall}

    def inner() -> dict[str, float]:
        start, cpu = time.perf_counter(), time.process_time()
        tags = predict_words(tagger.model, tagger.vocab, words)
        assert sum(len(t) for t in tags) == n_words
        wall = time.perf_counter() - start
        return {"wall": wall, "cpu": time.process_time() - cpu, "sentences_per_s": len(words) / wall}

    out = interleave({"pyfunc (raw text)": whole, "inner loop (split words)": inner}, args.repeat)
    rows = []
    for side, series in out.items():
        s = series["sentences_per_s"]
        best = len(texts) / series["wall"].min
        print(f"   {side}: {s.median:,.0f} sentences/s median (best {best:,.0f}); wall {series['wall'].median:.2f} s, "
              f"CPU {series['cpu'].median:.2f} s for {len(texts):,} sentences ({n_words:,} words)")
        rows.append(row("tag_throughput", f"{args.model} {side}", "sentences/s", s.median, None,
                        note=f"{len(texts)} sentences, best {best:.0f}"))
    ratio = out["pyfunc (raw text)"]["sentences_per_s"].median / out["inner loop (split words)"]["sentences_per_s"].median
    print(f"   the whole path runs at {ratio:.2f}x the inner loop's rate")
    emit("tag_throughput", rows, model=args.model, file=str(args.file), threads=args.threads)


if __name__ == "__main__":
    main()
