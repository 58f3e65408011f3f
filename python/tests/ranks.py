# SPDX-License-Identifier: Apache-2.0
"""Runs a function on N ranks on 127.0.0.1 (torch.multiprocessing spawn), one process each, over
gloo, or NCCL with one GPU per rank: the one place the multi-rank tests start process groups."""
from __future__ import annotations

import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, fn, world: int, port: int, backend: str, args: tuple) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=30))
    try:
        fn(rank, world, *args)
        # No rank tears its connections down while another still sends to it.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_ranks(fn, world: int, *args, backend: str = "gloo") -> None:
    """fn(rank, world, *args) on every rank; an exception on any rank fails the call."""
    mp.spawn(_entry, args=(fn, world, _free_port(), backend, args), nprocs=world, join=True)
