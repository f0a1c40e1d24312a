"""Prepare what benchmarks/encoder_gpu.py needs on a bare GPU image (no gensim there): copies the SST-2, PTB and
Multi30k files into one folder (default ``.gpu-data``, which .git/info/exclude ignores; carry it to the GPU machine)
and trains the word2vec vectors the ``sst2-bilstm`` preset starts from, with the preset's settings (skip-gram, 300
dimensions, window 5, 5 negatives, min_count 1, 10 epochs, one thread, seed 1) on the cleaned SST-2 train sentences
(``w2v-sst2``), and the same on SST-2 train + PTB train + Multi30k train English + Tiny Shakespeare (``w2v-more``).
Only the rows of words SST-2 train or dev uses are kept, in float16 (``<name>.npy`` + ``<name>.vocab.txt``).

    python benchmarks/encoder_gpu_prep.py [--out .gpu-data] [--shared ../shared/corpora]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import time
import unicodedata
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "corpora"


def clean(line: str) -> str:
    return " ".join(unicodedata.normalize("NFC", line).split())


def sst2(path: Path) -> list[str]:
    with open(path, encoding="utf-8", newline="") as fh:
        return [clean(r["sentence"]) for r in csv.DictReader(fh, dialect="excel-tab")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / ".gpu-data")
    ap.add_argument("--shared", type=Path, default=SHARED, help="the corpora folder (default ../shared/corpora)")
    args = ap.parse_args()
    out, shared = args.out, args.shared
    out.mkdir(parents=True, exist_ok=True)
    files = {"sst2/train.tsv", "sst2/dev.tsv", "ptb/ptb.train.txt", "ptb/ptb.valid.txt", "multi30k/train.en",
             "multi30k/train.de", "multi30k/val.en", "multi30k/val.de", "multi30k/test_2016_flickr.en",
             "multi30k/test_2016_flickr.de", "tinyshakespeare/input.txt"}
    for f in sorted(files):
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared / f, out / f)
    from gensim.models import Word2Vec

    train = sst2(shared / "sst2/train.tsv")
    keep = {w for s in train + sst2(shared / "sst2/dev.tsv") for w in s.split()}
    more = train + [clean(x) for f in ("ptb/ptb.train.txt", "multi30k/train.en", "tinyshakespeare/input.txt")
                    for x in (shared / f).read_text(encoding="utf-8").splitlines()]
    for name, texts in (("w2v-sst2", train), ("w2v-more", more)):
        t0 = time.perf_counter()
        sentences = [s.split() for s in texts if s]
        if name == "w2v-more":  # the same lowercase world as SST-2's text
            sentences = [[w.lower() for w in s] for s in sentences]
        model = Word2Vec(sentences, sg=1, vector_size=300, window=5, negative=5, min_count=1, epochs=10,
                         workers=1 if name == "w2v-sst2" else 2, seed=1)
        words = [w for w in model.wv.index_to_key if w in keep]
        np.save(out / f"{name}.npy", np.stack([model.wv[w] for w in words]).astype(np.float16))
        (out / f"{name}.vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
        print(f"{name}: {len(sentences)} sentences, {len(model.wv)} words, {len(words)} kept, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
