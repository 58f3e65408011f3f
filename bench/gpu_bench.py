# SPDX-License-Identifier: Apache-2.0
"""dcp.torch on one CUDA GPU (results in bench/RESULTS.md): DCPAttention forward + backward with
the torch kernel backend against torch's own fused attention on the same tokens.

One rank (an NCCL group of one): every tile runs on this GPU, no transfer is made, so the figure
is the cost of executing a plan's instruction stream with the torch kernels (one einsum chain per
tile, float32 scores) against the best a single GPU does without dcp:
``torch.nn.functional.scaled_dot_product_attention`` per sequence through FlashAttention
(causal, the input dtype), forward + backward. Also the peak CUDA memory each allocates beyond
its inputs.

    PYTHONPATH=build/python python bench/gpu_bench.py [--tokens 32768] [--block-size 1024]
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import dcp
import dcp.torch as dt

HEADS, KV_HEADS, HEAD_DIM = 8, 2, 128


def timed(step, calls: int) -> tuple[float, int]:
    """Median seconds of step() over `calls` after one warm-up, and its peak extra bytes."""
    step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), torch.cuda.max_memory_allocated() - base


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=300))

    lengths = dcp.synthetic_lengths(64, "ldc", seed=args.seed)
    seqlens, total = [], 0
    for n in lengths:  # the first lengths that fit the token count, the last one cut to fit
        n = min(n, args.tokens - total)
        if n > 0:
            seqlens.append(n)
            total += n
    batch = dcp.Batch(seqlens, "causal", heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                      dtype="bf16")
    plan = dcp.plan(batch, topology=(1, 1), block_size=args.block_size)
    executor = dt.AttentionExecutor(kernels="torch")
    executor.prepare(plan)

    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(total, HEADS, HEAD_DIM, generator=g, device="cuda").bfloat16()
    kv = torch.randn(total, 2, KV_HEADS, HEAD_DIM, generator=g, device="cuda").bfloat16()
    d_o = torch.randn(total, HEADS, HEAD_DIM, generator=g, device="cuda").bfloat16()
    ql = dt.dispatch(q, plan, 0).requires_grad_()
    kvl = dt.dispatch(kv, plan, 0).requires_grad_()
    d_ol = dt.dispatch(d_o, plan, 0)

    def dcp_step():
        ql.grad = kvl.grad = None
        dt.DCPAttention.apply(executor, ql, kvl).backward(d_ol)

    qs = q.clone().requires_grad_()
    kvs = kv.clone().requires_grad_()
    bounds = [0]
    for n in seqlens:
        bounds.append(bounds[-1] + n)

    def sdpa(q, kv, b, e):
        """Causal attention of one sequence through FlashAttention (KV heads repeated for the
        query heads: the flash backend takes no grouped heads); an error rather than a slower
        fallback when flash cannot run."""
        k, v = (kv[b:e, i].repeat_interleave(HEADS // KV_HEADS, dim=1).transpose(0, 1)[None]
                for i in (0, 1))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q[b:e].transpose(0, 1)[None], k, v,
                                                  is_causal=True)[0].transpose(0, 1)

    def sdpa_step():
        qs.grad = kvs.grad = None
        torch.cat([sdpa(qs, kvs, b, e) for b, e in zip(bounds, bounds[1:])]).backward(d_o)

    # The two agree (a check that the timed programs compute the same thing).
    dcp_step()
    sdpa_step()
    o_dcp = dt.undispatch(dt.DCPAttention.apply(executor, ql, kvl).detach(), plan)
    o_ref = torch.cat([sdpa(q, kv, b, e) for b, e in zip(bounds, bounds[1:])])
    error = (o_dcp.float() - o_ref.float()).abs().max().item()

    flops = 4 * HEADS * HEAD_DIM * sum(n * (n + 1) / 2 for n in seqlens) * 3.5  # fwd 1 + bwd 2.5
    dcp_s, dcp_bytes = timed(dcp_step, args.calls)
    sdpa_s, sdpa_bytes = timed(sdpa_step, args.calls)
    name = torch.cuda.get_device_name()
    print(f"{name}, torch {torch.__version__}: {total} tokens in {len(seqlens)} causal sequences "
          f"(LDC-like, seed {args.seed}, longest {max(seqlens)}), bf16, {HEADS}/{KV_HEADS} heads "
          f"x {HEAD_DIM}, block {args.block_size}, plan {plan.origin}")
    print(f"  dcp.torch (torch kernels, 1 rank): {dcp_s * 1e3:.1f} ms fwd+bwd, "
          f"{flops / dcp_s / 1e12:.1f} TFLOP/s, peak extra memory {dcp_bytes / 2**30:.2f} GiB")
    print(f"  torch SDPA per sequence:          {sdpa_s * 1e3:.1f} ms fwd+bwd, "
          f"{flops / sdpa_s / 1e12:.1f} TFLOP/s, peak extra memory {sdpa_bytes / 2**30:.2f} GiB")
    print(f"  dcp / SDPA time {dcp_s / sdpa_s:.2f}x; largest |o difference| {error:.3g}")
    dt.DCPAttention.apply(executor, ql, kvl)
    torch.cuda.synchronize()
    profile = executor.last_profile()  # host time inside the C++ executor, by kind
    print("  dcp forward, executor host time: " +
          ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in profile.items()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
