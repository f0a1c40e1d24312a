"""The BiLSTM classifier's training step beside a plain padded ``nn.LSTM`` loop (issue 51 item 1), same shapes,
weights and batches: the sst2-bilstm preset (15k words x 300, one bidirectional LSTM of 300, max pooling, dropout
0.5, batch 64, SST-2-like lengths: Poisson(9.4) + 1 words).

- ours: ``RNNClassifier`` (each LSTM direction run over the padded batch by corpusforge.models.recurrent, the
  backward one over each row's real tokens reversed: no padding read) with the trainer's optimizer
  (``make_optimizer``: on CPU torch's default AdamW, as the anchor), clip 1.0;
- anchor: what a plain PyTorch loop writes: embedding, dropout, ``nn.LSTM`` over the padded batch (it reads the
  padding: the backward direction starts on it), max over real positions, dropout, linear; torch's default AdamW,
  clip 1.0. The anchor does no less work per step than ours (its pass is one call, ours is two plus a gather).
Also the packed run (``pack_padded_sequence``, ours before) for reference. Interleaved repeats, median and minimum.

Command: .venv/bin/python benchmarks/bilstm_cpu.py [--repeat 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, header, interleave, loadavg, row, sst2_bilstm, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    from corpusforge.models.configs import TrainConfig
    from corpusforge.models.pooling import pool
    from corpusforge.models.training import make_optimizer

    torch.set_num_threads(args.threads)
    header(f"BiLSTM classifier training step: ours vs a plain padded nn.LSTM loop, {args.threads} thread(s)")
    ours, batches = sst2_bilstm(8)

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.rnn = copy.deepcopy(ours.wte), copy.deepcopy(ours.rnn)
            self.drop, self.classifier = nn.Dropout(0.5), copy.deepcopy(ours.classifier)

        def forward(self, ids, mask):
            out, _ = self.rnn(self.drop(self.wte(ids)))
            return self.classifier(self.drop(out.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(1)))

    class Packed(nn.Module):  # ours before: the packed run
        def __init__(self):
            super().__init__()
            self.inner = copy.deepcopy(ours)

        def forward(self, ids, mask):
            m = self.inner
            x = m.drop(m.wte(ids))
            p = nn.utils.rnn.pack_padded_sequence(x, mask.sum(1).cpu(), batch_first=True, enforce_sorted=False)
            out, _ = m.rnn(p)
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
            return m.classifier(m.drop(pool(out, mask, "max")))

    plain, packed = Plain(), Packed()
    with torch.no_grad():  # ours and the packed run are the same function (dropout off); the plain loop is not:
        for model in (ours, plain, packed):  # its backward direction starts on the padding
            model.eval()
        ids, mask, _ = batches[0]
        same = float((ours(ids, mask) - packed(ids, mask)).abs().max())
        other = float((ours(ids, mask) - plain(ids, mask)).abs().max())
    print(f"-- max |logit difference| in eval mode: ours vs packed {same:.1e}; ours vs plain {other:.1e} (the plain "
          "loop reads padding)")
    if same > 1e-5:
        raise SystemExit("ours and the packed run disagree: no timing")
    cfg = TrainConfig(lr=1e-3, weight_decay=0.1)
    sides = {"ours": (ours, make_optimizer(ours, cfg, torch.device("cpu")))}
    for name, model in (("plain", plain), ("packed", packed)):
        params = [p for p in model.parameters()]
        sides[name] = (model, torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                                                 {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                                lr=1e-3, betas=(cfg.beta1, cfg.beta2)))
    counter = {name: 0 for name in sides}

    def step(name):
        model, opt = sides[name]
        model.train()
        ids, mask, labels = batches[counter[name] % len(batches)]
        counter[name] += 1
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(ids, mask), labels).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    got = interleave({name: timed(lambda name=name: step(name)) for name in sides}, args.repeat)
    med = {name: got[name]["s"].median * 1e3 for name in sides}
    low = {name: got[name]["s"].min * 1e3 for name in sides}
    for name in sides:
        print(f"   {name:6s} ms per training step: median {med[name]:.1f} (min {low[name]:.1f})")
    print(f"   ours vs plain: {med['plain'] / med['ours']:.2f}x; ours vs packed (before): "
          f"{med['packed'] / med['ours']:.2f}x; load average after: {loadavg()}")
    emit("bilstm_cpu", [row("bilstm_cpu", "sst2-bilstm step", "ms/step (median)", med["ours"], med["plain"],
                            target="plain loop time / ours >= 1.0", met=med["ours"] <= med["plain"])],
         repeat=args.repeat, threads=args.threads, packed_ms=med["packed"])


if __name__ == "__main__":
    main()
