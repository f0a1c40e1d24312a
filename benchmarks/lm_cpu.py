"""CPU benchmark for the lm stage: our trainer vs a plain nanoGPT-style loop, same shape, same run.

    .venv/bin/python benchmarks/lm_cpu.py               # rounds + whole process + the 2000-step run (~15-20 min)
    .venv/bin/python benchmarks/lm_cpu.py --no-full     # rounds + whole process (~8-10 min)
    .venv/bin/python benchmarks/lm_cpu.py --quick       # short rounds, one whole-process pair, no full run

Data: Tiny Shakespeare, char-level, nanoGPT's prepare.py split (first 90% train, last 10% val, 65 chars).
Shape: shakespeare-char-cpu (4 layers, 4 heads, 128 dim, block 64, batch 12, no dropout, lr 1e-3 -> 1e-4).

1. Training loop, in one process (same torch threads). The anchor is a self-contained copy of nanoGPT's
   model and training loop (below; the same maths as karpathy/nanoGPT model.py + train.py minus DDP and
   checkpointing). It and ``corpusforge.models.training.train`` run in ``--rounds`` rounds of ``--round-iters`` steps
   each; the side that goes first alternates from round to round, so a load spike or a warm cache does not
   always favour the same side. Ours continues from its own checkpoint every round (which exercises exact
   resume; reading and writing that checkpoint is inside its timing). Per side: median and minimum
   tokens/s (wall clock) and CPU seconds per round (``time.process_time``: every thread of this process),
   and the median of the per-round ratios, with the load average before and after.
2. Whole process (``--whole``, on unless ``--no-whole``): the same user-visible job done by two commands,
   interleaved, each measured with its whole process tree (wall, CPU via RUSAGE_CHILDREN):
   - ours: ``corpusforge lm train data/sample/tinyshakespeare.txt --preset shakespeare-char-cpu`` into a
     fresh store with ``train.max_iters = lr_decay_iters = eval_interval = --whole-iters`` and
     ``CORPUSFORGE_LOCAL_SERVER=off``, so nothing runs in a background server: all its CPU (Prefect's
     ephemeral API server included) is in the measured tree. It also builds and validates the corpus,
     writes the tokenizer and encoded artifacts, and tracks the run and registers the model in MLflow:
     that is the fixed cost under study.
   - anchor: ``lm_cpu.py --anchor-process N``, what nanoGPT's prepare.py + train.py + sample.py do: read
     the text, build the char vocabulary, encode, write train.bin/val.bin/meta.pkl, train N steps with the
     nano loop on np.memmap batches, estimate the val loss on ``eval_iters`` (20) batches, save ckpt.pt
     (model + optimizer), and sample the preset's 300 tokens after "ROMEO:" (temperature 0.8, top-k 200).
   Same steps, batch, eval batches and sample length on both sides. Differences that remain: ours splits
   by speech (a random 10% of speeches), the anchor the last 10% of the text (nanoGPT's split), so the
   val losses are not comparable; ours evaluates 20 consecutive val windows, the anchor 20 random batches
   (nanoGPT's estimate_loss also scores 20 train batches; the anchor skips that, as ours does); ours
   samples with a full-sequence forward, nanoGPT with the last position's logits only.
3. Quality (skipped by ``--no-full``): ``corpusforge.models.training.train`` runs the preset's 2000 steps and we report
   the validation loss over the whole val split (nanoGPT reports 1.88 on these settings; target <= 1.95).

Ends with one ``BENCH_JSON {...}`` line (benchmarks/common.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see flows/cli/lm.py / flows/entry.py

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from common import Series, emit, header, interleave, loadavg, quiet_env, row, run_process, venv_bin  # noqa: E402

SHAPE = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, dropout=0.0, bias=False)
BATCH, LR, MIN_LR, WARMUP, ITERS = 12, 1e-3, 1e-4, 100, 2000
EVAL_ITERS = 20  # the preset's train.eval_iters
SAMPLE = dict(prompt="ROMEO:", max_new_tokens=300, temperature=0.8, top_k=200)  # the preset's sample section
TOKENS_PER_STEP = BATCH * SHAPE["block_size"]
SAMPLE_TEXT = REPO / "data" / "sample" / "tinyshakespeare.txt"


def load_data() -> tuple[np.ndarray, np.ndarray, int]:
    shared = REPO.parent / "shared" / "corpora" / "tinyshakespeare" / "input.txt"
    path = shared if shared.is_file() else SAMPLE_TEXT
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


class NanoConfig:
    def __init__(self, vocab_size, **shape):
        self.vocab_size = vocab_size
        for k, v in shape.items():
            setattr(self, k, v)


class NanoGPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.block_size = c.block_size
        self.wte, self.wpe = nn.Embedding(c.vocab_size, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.h = nn.ModuleList([NanoBlock(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(lambda m: nn.init.normal_(m.weight, 0.0, 0.02) if isinstance(m, (nn.Linear, nn.Embedding)) else None)

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        if targets is None:  # inference: only the last position (nanoGPT model.py)
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """nanoGPT model.py's generate: crop to the block, last logits / temperature, top-k, sample."""
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            idx_next = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def nano_lr(it: int, decay_iters: int = ITERS) -> float:
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    if it > decay_iters:
        return MIN_LR
    ratio = (it - WARMUP) / (decay_iters - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def nano_loop(model, optimizer, get_batch, iters, start_iter, decay_iters=ITERS):
    """nanoGPT train.py's inner loop: lr, forward, fetch the next batch, backward, clip, step."""
    X, Y = get_batch()
    for it in range(start_iter, start_iter + iters):
        for g in optimizer.param_groups:
            g["lr"] = nano_lr(it, decay_iters)
        _, loss = model(X, Y)
        X, Y = get_batch()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss


def array_batches(data: np.ndarray):
    def get_batch():
        ix = torch.randint(len(data) - SHAPE["block_size"], (BATCH,))
        x = torch.stack([torch.from_numpy(data[i:i + SHAPE["block_size"]].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + SHAPE["block_size"]].astype(np.int64)) for i in ix])
        return x, y
    return get_batch


