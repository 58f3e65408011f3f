# SPDX-License-Identifier: Apache-2.0
"""dcp.torch costs on gloo ranks on this machine (results in bench/RESULTS.md):

1. Python overhead per DCPAttention call: the wall time of forward + backward through autograd
   (torch.library operator, Python communicator over the process group) minus the C++ executor's
   own time for the same calls (its ExecutionProfile), per call and as a share; with dcp's CPU
   kernels and with the torch kernel backend on the same plan.
2. How long a training step waits for its plan: DCPDataLoader with prefetch 0 (planning on the
   critical path) and 2 (planned in background threads), the step simulated by a sleep.

    PYTHONPATH=build/python $(cat .dcp-python) bench/python_bench.py
"""
from __future__ import annotations

import argparse
import datetime
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dcp
import dcp.torch as dt


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def overhead(rank: int, world: int, port: int, tokens: int, calls: int, kernels: str,
             queue) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=300))
    torch.set_num_threads(1)
    lengths = [tokens // 2, tokens // 4, tokens // 8, tokens - tokens // 2 - tokens // 4 - tokens // 8]
    plan = dcp.plan(dcp.Batch(lengths, "causal", heads=8, kv_heads=2, head_dim=128, dtype="bf16"),
                    topology=(1, world), block_size=1024)
    executor = dt.AttentionExecutor(kernels=kernels)
    executor.prepare(plan)
    n = plan.local_tokens(rank)
    q = torch.randn(n, 8, 128).bfloat16().requires_grad_()
    kv = torch.randn(n, 2, 2, 128).bfloat16().requires_grad_()
    wall, inside, attention = [], [], []
    for call in range(calls + 1):  # the first call warms up
        dist.barrier()
        start = time.perf_counter()
        o = dt.DCPAttention.apply(executor, q, kv)
        forward = executor.last_profile()
        o.float().sum().backward()
        backward = executor.last_profile()
        if call > 0:
            wall.append(time.perf_counter() - start)
            inside.append(forward["total_s"] + backward["total_s"])
            attention.append(forward["attention_s"] + backward["attention_s"])
    if rank == 0:
        queue.put((statistics.median(wall), statistics.median(inside),
                   statistics.median(attention)))
    dist.barrier()
    dist.destroy_process_group()


def plan_wait(rank: int, world: int, port: int, prefetch: int, step_s: float, block_size: int,
              queue) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=300))
    lengths = dcp.synthetic_lengths(120, "ldc", scale=4.0, seed=1)
    samples = [torch.zeros(n, dtype=torch.int64) for n in lengths]
    loader = dt.DCPDataLoader(samples, lambda seqlens: "causal", token_budget=131072,
                              plan_options=dict(topology=(1, world), block_size=block_size),
                              heads=8, kv_heads=2, head_dim=128, prefetch=prefetch)
    waits = []
    for _ in loader:
        waits.append(loader.last_plan_wait_s)
        time.sleep(step_s)
    if rank == 0:
        queue.put((len(waits), waits[0], statistics.mean(waits[1:])))
    dist.barrier()
    dist.destroy_process_group()


def spawn(fn, world: int, *args):
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(fn, args=(world, _port(), *args, queue), nprocs=world, join=True)
    return queue.get()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--step-s", type=float, default=1.0)
    parser.add_argument("--block-size", type=int, default=256)
    parser.add_argument("--only-loader", action="store_true")
    parser.add_argument("--kernels", nargs="+", default=["cpu", "torch"],
                        choices=["cpu", "torch"])
    args = parser.parse_args()
    for kernels in ([] if args.only_loader else args.kernels):
        wall, inside, attention = spawn(overhead, args.ranks, args.tokens, args.calls, kernels)
        print(
            f"DCPAttention forward+backward, {kernels} kernels, {args.tokens} tokens causal bf16 "
            f"8/2 heads x 128 on {args.ranks} ranks: {wall * 1e3:.1f} ms per call, C++ executor "
            f"{inside * 1e3:.1f} ms (attention {attention * 1e3:.1f} ms), Python overhead "
            f"{(wall - inside) * 1e3:.2f} ms ({100 * (wall - inside) / wall:.2f}%)")
    for prefetch in (0, 2):
        batches, first, later = spawn(plan_wait, args.ranks, prefetch, args.step_s,
                                      args.block_size)
        print(f"DCPDataLoader prefetch {prefetch}: {batches} batches of <= 131072 tokens "
              f"(LDC-like at scale 4, block {args.block_size}, 1x{args.ranks}), step "
              f"{args.step_s} s: first batch waits {first * 1e3:.1f} ms for its plan, later "
              f"ones {later * 1e3:.2f} ms on average")


if __name__ == "__main__":
    main()
