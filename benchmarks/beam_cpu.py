"""Beam search, this tree's against the one before issue 51 item 3 (git commit b24192c): the same Transformer
weights, sources, beam and length penalty; the tokens must be equal before anything is timed.

What changed: the cache reorder no longer copies the cross-attention keys and values (the same for every beam of
a source), and a step picks every sentence's next beams on the device (no Python loop over batch x 2K
candidates, one host sync per step instead of a `.tolist()` of the candidates). The anchor is loaded from git
(`git show b24192c:models/decoding.py`) with the cache reorder of that commit (every cached tensor copied).

Model: the multi30k-transformer-cpu preset's shape (3+3 layers, d_model 256, 4 heads, d_ff 512, a 4,000 vocabulary),
randomly initialised with eos made likely enough that hypotheses end at different lengths; a batch of 64 sources of
14 tokens, beam 4, up to 40 tokens. Interleaved repeats, median and minimum, in one process (decoding is an inner
loop: the whole process is not compared).

Command: .venv/bin/python benchmarks/beam_cpu.py [--repeat 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, emit, header, interleave, loadavg, row, timed  # noqa: E402

BEFORE = "b24192c"


def anchor_module():
    source = subprocess.run(["git", "show", f"{BEFORE}:models/decoding.py"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "decoding_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("corpusforge.models.decoding_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--beam", type=int, default=4)
    args = parser.parse_args()

    import torch

    from corpusforge.models import decoding
    from corpusforge.models.transformer.config import TransformerConfig
    from corpusforge.models.transformer.model import Transformer

    class Before(Transformer):
        def reorder_cache(self, cache, index):  # b24192c's: every cached tensor copied
            return tuple(tuple(t.index_select(0, index) for t in layer) for layer in cache)

    torch.set_num_threads(args.threads)
    header(f"beam search (beam {args.beam}): this tree vs {BEFORE}, {args.threads} thread(s)")
    before = anchor_module()
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=4000, pad_id=0, bos_id=1, eos_id=2, d_model=256, n_head=4, n_enc_layer=3,
                            n_dec_layer=3, d_ff=512, dropout=0.1, max_len=256)
    ours = Transformer(cfg)
    with torch.no_grad():
        ours.head.weight[2] *= 6  # eos (tied output row) likely enough to end hypotheses at different lengths
    theirs = Before(cfg)
    theirs.load_state_dict(ours.state_dict())
    src = torch.randint(3, 4000, (64, 14), generator=torch.Generator().manual_seed(1))
    src_mask = torch.ones_like(src, dtype=torch.bool)
    src_mask[::3, 10:] = False

    def run(module, model):
        return module.beam_search(model, src, src_mask, 1, 2, beam=args.beam, max_len=40, length_penalty=0.6)

    a, b = run(decoding, ours), run(before, theirs)
    lengths = sorted(len(t) for t in a)
    print(f"-- 64 sources, output lengths {lengths[0]}-{lengths[-1]} (median {statistics.median(lengths)}); "
          f"same tokens: {a == b}")
    if a != b:
        raise SystemExit("the two beam searches disagree: no timing")
    got = interleave({"ours": timed(lambda: run(decoding, ours)), "before": timed(lambda: run(before, theirs))},
                     args.repeat)
    med = {side: got[side]["s"].median for side in got}
    low = {side: got[side]["s"].min for side in got}
    print(f"   s per batch: ours median {med['ours']:.3f} (min {low['ours']:.3f}), {BEFORE} median "
          f"{med['before']:.3f} (min {low['before']:.3f}); speed-up {med['before'] / med['ours']:.2f}x")
    print(f"   load average after: {loadavg()}")
    emit("beam_cpu", [row("beam_cpu", f"beam {args.beam}, 64 x 14", "s/batch (median)", med["ours"],
                          med["before"], target=f"{BEFORE} time / ours > 1.0", met=med["ours"] < med["before"])],
         repeat=args.repeat, threads=args.threads)


if __name__ == "__main__":
    main()