def nano_optimizer(model):
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.99))


# --- the anchor as a whole process: nanoGPT's prepare.py + train.py + sample.py ------------------

def anchor_process(iters: int, source: Path, out_dir: Path) -> None:
    t_start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    # prepare.py (shakespeare_char): vocabulary, encode, 90/10 split, .bin files and meta.pkl
    data = source.read_text(encoding="utf-8")
    chars = sorted(set(data))
    stoi, itos = {ch: i for i, ch in enumerate(chars)}, {i: ch for i, ch in enumerate(chars)}
    n = len(data)
    train_ids = np.array([stoi[c] for c in data[:int(n * 0.9)]], dtype=np.uint16)
    val_ids = np.array([stoi[c] for c in data[int(n * 0.9):]], dtype=np.uint16)
    train_ids.tofile(out_dir / "train.bin")
    val_ids.tofile(out_dir / "val.bin")
    with open(out_dir / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": itos, "stoi": stoi}, f)
    t_prepared = time.perf_counter()

    # train.py: meta.pkl, memmap batches (a fresh memmap per batch, as nanoGPT does), the loop, eval, ckpt.pt
    with open(out_dir / "meta.pkl", "rb") as f:
        meta = pickle.load(f)

    def get_batch(split):
        mm = np.memmap(out_dir / f"{split}.bin", dtype=np.uint16, mode="r")
        ix = torch.randint(len(mm) - SHAPE["block_size"], (BATCH,))
        x = torch.stack([torch.from_numpy(mm[i:i + SHAPE["block_size"]].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(mm[i + 1:i + 1 + SHAPE["block_size"]].astype(np.int64)) for i in ix])
        return x, y

    torch.manual_seed(1337)
    model = NanoGPT(NanoConfig(meta["vocab_size"], **SHAPE))
    optimizer = nano_optimizer(model)
    model.train()
    t0 = time.perf_counter()
    loss = nano_loop(model, optimizer, lambda: get_batch("train"), iters, 0, decay_iters=iters)
    train_s = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():  # estimate_loss, val split only (ours evaluates only val too)
        val_loss = float(torch.stack([model(*get_batch("val"))[1] for _ in range(EVAL_ITERS)]).mean())
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "model_args": SHAPE,
                "iter_num": iters, "best_val_loss": val_loss, "config": {"max_iters": iters}},
               out_dir / "ckpt.pt")
    # sample.py: encode the prompt, generate, decode
    start = torch.tensor([[meta["stoi"][c] for c in SAMPLE["prompt"]]], dtype=torch.long)
    with torch.no_grad():
        ids = model.generate(start, SAMPLE["max_new_tokens"], SAMPLE["temperature"], SAMPLE["top_k"])[0].tolist()
    text = "".join(meta["itos"][i] for i in ids)
    (out_dir / "sample.txt").write_text(text, encoding="utf-8")
    print(json.dumps({"anchor": True, "steps": iters, "train_loss": float(loss.item()), "val_loss": val_loss,
                      "prepare_s": t_prepared - t_start, "train_s": train_s,
                      "tokens_per_s": iters * TOKENS_PER_STEP / train_s, "sample_chars": len(text) - len(SAMPLE["prompt"]),
                      "total_s": time.perf_counter() - t_start}))


