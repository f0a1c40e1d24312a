"""FSDP2 for the trainer (``train.strategy: fsdp``): a model's layers sharded over the ranks, the rest replicated.

``torch.distributed.fsdp.fully_shard`` is applied to each layer of the model: every element of its top-level
``nn.ModuleList``s (a transformer's blocks, as torchtitan shards them). A layer's weights, gradients and optimizer
state are split over the ranks and gathered for its forward and backward; what sits outside the layers (embeddings,
a tied output head, a CRF's transitions: small beside the layers) stays whole on every rank, and its gradients are
averaged over the ranks once per step (:func:`sync_replicated`), as DDP would. Any method of the model may then run
(an objective's own loss, an evaluation), not only its ``forward``: a sharded layer gathers its weights whenever it
is called.

Checkpoints and the trained weights are gathered to whole tensors (:func:`full_state`, :func:`full_optimizer_state`:
collectives every rank joins), so they are the files a one-process run writes and load back into one process; a
resumed run shards them again (:func:`load_full`, :func:`load_full_optimizer`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn as nn


def _dtensor():
    from torch.distributed.tensor import DTensor

    return DTensor


def shard(model: nn.Module) -> int:
    """Shard each layer of ``model`` in place (bottom-up: every element of each outermost ``nn.ModuleList``);
    returns how many. A model without layers is refused in one line: FSDP would shard nothing."""
    from torch.distributed.fsdp import fully_shard

    lists: list[str] = []
    layers: list[nn.Module] = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and not any(name.startswith(f"{outer}.") for outer in lists):
            lists.append(name)
            layers.extend(module)
    layers = [layer for layer in layers if any(True for _ in layer.parameters())]
    if not layers:
        raise ValueError(f"train.strategy fsdp shards a model's layers (the elements of its nn.ModuleList); a "
                         f"{type(model).__name__} has none: use ddp")
    for layer in layers:
        fully_shard(layer)
    return len(layers)


def is_sharded(tensor: Any) -> bool:
    return isinstance(tensor, _dtensor())


def _full(value: Any) -> Any:
    return value.full_tensor() if is_sharded(value) else value


def full_state(tensors: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Whole CPU tensors of a state dict whose sharded entries are DTensors (every rank must call it, in the same
    order: each sharded entry is one all-gather), a tied tensor (two names, one storage) once."""
    seen: set[tuple] = set()
    out = {}
    for name, tensor in tensors.items():
        if not is_sharded(tensor) and tensor.numel():
            key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
                   tuple(tensor.stride()))
            if key in seen:
                continue
            seen.add(key)
        out[name] = _full(tensor).detach().cpu().clone()
    return out


def gathered_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's whole weights (every rank calls it): what a one-process run would save."""
    return full_state(model.state_dict())


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state dict with every sharded state tensor gathered (every rank calls it)."""
    opt = optimizer.state_dict()
    state = {pid: {k: (_full(v).detach().cpu() if torch.is_tensor(v) else v) for k, v in st.items()}
             for pid, st in opt["state"].items()}
    return {"state": state, "param_groups": opt["param_groups"]}


def shaped_like(full: torch.Tensor, target: Any) -> Any:
    """``full`` shaped as ``target``: sharded the same way when ``target`` is a DTensor."""
    if is_sharded(target):
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(full.to(device=target.device, dtype=target.dtype), target.device_mesh,
                                 target.placements)
    return full.to(device=target.device, dtype=target.dtype)


def load_full(model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Load whole weights (a checkpoint's, the best ones) into a sharded model, each rank keeping its shards."""
    from corpusforge.models.zoo import load_state

    current = model.state_dict()
    load_state(model, {k: shaped_like(v, current[k]) if k in current else v for k, v in tensors.items()})


def load_full_optimizer(optimizer: torch.optim.Optimizer, opt_state: dict[str, Any]) -> None:
    """Load a gathered optimizer state into the optimizer of a sharded model (each state tensor sharded as its
    parameter)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = {}
    for pid, st in opt_state["state"].items():
        param = params[int(pid)]
        state[int(pid)] = {k: (shaped_like(v, param) if torch.is_tensor(v) and v.dim() > 0 else v)
                           for k, v in st.items()}
    optimizer.load_state_dict({"state": state, "param_groups": opt_state["param_groups"]})


def sync_replicated(params: Iterable[torch.nn.Parameter], world: int) -> None:
    """Average the gradients of the weights kept whole on every rank (FSDP reduces the sharded ones itself)."""
    import torch.distributed as dist

    for p in params:
        if p.grad is not None and not is_sharded(p):
            dist.all_reduce(p.grad)
            p.grad /= world


def clip_grad_norm(params: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip the global gradient norm over sharded and whole weights alike (torch's clip_grad_norm_ cannot mix
    DTensors and tensors): the sharded parts' squares summed over the ranks, the whole ones counted once."""
    import torch.distributed as dist

    grads = [p.grad for p in params if p.grad is not None]
    device = grads[0].device if grads else torch.device("cpu")
    sharded = torch.zeros((), dtype=torch.float32, device=device)
    whole = torch.zeros((), dtype=torch.float32, device=device)
    for g in grads:
        if is_sharded(g):
            sharded += g.to_local().float().pow(2).sum()
        else:
            whole += g.float().pow(2).sum()
    dist.all_reduce(sharded)
    total = (sharded + whole).sqrt()
    coef = min(1.0, max_norm / (float(total) + 1e-6))
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return total
