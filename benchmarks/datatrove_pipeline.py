"""The anchor of benchmarks/corpus_throughput.py: the corpus step's work done with datatrove, as its own process.

    python benchmarks/datatrove_pipeline.py INPUT_DIR WORK_DIR [--workers 2] [--minhash] [--inner]

Read every file of INPUT_DIR (.txt: one document per line, .jsonl, .csv: a ``text`` field) -> normalize as
corpusforge's ``lm`` preset does (control characters removed, NFC, horizontal whitespace runs -> one space,
CRLF -> LF, spaces around line breaks and at the ends stripped) -> drop empty documents -> exact dedup
(datatrove's three stages: signatures, find duplicates, filter) or, with ``--minhash``, MinHash dedup
(datatrove's four stages, 9 buckets x 13 hashes, 5-grams: the banding corpusforge uses for threshold 0.8)
-> Parquet. ``--workers`` local workers, one task per input file. The last stage re-reads the input, as
datatrove's own dedup examples do (its dedup filters match documents by their position in the task).

With ``--inner`` the script imports everything first and prints ``INNER_JSON {"cpu": ..., "wall": ...}``:
CPU seconds of this process and its workers for the pipeline alone (the inner loop). datatrove's pool
workers are children of a forkserver that nobody waits for, so this process makes itself their reaper
(PR_SET_CHILD_SUBREAPER), stops the forkserver and waits for every descendant before reading its
RUSAGE_CHILDREN; otherwise the workers' CPU would not be counted at all.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
import time
import unicodedata
from pathlib import Path

CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
CRLF, HSPACE, EOL_SPACE, BLANKS = re.compile(r"\r\n?"), re.compile(r"[^\S\n]+"), re.compile(r" ?\n ?"), re.compile(r"\n{3,}")


def build_steps():
    from datatrove.pipeline.base import PipelineStep
    from datatrove.pipeline.readers.base import BaseDiskReader

    class LinesReader(BaseDiskReader):
        """Plain text, one document per line (datatrove has no such reader); undecodable lines are skipped."""

        name = "lines"

        def read_file(self, filepath: str):
            with self.data_folder.open(filepath, "rb") as f:
                for lineno, raw in enumerate(f, start=1):
                    try:
                        text = raw.decode("utf-8").rstrip("\n").rstrip("\r")
                    except UnicodeDecodeError:
                        continue
                    doc = self.get_document_from_dict({"text": text, "id": f"{filepath}:{lineno}"}, filepath, lineno)
                    if doc:
                        yield doc

    class Normalize(PipelineStep):
        """corpusforge's `lm` cleaning, per document."""

        name = "normalize"

        def run(self, data, rank: int = 0, world_size: int = 1):
            for doc in data:
                text = CONTROLS.sub("", doc.text)
                text = unicodedata.normalize("NFC", text) if not text.isascii() else text
                text = BLANKS.sub("\n\n", EOL_SPACE.sub("\n", HSPACE.sub(" ", CRLF.sub("\n", text)))).strip()
                doc.text = text
                yield doc

    from datatrove.utils.word_tokenizers import WordTokenizer

    class SplitWords(WordTokenizer):
        """Words split on whitespace, as corpusforge's shingles are (datatrove's own need spaCy)."""

        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    return LinesReader, Normalize, SplitWords


def reader_for(path: Path, input_dir: str, LinesReader):
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.readers.csv import CsvReader

    suffix = path.suffix
    glob = f"*{suffix}"
    if suffix == ".jsonl":
        return JsonlReader(input_dir, glob_pattern=glob, compression=None)
    if suffix == ".csv":
        return CsvReader(input_dir, glob_pattern=glob, compression=None)
    return LinesReader(input_dir, glob_pattern=glob)