# --- the benchmark ---------------------------------------------------------------------------------

def speed_rounds(args, train_ids, val_ids, vocab) -> dict:
    from corpusforge.models.configs import TrainConfig
    from corpusforge.models.gpt.config import GPTConfig
    from corpusforge.models.gpt.model import GPT
    from corpusforge.models.objectives import CausalLM
    from corpusforge.models.training import train

    cfg = GPTConfig(vocab_size=vocab, **SHAPE)
    torch.manual_seed(1337)
    nano = NanoGPT(NanoConfig(vocab, **SHAPE))
    nano_opt = nano_optimizer(nano)
    nano_batches = array_batches(train_ids)
    torch.manual_seed(1337)
    ours = GPT(cfg)
    print(f"params: ours {sum(p.numel() for p in ours.parameters()):,}, nanoGPT {sum(p.numel() for p in nano.parameters()):,}")
    ckpt = Path(tempfile.mkdtemp(prefix="cf-lmbench-")) / "ckpt.safetensors"
    pos = {"nano": 0, "ours": 0}
    seen: list[dict] = []

    def run_nano(iters):
        nano_loop(nano, nano_opt, nano_batches, iters, pos["nano"])
        pos["nano"] += iters

    def run_ours(iters):
        tcfg = TrainConfig(max_iters=ITERS, lr_decay_iters=ITERS, batch_size=BATCH, lr=LR, min_lr=MIN_LR,
                           warmup_iters=WARMUP, eval_interval=10 ** 6, eval_iters=EVAL_ITERS, log_interval=iters,
                           keep_best=False, seed=1337)
        train(ours, CausalLM({"train": train_ids, "valid": val_ids}, SHAPE["block_size"]), tcfg,
              checkpoint_path=ckpt, resume_from=ckpt if ckpt.exists() else None,
              stop_after=pos["ours"] + iters, on_metrics=lambda s, m: seen.append(m))
        pos["ours"] += iters

    sides = {"nanoGPT loop": run_nano, "ours": run_ours}
    for fn in sides.values():  # untimed warm-up: first-call allocations, the first checkpoint
        fn(args.warmup_iters)
    load_before = loadavg()
    per: dict[str, dict[str, list[float]]] = {name: {"tps": [], "cpu": [], "wall": []} for name in sides}
    trainer_tps = []
    print(f"{args.rounds} rounds of {args.round_iters} steps ({args.round_iters * TOKENS_PER_STEP:,} tokens) per side, "
          f"first side alternating; load average before {load_before}")
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for name in order:
            w0, c0 = time.perf_counter(), time.process_time()
            sides[name](args.round_iters)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            per[name]["wall"].append(wall)
            per[name]["cpu"].append(cpu)
            per[name]["tps"].append(args.round_iters * TOKENS_PER_STEP / wall)
        trainer_tps.append(seen[-1]["tokens_per_s"])
        o, a = per["ours"], per["nanoGPT loop"]
        print(f"round {r + 1} ({order[0]} first): nanoGPT loop {a['tps'][-1]:7.0f} tok/s {a['cpu'][-1]:6.2f} CPU-s | "
              f"ours {o['tps'][-1]:7.0f} tok/s {o['cpu'][-1]:6.2f} CPU-s (trainer's own figure {trainer_tps[-1]:.0f}) | "
              f"ratio tok/s {o['tps'][-1] / a['tps'][-1]:.3f}, CPU {o['cpu'][-1] / a['cpu'][-1]:.3f}  load {loadavg()}",
              flush=True)
    load_after = loadavg()
    shutil.rmtree(ckpt.parent, ignore_errors=True)
    s = {name: {k: Series(v) for k, v in d.items()} for name, d in per.items()}
    tps_ratios = Series([o / a for o, a in zip(per["ours"]["tps"], per["nanoGPT loop"]["tps"])])
    cpu_ratios = Series([o / a for o, a in zip(per["ours"]["cpu"], per["nanoGPT loop"]["cpu"])])
    print(f"\n{'':14} {'tok/s median':>12} {'tok/s min':>10} {'CPU-s/round median':>19} {'CPU-s min':>10}")
    for name in sides:
        print(f"{name:14} {s[name]['tps'].median:12.0f} {s[name]['tps'].min:10.0f} {s[name]['cpu'].median:19.2f} "
              f"{s[name]['cpu'].min:10.2f}")
    print(f"median of per-round ratios ours/nanoGPT: tokens/s {tps_ratios.median:.3f} "
          f"(range {min(tps_ratios.values):.3f}-{max(tps_ratios.values):.3f}), CPU-s {cpu_ratios.median:.3f} "
          f"(range {min(cpu_ratios.values):.3f}-{max(cpu_ratios.values):.3f}); load average before {load_before}, "
          f"after {load_after}")
    return {"per_round": per, "trainer_tokens_per_s": trainer_tps, "tps_ratio_median": tps_ratios.median,
            "tps_ratios": tps_ratios.values, "cpu_ratio_median": cpu_ratios.median, "cpu_ratios": cpu_ratios.values,
            "load_before": load_before, "load_after": load_after,
            "series": {n: {k: {"median": v.median, "min": v.min} for k, v in d.items()} for n, d in s.items()}}


