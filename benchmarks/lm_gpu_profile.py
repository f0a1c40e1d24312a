"""Where a GPT-2-124M-shape training step spends its GPU time: ``benchmarks/lm_gpu.py mfu``'s model and settings
(bf16 autocast, batch 16 x 1024 x 4 accumulation, fused AdamW, clip 1.0) through the trainer's compiled
its objective's loss module; 15 warm-up steps, 5 timed, then torch.profiler over 3 optimizer steps; prints the top kernels.

    python benchmarks/lm_gpu_profile.py      # CUDA only; about 40 s on one H100 (the compile included)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lm_gpu  # noqa: E402,F401  maps the checkout onto corpusforge on a bare GPU image

from corpusforge.models.gpt.config import GPTConfig  # noqa: E402
from corpusforge.models.gpt.model import GPT  # noqa: E402
from corpusforge.models.objectives import NextTokenLoss  # noqa: E402
from corpusforge.models.training import PEAK_FLOPS  # noqa: E402

BATCH, BLOCK, ACCUM, VOCAB = 16, 1024, 4, 50304


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("lm_gpu_profile.py profiles CUDA kernels: no CUDA device here")
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=BLOCK, vocab_size=VOCAB, bias=False)).cuda()
    run = torch.compile(NextTokenLoss(model))
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)

    def step() -> None:
        for _ in range(ACCUM):
            x = torch.randint(0, VOCAB, (BATCH, BLOCK), device="cuda")
            y = torch.randint(0, VOCAB, (BATCH, BLOCK), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss, _ = run(x, y)
            (loss / ACCUM).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(15):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / 5
    tokens = BATCH * BLOCK * ACCUM
    peak = next((v for k, v in PEAK_FLOPS.items() if k in torch.cuda.get_device_name()), None)
    print(f"{dt * 1e3:.1f} ms/step, {tokens / dt:,.0f} tokens/s"
          + (f", MFU {model.flops_per_token() * tokens / dt / peak:.3f}" if peak else ""))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))


if __name__ == "__main__":
    main()
