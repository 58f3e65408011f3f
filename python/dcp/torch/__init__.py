# SPDX-License-Identifier: Apache-2.0
"""dcp for PyTorch 2: attention with autograd over a torch.distributed process group, on this
rank's tokens only, and the moves between global and local token order.

    import dcp, dcp.torch
    executor = dcp.torch.AttentionExecutor(group=pg)
    executor.prepare(plan)                                  # every rank, once per batch
    o = dcp.torch.DCPAttention.apply(executor, q, kv)       # in each attention layer

Communication runs through the process group (point-to-point sends and receives of the
executor's buffers as raw bytes: gloo on CPU, NCCL on GPUs). The kernels are dcp's C++ CPU
kernels for CPU tensors, or torch operations on any device (``TorchKernels``; see
``AttentionExecutor(kernels=...)``).
"""
from __future__ import annotations

from .attention import AttentionExecutor, DCPAttention, dcp_attention
from .data import DCPDataLoader
from .dispatch import dispatch, local_indices, position_ids, undispatch
from .kernels import TorchKernels

__all__ = ["AttentionExecutor", "DCPAttention", "DCPDataLoader", "TorchKernels", "dcp_attention",
           "dispatch", "local_indices", "position_ids", "undispatch"]