def whole_process(args) -> dict:
    cli = venv_bin("corpusforge")
    work = Path(tempfile.mkdtemp(prefix="cf-lmwhole-"))
    n = args.whole_iters
    base = {k: v for k, v in quiet_env().items() if k not in ("PREFECT_API_URL", "PREFECT_HOME", "CORPUSFORGE_STORE")}
    ours_env = {**base, "CORPUSFORGE_LOCAL_SERVER": "off"}
    counter = iter(range(10 ** 6))
    results: dict[str, list[dict]] = {"ours": [], "anchor": []}
    sets = [f"train.max_iters={n}", f"train.lr_decay_iters={n}", f"train.eval_interval={n}"]
    if args.threads:
        sets.append(f"train.cpu_threads={args.threads}")
    ours_cmd = [cli, "lm", "train", str(SAMPLE_TEXT), "--preset", "shakespeare-char-cpu", "--json",
                *[a for s in sets for a in ("--set", s)]]
    anchor_cmd = [sys.executable, str(Path(__file__).resolve()), "--anchor-process", str(n)]
    if args.threads:
        anchor_cmd += ["--threads", str(args.threads)]
    print(f"\nwhole process, {n} steps each; ours: {' '.join(ours_cmd[1:])} --store <fresh> "
          f"(CORPUSFORGE_LOCAL_SERVER=off: no background server, all CPU in the measured tree)\n"
          f"anchor: {' '.join(Path(a).name if i < 2 else a for i, a in enumerate(anchor_cmd))} --anchor-dir <fresh>")

    def ours():
        store = work / f"store{next(counter)}"
        r = run_process([*ours_cmd, "--store", str(store)], env=ours_env, cwd=REPO)
        payload = json.loads(r.stdout.strip().splitlines()[-1])
        m = payload["metrics"]
        results["ours"].append({"wall": r.wall, "cpu": r.cpu, "val_loss": m.get("val_loss"),
                                "train_seconds": m.get("train_seconds"), "tokens_per_s": m.get("tokens_per_s"),
                                "steps": m.get("steps"), "registered_model": payload.get("registered_model")})
        shutil.rmtree(store, ignore_errors=True)
        return {"wall": r.wall, "cpu": r.cpu}

    def anchor():
        out = work / f"anchor{next(counter)}"
        r = run_process([*anchor_cmd, "--anchor-dir", str(out)], env=base, cwd=REPO)
        results["anchor"].append({"wall": r.wall, "cpu": r.cpu, **json.loads(r.stdout.strip().splitlines()[-1])})
        shutil.rmtree(out, ignore_errors=True)
        return {"wall": r.wall, "cpu": r.cpu}

    load_before = loadavg()
    stats = interleave({"ours": ours, "anchor": anchor}, args.whole_repeats, warmup=args.whole_warmup)
    load_after = loadavg()
    shutil.rmtree(work, ignore_errors=True)
    timed_ours, timed_anchor = results["ours"][-args.whole_repeats:], results["anchor"][-args.whole_repeats:]
    print("(train s: ours = its train() call incl. the final eval and checkpoint; anchor = the loop only. The val\n"
          " losses are on different splits: ours by speech, the anchor nanoGPT's last 10%.)")
    print(f"{'':8} {'wall median':>11} {'wall min':>9} {'CPU-s median':>12} {'CPU-s min':>9} {'train s':>8} {'val loss':>8}")
    for name, runs in (("ours", timed_ours), ("anchor", timed_anchor)):
        st = stats[name]
        train_s = Series([x.get("train_seconds") or x.get("train_s") for x in runs]).median
        print(f"{name:8} {st['wall'].median:11.2f} {st['wall'].min:9.2f} {st['cpu'].median:12.2f} {st['cpu'].min:9.2f} "
              f"{train_s:8.2f} {Series([x['val_loss'] for x in runs]).median:8.4f}")
    fixed_wall = stats["ours"]["wall"].median - stats["anchor"]["wall"].median
    fixed_cpu = stats["ours"]["cpu"].median - stats["anchor"]["cpu"].median
    print(f"ours - anchor (medians): {fixed_wall:+.2f} s wall, {fixed_cpu:+.2f} CPU-s; ratio ours/anchor wall "
          f"{stats['ours']['wall'].median / stats['anchor']['wall'].median:.2f}, CPU "
          f"{stats['ours']['cpu'].median / stats['anchor']['cpu'].median:.2f}; load average before {load_before}, "
          f"after {load_after}")
    return {"steps": n, "ours_cmd": ours_cmd[1:], "runs": results, "load_before": load_before, "load_after": load_after,
            "wall": {k: {"median": v["wall"].median, "min": v["wall"].min} for k, v in stats.items()},
            "cpu": {k: {"median": v["cpu"].median, "min": v["cpu"].min} for k, v in stats.items()},
            "fixed_wall_s": fixed_wall, "fixed_cpu_s": fixed_cpu}


