# SPDX-License-Identifier: Apache-2.0
"""Runs a function on N ranks on 127.0.0.1 (torch.multiprocessing spawn), one process each, over
gloo, or NCCL with one GPU per rank: the one place the multi-rank tests start process groups."""
from __future__ import annotations

import datetime
import os
import socket
import time

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
    timeout = datetime.timedelta(seconds=30)
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    try:
        fn(rank, world, *args)
        # No rank tears its connections down while another still sends to it (through the store:
        # a barrier would be one more gloo work to free, see below).
        if store.add("done", 1) == world:
            store.set("all done", "1")
        store.wait(["all done"])
    finally:
        # torch 2.4: gloo's worker thread frees a finished work after the caller's wait returned,
        # and when the caller no longer holds the work's tensors that takes the GIL, while
        # destroy_process_group joins the worker holding the GIL: a deadlock (1 suite run in 2).
        # Sleeping hands the GIL to a worker waiting for it.
        time.sleep(0.05)
        dist.destroy_process_group()


# The ranks start from a fork server that has imported torch and dcp once: a rank then starts in a
# fraction of a second instead of importing torch anew (2-3 s of CPU each). The server forks before
# anything runs threads or touches a GPU, so each rank starts as a fresh process would.
mp.set_forkserver_preload(["torch", "torch.distributed", "dcp", "dcp.torch"])


def run_ranks(fn, world: int, *args, backend: str = "gloo") -> None:
    """fn(rank, world, *args) on every rank; an exception on any rank fails the call."""
    mp.start_processes(_entry, args=(fn, world, _free_port(), backend, args), nprocs=world,
                       join=True, start_method="forkserver")
