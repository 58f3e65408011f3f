# SPDX-License-Identifier: Apache-2.0
"""Moving tensors between the packed global token order and a rank's local order (the plan's
token map), for users who bring their own data."""
from __future__ import annotations

import torch
import torch.distributed as dist

from ._comm import collective_device


def local_indices(plan, rank: int) -> torch.Tensor:
    """int64 [local tokens]: each local token's index in the packed global order."""
    return torch.from_numpy(plan.local_token_indices(rank))


def position_ids(plan, rank: int) -> torch.Tensor:
    """int64 [local tokens]: each local token's position inside its sequence (for RoPE)."""
    return torch.from_numpy(plan.position_ids(rank))


def dispatch(tensor: torch.Tensor, plan, rank: int) -> torch.Tensor:
    """The rows of ``tensor`` ([total tokens, ...], packed global order) that ``rank`` owns, in
    its local order. A new tensor (index_select)."""
    total = sum(plan.seqlens)
    if tensor.dim() == 0:
        raise ValueError("dispatch: the tensor is a scalar; expected [total tokens, ...]")
    if tensor.shape[0] != total:
        raise ValueError(f"dispatch: the tensor has {tensor.shape[0]} rows, the plan's batch "
                         f"{total} tokens")
    return tensor.index_select(0, local_indices(plan, rank).to(tensor.device))


def undispatch(local: torch.Tensor, plan, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The whole batch ([total tokens, ...], packed order) from every rank's local rows.
    Collective over ``group``: every rank passes its own ``local`` and gets the whole tensor."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if plan.devices != size:
        raise ValueError(f"undispatch: the plan is for {plan.devices} devices, the group has "
                         f"{size} ranks")
    counts = [plan.local_tokens(r) for r in range(size)]
    if local.dim() == 0:
        raise ValueError("undispatch: the tensor is a scalar; expected [local tokens, ...]")
    if local.shape[0] != counts[rank]:
        raise ValueError(f"undispatch: rank {rank} passed {local.shape[0]} rows, it owns "
                         f"{counts[rank]} tokens")
    longest = max(counts)
    # Gathered where the group's backend serves tensors (a CPU tensor on an NCCL group goes
    # through the GPU), returned on local's device.
    padded = local.new_zeros((longest, *local.shape[1:]),
                             device=collective_device(group, local.device))
    padded[: local.shape[0]] = local
    gathered = [torch.empty_like(padded) for _ in range(size)]
    dist.all_gather(gathered, padded, group=group)
    out = local.new_empty((sum(plan.seqlens), *local.shape[1:]))
    for r in range(size):
        out.index_copy_(0, local_indices(plan, r).to(out.device),
                        gathered[r][: counts[r]].to(out.device))
    return out
