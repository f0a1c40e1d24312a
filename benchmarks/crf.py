"""Our linear-chain CRF (corpusforge.models.crf) beside pytorch-crf (torchcrf.CRF, the reference implementation) on
the same shapes, parameters and batches (issue 46, speed).

Two inner loops, each timed on both sides in interleaved repeats (ours, theirs, ours, ...), median and minimum:
- ``loss``: the negative log-likelihood of a batch's gold tags (forward algorithm + gold path score) and its
  backward pass, as one training step of the head does;
- ``decode``: Viterbi paths of the batch.
Before timing, the two sides must agree: the same log-likelihood per sentence (within 1e-5, computed in float64;
float32's rounding alone leaves ~1e-5 on sentence log-likelihoods of a few hundred nats) and the same paths; the
timing is in float32. Shapes: UD English-EWT UPOS (17 tags, sentences of 1-60 words, mean ~17) and WNUT-17 BIO (13 tags), batch
32, lengths drawn so the batch is padded as a length-bucketed one is not (the harder case: every sentence ends at
another step). The whole process is not compared: both sides are one layer inside the same process.

Command: .venv/bin/python benchmarks/crf.py [--repeat 30] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, header, loadavg, row  # noqa: E402

CASES = {"ewt-upos": 17, "wnut17-bio": 13}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    import torchcrf

    from corpusforge.models.crf import CRF

    torch.set_num_threads(args.threads)
    header(f"CRF: ours vs pytorch-crf {torchcrf.__version__ if hasattr(torchcrf, '__version__') else ''}, "
           f"batch {args.batch}, {args.threads} thread(s)")
    rows = []
    for case, K in CASES.items():
        gen = torch.Generator().manual_seed(0)
        lengths = torch.randint(1, 61, (args.batch,), generator=gen)
        lengths = torch.clamp((lengths.float() * 17 / lengths.float().mean()).round().long(), 1, 60)
        T = int(lengths.max())
        mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)
        emissions = torch.randn(args.batch, T, K, generator=gen)
        tags = torch.randint(0, K, (args.batch, T), generator=gen)
        ours = CRF(K)
        theirs = torchcrf.CRF(K, batch_first=True)
        with torch.no_grad():
            theirs.transitions.copy_(ours.transitions)
            theirs.start_transitions.copy_(ours.start)
            theirs.end_transitions.copy_(ours.end)
        with torch.no_grad():
            # agreement in float64 (the 1e-5 criterion), and what float32's rounding leaves (the timed dtype)
            wide = (ours.double().log_likelihood(emissions.double(), tags, mask)
                    - theirs.double()(emissions.double(), tags, mask, reduction="none")).abs()
            ours.float(), theirs.float()
            narrow = (ours.log_likelihood(emissions, tags, mask) - theirs(emissions, tags, mask, reduction="none")).abs()
            lowest = float(ours.log_likelihood(emissions, tags, mask).min())
        same_paths = ours.decode(emissions, mask) == theirs.decode(emissions, mask)
        print(f"-- {case}: {K} tags, T={T}, words {int(mask.sum())}; |log-likelihood difference| max "
              f"{float(wide.max()):.2e} in float64 ({float(narrow.max()):.2e} in float32, sentence "
              f"log-likelihoods down to {lowest:.0f}); "
              f"same Viterbi paths: {same_paths}")
        if float(wide.max()) > 1e-5 or not same_paths:
            raise SystemExit("the two CRFs disagree: no timing")

        def loss_ours():
            e = emissions.clone().requires_grad_(True)
            (-ours.log_likelihood(e, tags, mask).sum()).backward()

        def loss_theirs():
            e = emissions.clone().requires_grad_(True)
            (-theirs(e, tags, mask, reduction="sum")).backward()

        work = {"loss": (loss_ours, loss_theirs),
                "decode": (lambda: ours.decode(emissions, mask), lambda: theirs.decode(emissions, mask))}
        for name, (mine, ref) in work.items():
            for fn in (mine, ref):  # warm up
                fn()
            times = {"ours": [], "pytorch-crf": []}
            for _ in range(args.repeat):
                for side, fn in (("ours", mine), ("pytorch-crf", ref)):
                    start = time.perf_counter()
                    fn()
                    times[side].append(time.perf_counter() - start)
            med = {s: statistics.median(v) * 1e3 for s, v in times.items()}
            low = {s: min(v) * 1e3 for s, v in times.items()}
            ratio = med["pytorch-crf"] / med["ours"]
            print(f"   {name:6s} ms per batch: ours median {med['ours']:.2f} (min {low['ours']:.2f}), pytorch-crf "
                  f"median {med['pytorch-crf']:.2f} (min {low['pytorch-crf']:.2f}); speed ratio {ratio:.2f}x")
            rows.append(row("crf", case, f"{name} ms/batch (median)", med["ours"], med["pytorch-crf"],
                            target="pytorch-crf time / ours >= 1.0", met=med["ours"] <= med["pytorch-crf"]))
    print(f"   load average after: {loadavg()}")
    emit("crf", rows, repeat=args.repeat, batch=args.batch, threads=args.threads)


if __name__ == "__main__":
    main()
