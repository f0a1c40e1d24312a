"""Run under torchrun by test_training.py (or alone, as one process): train a tiny GPT (dropout on) with
``strategy`` (ddp or fsdp), optionally stopping at a step (a checkpoint) and resuming from it on a second call;
rank 0 saves the whole weights."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

__import__("corpusforge")  # OMP_WAIT_POLICY before torch's threads start
from corpusforge.models.configs import TrainConfig  # noqa: E402
from corpusforge.models.gpt.config import GPTConfig  # noqa: E402
from corpusforge.models.gpt.model import GPT  # noqa: E402
from corpusforge.models.training import train  # noqa: E402
from corpusforge.models.zoo import objective_for, unique_state_dict  # noqa: E402


def main() -> None:
    out, strategy, name = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    stop = int(sys.argv[4]) if len(sys.argv) > 4 else None
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=2, n_head=2, n_embd=16, dropout=0.1))
    data = np.tile(np.arange(7), 500).astype(np.uint16)
    cfg = TrainConfig(max_iters=12, batch_size=4, grad_accum=2, eval_interval=4, eval_iters=2, log_interval=4,
                      warmup_iters=0, lr=1e-2, strategy=strategy, cpu_threads=1)
    ckpt = out / f"{name}.checkpoint.safetensors"
    train(model, objective_for(model, {"train": data, "valid": data[:200]}), cfg, checkpoint_path=ckpt,
          resume_from=ckpt if ckpt.exists() else None, stop_after=stop)
    import torch.distributed as dist

    sharded = dist.is_initialized() and strategy == "fsdp"
    if sharded:
        from corpusforge.models.sharding import gathered_state

        weights = gathered_state(model)  # every rank joins
    else:
        weights = unique_state_dict(model)
    if int(os.environ.get("RANK", "0")) == 0:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in weights.items()}, str(out / f"{name}.safetensors"))
    if dist.is_initialized():
        dist.barrier()  # every rank tears down together, as tasks/launch.py's ranks do
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
