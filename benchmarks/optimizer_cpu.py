"""Fused AdamW on CPU (issue 51 item 2): torch's fused AdamW kernel beside its default AdamW (the foreach
implementation: what the trainer uses on CPU, and what a plain PyTorch loop gets), with the trainer's parameter
groups, on the same model, weights, batches and hyper-parameters. (The trainer keeps the default on CPU for now:
models/training.py ``fused_adamw`` says why.)

Two inner loops per model, interleaved repeats (ours, default, default, ours, ...), median and minimum:
- ``step``: ``optimizer.step()`` alone, on gradients already computed;
- ``train``: one whole training step (forward, backward, clip, step) on a padded batch.
Models: the BiLSTM classifier at the sst2-bilstm preset's shape (15k words x 300, one bidirectional LSTM of 300,
batch 64, SST-2-like lengths) and the Transformer encoder-decoder at the multi30k-transformer-cpu preset's shape (3+3 layers, d_model
256, d_ff 512, a 4,000 vocabulary; batch 64 x 16-18 tokens).
Before timing, five steps from the same start on both sides must give the same weights to float rounding
(max |difference| printed). The whole process is not compared: the optimizer is one call inside one process.

Command: .venv/bin/python benchmarks/optimizer_cpu.py [--repeat 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, header, interleave, loadavg, row, sst2_bilstm, timed  # noqa: E402


def bilstm():
    import torch

    model, [(ids, mask, labels)] = sst2_bilstm(1)
    return model, lambda m: torch.nn.functional.cross_entropy(m(ids, mask), labels)


def transformer():
    import torch

    from corpusforge.models.transformer.config import TransformerConfig
    from corpusforge.models.transformer.model import Transformer

    cfg = TransformerConfig(vocab_size=4000, pad_id=0, bos_id=1, eos_id=2, d_model=256, n_head=4, n_enc_layer=3,
                            n_dec_layer=3, d_ff=512, dropout=0.1)
    model = Transformer(cfg)
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(4, 4000, (64, 16), generator=gen)
    tgt = torch.randint(4, 4000, (64, 18), generator=gen)
    src_mask = torch.ones_like(src, dtype=torch.bool)
    return model, lambda m: torch.nn.functional.cross_entropy(
        m(src, src_mask, tgt[:, :-1]).reshape(-1, 4000), tgt[:, 1:].reshape(-1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from corpusforge.models.configs import TrainConfig

    torch.set_num_threads(args.threads)
    header(f"AdamW on CPU: fused vs torch's default (foreach), {args.threads} thread(s)")
    cfg = TrainConfig(lr=1e-3, weight_decay=0.1)
    rows = []
    for case, build in (("sst2-bilstm", bilstm), ("transformer-small", transformer)):
        torch.manual_seed(0)
        model, loss_of = build()
        nets = {"ours": model, "default": copy.deepcopy(model)}

        def adamw(m, fused):  # the trainer's groups: decay on matrices and embeddings only
            params = [p for p in m.parameters() if p.requires_grad]
            return torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                                      {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                     lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused)

        opts = {"ours": adamw(nets["ours"], True), "default": adamw(nets["default"], False)}
        assert all(g["fused"] for g in opts["ours"].param_groups) and not opts["default"].param_groups[0]["fused"]
        torch.manual_seed(1)  # the same dropout masks on both sides
        grads = [{n: torch.randn_like(p) * 1e-2 for n, p in model.named_parameters()} for _ in range(5)]
        for side in nets:
            for g in grads:
                for n, p in nets[side].named_parameters():
                    p.grad = g[n].clone()
                opts[side].step()
        diff = max(float((a - b).detach().abs().max()) for a, b in zip(nets["ours"].parameters(),
                                                               nets["default"].parameters(), strict=True))
        n_params = sum(p.numel() for p in model.parameters())
        print(f"-- {case}: {n_params:,} weights; after 5 equal steps max |ours - default| = {diff:.2e}")
        if diff > 1e-5:
            raise SystemExit("the two optimizers disagree: no timing")

        def step(side):
            opts[side].step()

        def train(side):
            net, opt = nets[side], opts[side]
            opt.zero_grad(set_to_none=True)
            loss_of(net).backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()

        for name, fn in (("step", step), ("train", train)):
            got = interleave({side: timed(lambda side=side: fn(side)) for side in nets}, args.repeat)
            med = {side: got[side]["s"].median * 1e3 for side in nets}
            low = {side: got[side]["s"].min * 1e3 for side in nets}
            ratio = med["default"] / med["ours"]
            print(f"   {name:5s} ms: ours (fused) median {med['ours']:.1f} (min {low['ours']:.1f}), default "
                  f"median {med['default']:.1f} (min {low['default']:.1f}); speed-up {ratio:.2f}x")
            rows.append(row("optimizer_cpu", case, f"{name} ms (median)", med["ours"], med["default"],
                            target="default time / ours > 1.0", met=med["ours"] < med["default"]))
    print(f"   load average after: {loadavg()}")
    emit("optimizer_cpu", rows, repeat=args.repeat, threads=args.threads)


if __name__ == "__main__":
    main()
