"""CPU benchmark for the lm stage: our trainer vs a plain nanoGPT-style loop, same shape, same run.

    .venv/bin/python benchmarks/lm_cpu.py               # speed rounds + the full 2000-step run (~6-12 min)
    .venv/bin/python benchmarks/lm_cpu.py --no-full     # speed rounds only (~2 min)

Data: Tiny Shakespeare, char-level, nanoGPT's prepare.py split (first 90% train, last 10% val, 65 chars).
Shape: shakespeare-char-cpu (4 layers, 4 heads, 128 dim, block 64, batch 12, no dropout, lr 1e-3 -> 1e-4).

1. Speed: the anchor is a self-contained copy of nanoGPT's model and training loop (below, ~90 lines; the
   same maths as karpathy/nanoGPT model.py + train.py minus DDP/checkpointing). It and models.training.train
   run alternately in rounds of the same number of steps, in one process with the same torch threads, and
   we print the median tokens/s of each and the ratio.
2. Quality: models.training.train runs the preset's 2000 steps and we report the validation loss over the
   whole val split (nanoGPT reports 1.88 on these settings; our target is <= 1.95).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see flows/cli_lm.py

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from models.gpt import GPT, GPTConfig  # noqa: E402
from models.training import TrainConfig, evaluate, train  # noqa: E402

SHAPE = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, bias=False)
BATCH, LR, MIN_LR, WARMUP, ITERS = 12, 1e-3, 1e-4, 100, 2000


def load_data() -> tuple[np.ndarray, np.ndarray, int]:
    shared = REPO.parent / "shared" / "corpora" / "tinyshakespeare" / "input.txt"
    path = shared if shared.is_file() else REPO / "data" / "sample" / "tinyshakespeare.txt"
    text = path.read_text(encoding="utf-8")
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(0.9 * len(ids))
    return ids[:n], ids[n:], len(chars)


# --- the anchor: nanoGPT's model and loop, condensed --------------------------------------------

class NanoAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.n_head, self.n_embd = c.n_head, c.n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class NanoBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(c.n_embd, bias=c.bias), NanoAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.c_fc, self.gelu = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias), nn.GELU()
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(self.gelu(self.c_fc(self.ln_2(x))))


class NanoGPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(c.vocab_size, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.h = nn.ModuleList([NanoBlock(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(lambda m: nn.init.normal_(m.weight, 0.0, 0.02) if isinstance(m, (nn.Linear, nn.Embedding)) else None)

    def forward(self, idx, targets):
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def nano_loop(model, optimizer, data, iters, start_iter):
    """nanoGPT train.py's inner loop: get_batch from the memmap-style array, forward, backward, clip, step."""
    def get_batch():
        ix = torch.randint(len(data) - SHAPE["block_size"], (BATCH,))
        x = torch.stack([torch.from_numpy(data[i:i + SHAPE["block_size"]].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + SHAPE["block_size"]].astype(np.int64)) for i in ix])
        return x, y

    def get_lr(it):
        if it < WARMUP:
            return LR * (it + 1) / (WARMUP + 1)
        ratio = (it - WARMUP) / (ITERS - WARMUP)
        return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)

    X, Y = get_batch()
    t0 = time.perf_counter()
    for it in range(start_iter, start_iter + iters):
        for g in optimizer.param_groups:
            g["lr"] = get_lr(it)
        _, loss = model(X, Y)
        X, Y = get_batch()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return iters * BATCH * SHAPE["block_size"] / (time.perf_counter() - t0)


def nano_optimizer(model):
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.99))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--round-iters", type=int, default=40)
    ap.add_argument("--no-full", action="store_true", help="skip the 2000-step quality run")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    train_ids, val_ids, vocab = load_data()
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, load avg {os.getloadavg()[0]:.1f}")
    print(f"train {len(train_ids):,} tokens, val {len(val_ids):,}, vocab {vocab}")

    cfg = GPTConfig(vocab_size=vocab, **SHAPE)
    torch.manual_seed(1337)
    nano = NanoGPT(cfg)
    nano_opt = nano_optimizer(nano)
    torch.manual_seed(1337)
    ours = GPT(cfg)
    print(f"params: ours {sum(p.numel() for p in ours.parameters()):,}, nanoGPT {sum(p.numel() for p in nano.parameters()):,}")

    # speed rounds, alternating so that the machine's noise hits both alike
    ours_tps, nano_tps = [], []
    ckpt = Path("/tmp/corpusforge-lm-bench.safetensors")
    ckpt.unlink(missing_ok=True)
    done = 0
    for r in range(args.rounds):
        nano_tps.append(nano_loop(nano, nano_opt, train_ids, args.round_iters, done))
        seen = []
        tcfg = TrainConfig(max_iters=ITERS, lr_decay_iters=ITERS, batch_size=BATCH, lr=LR, min_lr=MIN_LR, warmup_iters=WARMUP,
                           eval_interval=10 ** 6, eval_iters=20, log_interval=args.round_iters, keep_best=False, seed=1337)
        # our trainer continues from its own checkpoint each round, which also exercises exact resume
        train(ours, train_ids, val_ids, tcfg, checkpoint_path=ckpt, resume_from=ckpt if ckpt.exists() else None,
              stop_after=done + args.round_iters, on_metrics=lambda s, m: seen.append(m))
        ours_tps.append(seen[-1]["tokens_per_s"])
        done += args.round_iters
        print(f"round {r + 1}: nanoGPT loop {nano_tps[-1]:8.0f} tok/s   ours {ours_tps[-1]:8.0f} tok/s")
    mo, mn = statistics.median(ours_tps), statistics.median(nano_tps)
    print(f"median tokens/s: ours {mo:.0f}, nanoGPT loop {mn:.0f}, ratio ours/nanoGPT {mo / mn:.3f}")

    if args.no_full:
        return
    torch.manual_seed(1337)
    model = GPT(cfg)
    tcfg = TrainConfig(max_iters=ITERS, lr_decay_iters=ITERS, batch_size=BATCH, lr=LR, min_lr=MIN_LR, warmup_iters=WARMUP,
                       eval_interval=500, eval_iters=20, log_interval=250, keep_best=False, seed=1337)
    t0 = time.perf_counter()
    result = train(model, train_ids, val_ids, tcfg,
                   on_metrics=lambda s, m: print(f"  step {s}: " + ", ".join(f"{k} {v:.4g}" for k, v in m.items())))
    seconds = time.perf_counter() - t0
    full_val = evaluate(model, val_ids, SHAPE["block_size"], 64)
    print(f"full run: {ITERS} steps in {seconds:.0f} s ({result.metrics['tokens_per_s']:.0f} tok/s), "
          f"val loss over the whole val split {full_val:.4f} (target <= 1.95; nanoGPT 1.88)")


if __name__ == "__main__":
    main()
