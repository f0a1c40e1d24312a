"""Run under torchrun by test_objectives_contrastive_gather (tests/models/test_training.py): each of 2 CPU ranks scores
its half of a batch of pairs against every rank's partners (gathered with their gradient); rank 0 writes the mean
loss and the averaged gradients of the whole batch's embeddings."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from corpusforge.models.objectives.contrastive import gathered_in_batch_loss  # noqa: E402


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ea, eb = (t.requires_grad_() for t in batch())
    sizes = [2, 4]  # unequal micro-batches: the gather pads and cuts
    start = sum(sizes[:rank])
    loss = gathered_in_batch_loss(ea[start:start + sizes[rank]], eb[start:start + sizes[rank]], 20.0, True)
    (loss * sizes[rank] / 6 * world).backward()  # weighted by the rank's pairs, as the trainer weighs by terms
    for t in (ea.grad, eb.grad):
        dist.all_reduce(t)
        t /= world  # what DDP does to the encoder's gradients
    total = loss.detach() * sizes[rank] / 6
    dist.all_reduce(total)
    if rank == 0:
        from safetensors.torch import save_file

        save_file({"loss": total.reshape(1), "ga": ea.grad, "gb": eb.grad}, sys.argv[1])
    dist.barrier()  # every rank tears down together (a rank that left first aborted in gloo once: 342994e's CI)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
