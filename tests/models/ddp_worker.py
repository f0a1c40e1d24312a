"""Run under torchrun by test_training.py: train a tiny GPT with DDP (gloo, CPU) and save each rank's weights."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from corpusforge.models.configs import TrainConfig  # noqa: E402
from corpusforge.models.gpt.config import GPTConfig  # noqa: E402
from corpusforge.models.gpt.model import GPT  # noqa: E402
from corpusforge.models.training import train  # noqa: E402
from corpusforge.models.zoo import objective_for  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1])
    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    model = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=16))
    data = np.tile(np.arange(7), 500).astype(np.uint16)
    seen = []
    train(model, objective_for(model, {"train": data, "valid": data[:200]}), TrainConfig(max_iters=6, batch_size=4, grad_accum=2, eval_interval=3, eval_iters=2, log_interval=3,
                                              warmup_iters=0, lr=1e-2, keep_best=False),
          on_metrics=lambda s, m: seen.append(m))
    rank = int(os.environ["RANK"])
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
              str(out / f"rank{rank}.safetensors"))
    (out / f"rank{rank}.metrics").write_text(str(len(seen)))
    import torch.distributed as dist

    dist.barrier()  # every rank tears down together (a rank that left first aborted in gloo once: 342994e's CI)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