def full_run(train_ids, val_ids, vocab) -> dict:
    from corpusforge.models.configs import TrainConfig
    from corpusforge.models.gpt.config import GPTConfig
    from corpusforge.models.gpt.model import GPT
    from corpusforge.models.objectives import CausalLM
    from corpusforge.models.training import train

    torch.manual_seed(1337)
    model = GPT(GPTConfig(vocab_size=vocab, **SHAPE))
    tcfg = TrainConfig(max_iters=ITERS, lr_decay_iters=ITERS, batch_size=BATCH, lr=LR, min_lr=MIN_LR, warmup_iters=WARMUP,
                       eval_interval=500, eval_iters=EVAL_ITERS, log_interval=250, keep_best=False, seed=1337)
    t0, c0 = time.perf_counter(), time.process_time()
    objective = CausalLM({"train": train_ids, "valid": val_ids}, SHAPE["block_size"])
    result = train(model, objective, tcfg,
                   on_metrics=lambda s, m: print(f"  step {s}: " + ", ".join(f"{k} {v:.4g}" for k, v in m.items())))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    full_val = objective.evaluate(model, "valid", 64)["loss"]
    print(f"full run: {ITERS} steps in {seconds:.0f} s wall, {cpu:.0f} CPU-s ({result.metrics['tokens_per_s']:.0f} tok/s), "
          f"val loss over the whole val split {full_val:.4f} (target <= 1.95; nanoGPT 1.88)")
    return {"seconds": seconds, "cpu_s": cpu, "tokens_per_s": result.metrics["tokens_per_s"], "val_loss_full": full_val,
            "val_loss_estimate": result.metrics.get("val_loss")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--round-iters", type=int, default=200, help="steps per side per round")
    ap.add_argument("--warmup-iters", type=int, default=10, help="untimed steps per side before the rounds")
    ap.add_argument("--whole", action=argparse.BooleanOptionalAction, default=True,
                    help="the whole-process comparison (CLI vs a nanoGPT-style script)")
    ap.add_argument("--whole-iters", type=int, default=200, help="training steps of each whole-process run")
    ap.add_argument("--whole-repeats", type=int, default=3, help="timed runs per side")
    ap.add_argument("--whole-warmup", type=int, default=1, help="untimed runs per side first")
    ap.add_argument("--no-full", action="store_true", help="skip the 2000-step quality run")
    ap.add_argument("--quick", action="store_true",
                    help="3 rounds of 50 steps, one whole-process pair of 50 steps without warm-up, no full run")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--anchor-process", type=int, metavar="N", help=argparse.SUPPRESS)  # the whole-process anchor
    ap.add_argument("--anchor-dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.anchor_process:
        anchor_process(args.anchor_process, SAMPLE_TEXT, args.anchor_dir or Path(tempfile.mkdtemp(prefix="cf-nano-")))
        return
    if args.quick:
        args.rounds, args.round_iters, args.no_full = 3, 50, True
        args.whole_iters, args.whole_repeats, args.whole_warmup = 50, 1, 0

    header("lm (CPU): shakespeare-char-cpu, our trainer / CLI vs a nanoGPT-style loop / script")
    train_ids, val_ids, vocab = load_data()
    print(f"   torch {torch.__version__}, torch threads {torch.get_num_threads()}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    print(f"   train {len(train_ids):,} tokens, val {len(val_ids):,}, vocab {vocab}")

    speed = speed_rounds(args, train_ids, val_ids, vocab)
    case = f"train loop, {args.rounds} x {args.round_iters} steps"
    so, sa = speed["series"]["ours"], speed["series"]["nanoGPT loop"]
    rows = [
        row("lm", case, "tokens_per_s median (higher is better)", so["tps"]["median"], sa["tps"]["median"],
            note=f"median per-round ratio {speed['tps_ratio_median']:.3f}; min ours {so['tps']['min']:.0f}, "
                 f"anchor {sa['tps']['min']:.0f}"),
        row("lm", case, "cpu_s per round median", so["cpu"]["median"], sa["cpu"]["median"], "<= 1.05x (parity)",
            speed["cpu_ratio_median"] <= 1.05,
            note=f"median per-round ratio {speed['cpu_ratio_median']:.3f} (met is judged on it)"),
    ]
    whole = None
    if args.whole:
        whole = whole_process(args)
        wcase = f"whole process, {whole['steps']} steps + eval + save + 300-token sample"
        rows += [
            row("lm", wcase, "wall_s median", whole["wall"]["ours"]["median"], whole["wall"]["anchor"]["median"],
                note=f"ours - anchor {whole['fixed_wall_s']:+.1f} s: corpus step, tokenizer, encode, Prefect, MLflow"),
            row("lm", wcase, "cpu_s median", whole["cpu"]["ours"]["median"], whole["cpu"]["anchor"]["median"],
                note=f"ours - anchor {whole['fixed_cpu_s']:+.1f} CPU-s; CORPUSFORGE_LOCAL_SERVER=off"),
        ]
    full = None
    if not args.no_full:
        full = full_run(train_ids, val_ids, vocab)
        rows.append(row("lm", f"{ITERS}-step run, nanoGPT split", "val_loss (whole val split)", full["val_loss_full"],
                        None, "<= 1.95", full["val_loss_full"] <= 1.95, note="nanoGPT reports 1.88"))
    emit("lm", rows, speed=speed, whole=whole, full=full, args=vars(args) | {"anchor_dir": None})


if __name__ == "__main__":
    main()
