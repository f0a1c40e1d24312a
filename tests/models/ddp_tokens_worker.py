"""Run under torchrun by test_loss_per_token.py: one SGD step of a tiny GPT on SFT examples with DDP (gloo, CPU),
the step's two micro-batches drawn by both ranks, rank 0 running the short examples and rank 1 the long ones; rank 0
saves the weights."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.models.test_loss_per_token import make_gpt, one_step  # noqa: E402


def main() -> None:
    rank = int(os.environ["RANK"])
    weights = one_step(make_gpt, [[0, 1], [2, 3]], old=len(sys.argv) > 2)
    if rank == 0:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in weights.items()}, sys.argv[1])
    import torch.distributed as dist

    dist.barrier()  # every rank tears down together (a rank that left first aborted in gloo once: 342994e's CI)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
