# SPDX-License-Identifier: Apache-2.0
"""dcp for PyTorch 2: attention with autograd over a torch.distributed process group, on this
rank's tokens only, and the moves between global and local token order.

    import dcp, dcp.torch
    executor = dcp.torch.AttentionExecutor(group=pg)
    executor.prepare(plan)                                  # every rank, once per batch
    o = dcp.torch.DCPAttention.apply(executor, q, kv)       # in each attention layer

Communication runs through the process group (point-to-point sends and receives of raw bytes,
so any backend with send/recv works: gloo on CPU). The kernels are dcp's C++ CPU kernels.
"""
from __future__ import annotations

from .attention import AttentionExecutor, DCPAttention, dcp_attention
from .data import DCPDataLoader
from .dispatch import dispatch, local_indices, position_ids, undispatch

__all__ = ["AttentionExecutor", "DCPAttention", "DCPDataLoader", "dcp_attention", "dispatch",
           "local_indices", "position_ids", "undispatch"]