def run(input_dir: str, work: str, workers: int, minhash: bool) -> None:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.filters import LambdaFilter
    from datatrove.pipeline.writers import ParquetWriter

    LinesReader, Normalize, SplitWords = build_steps()
    files = sorted(Path(input_dir).iterdir())
    suffixes = sorted({p.suffix for p in files})
    if len(suffixes) != 1:
        raise SystemExit(f"one format per input directory, got {suffixes}")
    tasks = len(files)

    def front():
        return [reader_for(files[0], input_dir, LinesReader), Normalize(), LambdaFilter(lambda doc: bool(doc.text))]

    def executor(pipeline, name: str, n_tasks: int, depends=None):
        return LocalPipelineExecutor(pipeline=pipeline, tasks=n_tasks, workers=min(workers, n_tasks),
                                     logging_dir=f"{work}/logs/{name}", depends=depends, skip_completed=False)

    writer = ParquetWriter(f"{work}/out", compression="zstd")
    if minhash:
        from datatrove.pipeline.dedup import (MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter,
                                              MinhashDedupSignature)
        from datatrove.pipeline.dedup.minhash import MinhashConfig

        cfg = MinhashConfig(n_grams=5, num_buckets=9, hashes_per_bucket=13, seed=1)
        signature = MinhashDedupSignature(f"{work}/sigs", config=cfg, language=SplitWords())
        s1 = executor([*front(), signature], "sigs", tasks)
        s2 = executor([MinhashDedupBuckets(f"{work}/sigs", f"{work}/buckets", config=cfg)], "buckets",
                      cfg.num_buckets, depends=s1)
        s3 = executor([MinhashDedupCluster(f"{work}/buckets", f"{work}/remove", config=cfg)], "cluster", 1, depends=s2)
        s4 = executor([*front(), MinhashDedupFilter(f"{work}/remove"), writer], "filter", tasks, depends=s3)
    else:
        from datatrove.pipeline.dedup.exact_dedup import (ExactDedupConfig, ExactDedupFilter, ExactDedupSignature,
                                                          ExactFindDedups)

        from datatrove.utils.hashing import HashConfig

        cfg = ExactDedupConfig(content_getter=lambda doc: doc.text, hash_config=HashConfig(hash_fc="xxhash", precision=64))
        s1 = executor([*front(), ExactDedupSignature(f"{work}/sigs", config=cfg)], "sigs", tasks)
        s3 = executor([ExactFindDedups(f"{work}/sigs", f"{work}/dups", config=cfg)], "find", 1, depends=s1)
        s4 = executor([*front(), ExactDedupFilter(f"{work}/dups", config=cfg), writer], "filter", tasks, depends=s3)
    s4.run()


def become_subreaper() -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def reap_all() -> None:
    """Stop the pool's forkserver (it outlives the pool; it has waited for the workers, so their CPU is in
    its RUSAGE_CHILDREN) and wait for it and for any other descendant that has already exited. The
    resource tracker lives until this process exits; its CPU (a few ms) is left out of the inner loop."""
    try:
        from multiprocess import forkserver

        forkserver._forkserver._stop()
    except Exception:  # noqa: BLE001 - no forkserver started (one worker) or another start method
        pass
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input_dir")
    ap.add_argument("work_dir")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--minhash", action="store_true")
    ap.add_argument("--inner", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("DATATROVE_COLORIZE_LOGS", "0")
    if args.inner:  # imports (and the worker pool's start method) outside the timing
        import datatrove.executor  # noqa: F401
        import datatrove.pipeline.dedup  # noqa: F401
        import datatrove.pipeline.writers  # noqa: F401
        build_steps()
        if not become_subreaper():
            print("warning: not a child subreaper; the workers' CPU may be missing", file=sys.stderr)
    c0, w0 = cpu_seconds(), time.perf_counter()
    run(args.input_dir, args.work_dir, args.workers, args.minhash)
    if args.inner:
        reap_all()
        print("INNER_JSON " + json.dumps({"cpu": cpu_seconds() - c0, "wall": time.perf_counter() - w0}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
