"""Pruned modified Kneser-Ney: corpusforge's ``ngram.prune`` next to KenLM's ``lmplz --prune`` on Penn Treebank.

    .venv/bin/python benchmarks/ngram_prune_vs_kenlm.py [--cases 3:0,0,1 5:0,0,1 5:0,1,1,2] [--repeat 3]
                                                       [--kenlm-bin DIR]

Per case (order: thresholds): the n-grams kept per order on both sides, the perplexity on ptb.valid and ptb.test of
our model (our scorer) and of lmplz's pruned ARPA (the ``kenlm`` module when installed, else our ARPA reader), and
the time of each side: lmplz writing a plain ARPA (``-S 20%``, its whole process) and our Python path
(train.parquet -> DuckDB counts -> pruned estimate -> plain ARPA, in this process after the imports; CPU of every
thread). Input: ptb.train.txt with ``<unk>`` renamed ``_unk_`` on both sides (lmplz refuses a literal ``<unk>``);
valid/test renamed alike. Repeats interleaved (ours, lmplz, lmplz, ours, ...); medians. Without PTB or lmplz (build
it: ``../shared/tools/build-kenlm.sh ../kenlm-build``) the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import SHARED, emit, header, row, run_process  # noqa: E402
from ngram_vs_kenlm import PROBE, find_kenlm, memory_setting  # noqa: E402

PTB = SHARED / "corpora" / "ptb"


def renamed(split: str) -> list[str]:
    return [" ".join("_unk_" if w == "<unk>" else w for w in line.split())
            for line in (PTB / f"ptb.{split}.txt").read_text(encoding="utf-8").splitlines() if line.split()]


def ours(tmp: Path, order: int, prune: list[int]) -> tuple[dict, object]:
    from corpusforge.models.ngram import estimate
    from corpusforge.models.ngram_arpa import write_arpa
    from corpusforge.storage.ngram_counts import DuckSettings, count_ngram_tables

    db = tmp / f"c{order}.duckdb"
    db.unlink(missing_ok=True)
    wall, cpu = time.perf_counter(), time.process_time()
    counted = count_ngram_tables([tmp / "train.parquet"], db, order,
                                 settings=DuckSettings(memory_limit=memory_setting()[1], temp_directory=str(tmp)))
    model = estimate(counted.words, counted.tables, "modified-kneser-ney", contexts=counted.contexts, prune=prune)
    write_arpa(model, tmp / f"ours-o{order}.arpa")
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}, model


def lmplz(tmp: Path, kenlm: Path, order: int, prune: list[int]) -> dict:
    arpa = tmp / f"lmplz-o{order}-{'-'.join(map(str, prune))}.arpa"
    cmd = [str(kenlm / "lmplz"), "-o", str(order), "--prune", *map(str, prune), "-S", memory_setting()[0],
           "-T", str(tmp), "--text", str(tmp / "train.txt"), "--arpa", str(arpa)]
    result = json.loads(run_process([sys.executable, "-c", PROBE, "exec", *cmd], timeout=1800).stdout)
    if result["rc"] != 0:
        raise RuntimeError(f"lmplz exited {result['rc']}: {result['stderr'][-2000:]}")
    return {"wall": result["wall"], "cpu": result["cpu"], "arpa": arpa}


def perplexities(score, splits: dict[str, list[list[str]]]) -> dict[str, float]:
    return {split: score(sents) for split, sents in splits.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["3:0,0,1", "5:0,0,1", "5:0,1,1,2"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kenlm-bin")
    args = ap.parse_args()
    header("ngram prune: corpusforge ngram.prune vs KenLM lmplz --prune (PTB)")
    kenlm = find_kenlm(args.kenlm_bin)
    if not (PTB / "ptb.train.txt").exists() or kenlm is None:
        print("needs ../shared/corpora/ptb and lmplz (../shared/tools/build-kenlm.sh ../kenlm-build); nothing to do")
        return
    from corpusforge.models.ngram_arpa import read_arpa

    tmp = Path(tempfile.mkdtemp(prefix="cf-prune-bench-"))
    try:
        measure(args, tmp, kenlm, read_arpa)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(args, tmp: Path, kenlm: Path, read_arpa) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    train = renamed("train")
    (tmp / "train.txt").write_text("\n".join(train) + "\n", encoding="utf-8")
    pq.write_table(pa.table({"text": train}), tmp / "train.parquet")
    splits = {s: [line.split() for line in renamed(s)] for s in ("valid", "test")}
    try:
        import kenlm as kenlm_module
    except ImportError:
        kenlm_module = None
    rows = []
    for case in args.cases:
        order, prune = int(case.split(":")[0]), [int(t) for t in case.split(":")[1].split(",")]
        times: dict[str, list[dict]] = {"ours": [], "lmplz": []}
        model = theirs = None
        for i in range(args.repeat + 1):  # one untimed round first, then interleaved
            for side in (("ours", "lmplz") if i % 2 else ("lmplz", "ours")):
                if side == "ours":
                    t, model = ours(tmp, order, prune)
                else:
                    t = lmplz(tmp, kenlm, order, prune)
                    theirs = t.pop("arpa")
                if i:
                    times[side].append(t)
        med = {side: {k: statistics.median(t[k] for t in ts) for k in ("wall", "cpu")} for side, ts in times.items()}
        ref = read_arpa(theirs)
        ours_ppl = perplexities(lambda s: model.evaluate(s)["perplexity"], splits)
        if kenlm_module is not None:
            ken = kenlm_module.Model(str(theirs))
            lmplz_ppl = perplexities(lambda s: 10 ** (-sum(ken.score(" ".join(x), bos=True, eos=True) for x in s)
                                                      / sum(len(x) + 1 for x in s)), splits)
            scorer = "kenlm module"
        else:
            lmplz_ppl = perplexities(lambda s: ref.evaluate(s)["perplexity"], splits)
            scorer = "our ARPA reader"
        kept = [len(i) for i in model.ids]
        print(f"\n-- order {order}, prune {prune}: n-grams kept ours {kept}, lmplz {[len(i) for i in ref.ids]}")
        for split in splits:
            rel = ours_ppl[split] / lmplz_ppl[split] - 1
            print(f"  {split}: perplexity ours {ours_ppl[split]:.4f}, lmplz ARPA ({scorer}) {lmplz_ppl[split]:.4f}, "
                  f"relative difference {rel:+.2e}")
            rows.append(row("ngram_prune", f"o{order} prune {','.join(map(str, prune))}", f"{split} perplexity",
                            round(ours_ppl[split], 4), round(lmplz_ppl[split], 4), "equal (rel 5e-4)",
                            abs(rel) <= 5e-4))
        for metric in ("cpu", "wall"):
            print(f"  {metric} (median of {args.repeat}): ours {med['ours'][metric]:.2f} s, lmplz "
                  f"{med['lmplz'][metric]:.2f} s, ratio {med['ours'][metric] / med['lmplz'][metric]:.2f}x")
            rows.append(row("ngram_prune", f"o{order} prune {','.join(map(str, prune))}", f"{metric} s (median)",
                            round(med["ours"][metric], 3), round(med["lmplz"][metric], 3)))
    emit("ngram_prune", rows)


if __name__ == "__main__":
    main()
