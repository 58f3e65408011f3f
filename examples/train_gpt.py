# SPDX-License-Identifier: Apache-2.0
"""Train a tiny GPT with dcp on 4 CPU ranks and check it against the same model run densely.

A 2-layer GPT (rotary positions, grouped-query attention: 4 query heads sharing 2 KV heads) is
trained for a few steps on variable-length batches in which every sample has its own attention
mask (causal, lambda, shared-question and documents, in turn). The same steps run twice from the
same initial weights:

  * in this process, with dense masked attention over each whole sequence;
  * on 4 ranks (torch.multiprocessing, gloo on 127.0.0.1, topology 2 nodes x 2 devices), each
    rank holding only its own tokens of every batch (the plan's token map), attention through
    ``dcp.torch.DCPAttention``; gradients are summed over the ranks (each rank's loss is its
    tokens' share of the batch loss).

The attention kernels are dcp's CPU kernels by default; ``--kernels torch`` runs the same plan
with the torch kernel backend (torch operations, as on a GPU).

It prints both runs' losses and the largest gradient difference and exits with status 1 unless
every loss agrees within 1e-5 (relative) and every parameter gradient of every step within 1e-4
of the reference's largest magnitude. Run it with the package importable:

    PYTHONPATH=build/python python examples/train_gpt.py          # or after `pip install .`
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import socket
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

import dcp
import dcp.torch as dt

VOCAB, D_MODEL, HEADS, KV_HEADS, HEAD_DIM, LAYERS = 64, 64, 4, 2, 16, 2
MASKS = ["causal", "lambda:sink=4,window=24", "shared-question:question=0.3,answers=2",
         "documents:count=2"]
TOPOLOGY, BLOCK_SIZE = (2, 2), 32
LOSS_RTOL, GRAD_RTOL = 1e-5, 1e-4


# --- data -------------------------------------------------------------------------------------

def batches(steps: int, seed: int) -> list[tuple[torch.Tensor, list[int], list[str]]]:
    """`steps` batches of 5 to 8 samples of 12 to 160 tokens: (token ids, seqlens, masks)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for step in range(steps):
        count = int(torch.randint(5, 9, (1,), generator=g))
        seqlens = [int(x) for x in torch.randint(12, 161, (count,), generator=g)]
        ids = torch.randint(0, VOCAB, (sum(seqlens),), generator=g)
        masks = [MASKS[(step + i) % len(MASKS)] for i in range(count)]
        out.append((ids, seqlens, masks))
    return out


def labels_of(ids: torch.Tensor, seqlens: list[int]) -> torch.Tensor:
    """Next-token targets inside each sequence; -100 (ignored) at each sequence's last token."""
    labels = torch.full_like(ids, -100)
    begin = 0
    for n in seqlens:
        labels[begin:begin + n - 1] = ids[begin + 1:begin + n]
        begin += n
    return labels


def positions_of(seqlens: list[int]) -> torch.Tensor:
    return torch.cat([torch.arange(n) for n in seqlens])


# --- model ------------------------------------------------------------------------------------

def rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [tokens, heads, head_dim] at each token's position in its sequence."""
    half = x.shape[-1] // 2
    freq = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half))
    angle = positions.to(torch.float32)[:, None] * freq[None, :]
    cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D_MODEL), nn.LayerNorm(D_MODEL)
        self.q = nn.Linear(D_MODEL, HEADS * HEAD_DIM, bias=False)
        self.kv = nn.Linear(D_MODEL, 2 * KV_HEADS * HEAD_DIM, bias=False)
        self.out = nn.Linear(HEADS * HEAD_DIM, D_MODEL, bias=False)
        self.mlp = nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.GELU(),
                                 nn.Linear(4 * D_MODEL, D_MODEL))

    def forward(self, x, positions, attend):
        h = self.norm1(x)
        q = rope(self.q(h).view(-1, HEADS, HEAD_DIM), positions)
        kv = self.kv(h).view(-1, 2, KV_HEADS, HEAD_DIM)
        k, v = rope(kv[:, 0], positions), kv[:, 1]
        x = x + self.out(attend(q, k, v).reshape(-1, HEADS * HEAD_DIM))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)

    def forward(self, ids, positions, attend):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, positions, attend)
        return self.head(self.norm(x))


def new_model() -> TinyGPT:
    torch.manual_seed(1234)
    return TinyGPT()


# --- the dense reference ----------------------------------------------------------------------

def dense_mask(spec: str, n: int) -> torch.Tensor:
    """bool [n, n] from the definitions of docs/mask_spec.md (written here, not taken from dcp)."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    causal = j <= i
    family, _, params = spec.partition(":")
    p = dict(kv.split("=") for kv in params.split(",")) if params else {}
    if family == "causal":
        return causal
    if family == "lambda":
        return causal & ((j < int(p["sink"])) | (j > i - int(p["window"])))
    if family == "shared-question":
        q, answers = math.floor(float(p["question"]) * n), int(p["answers"])
        size, first = (n - q) // answers, torch.zeros(n, dtype=torch.long)
        for a in range(answers):
            end = n if a == answers - 1 else q + (a + 1) * size
            first[q + a * size:end] = q + a * size
        return causal & ((j < q) | (j >= first[:, None]))
    if family == "documents":
        count, first = int(p["count"]), torch.zeros(n, dtype=torch.long)
        for d in range(count):
            first[d * n // count:(d + 1) * n // count] = d * n // count
        return causal & (j >= first[:, None])
    raise ValueError(spec)


def dense_attention(seqlens, masks):
    def attend(q, k, v):
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        out, begin = [], 0
        for n, spec in zip(seqlens, masks):
            s = torch.einsum("ihd,jhd->hij", q[begin:begin + n], k[begin:begin + n])
            s = s / math.sqrt(HEAD_DIM)
            p = torch.softmax(s.masked_fill(~dense_mask(spec, n), float("-inf")), dim=-1)
            out.append(torch.einsum("hij,jhd->ihd", p, v[begin:begin + n]))
            begin += n
        return torch.cat(out)
    return attend


def train_dense(steps: int, seed: int, lr: float):
    model = new_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses, grads = [], []
    for ids, seqlens, masks in batches(steps, seed):
        labels = labels_of(ids, seqlens)
        logits = model(ids, positions_of(seqlens), dense_attention(seqlens, masks))
        loss = F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
        loss = loss / (labels != -100).sum()
        opt.zero_grad()
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        opt.step()
    return losses, grads


# --- the dcp run ------------------------------------------------------------------------------

def train_rank(rank: int, world: int, port: int, steps: int, seed: int, lr: float, kernels: str,
               out: str):
    timeout = datetime.timedelta(seconds=120)
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    try:
        torch.set_num_threads(1)
        model = new_model()
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        executor = dt.AttentionExecutor(kernels=kernels)
        losses, grads = [], []
        for ids, seqlens, masks in batches(steps, seed):
            batch = dcp.Batch(seqlens, masks, heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                              dtype="fp32")
            plan = dcp.plan(batch, topology=TOPOLOGY, block_size=BLOCK_SIZE)
            executor.prepare(plan)
            # This rank's tokens only: ids, targets and positions in the plan's token-map order.
            local = dt.local_indices(plan, rank)
            labels = labels_of(ids, seqlens)[local]
            logits = model(ids[local], dt.position_ids(plan, rank),
                           lambda q, k, v: dt.dcp_attention(executor, q, k, v))
            total = (labels_of(ids, seqlens) != -100).sum()
            loss = F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum") / total
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            whole = loss.detach().clone()
            dist.all_reduce(whole)
            losses.append(whole.item())
            grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
            opt.step()
        if rank == 0:
            torch.save({"losses": losses, "grads": grads}, out)
        # No rank tears its connections down while another still sends to it.
        if store.add("finished", 1) == world:
            store.set("all finished", "1")
        store.wait(["all finished"])
    finally:
        # torch 2.4 can deadlock destroying a gloo group while its worker thread still waits for
        # the GIL to free a finished collective's tensors: hand the GIL over first.
        time.sleep(0.05)
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--kernels", choices=["auto", "cpu", "torch"], default="auto",
                        help="dcp.torch.AttentionExecutor's kernels (default: auto = dcp's CPU "
                             "kernels on these CPU tensors)")
    args = parser.parse_args(argv)
    world = TOPOLOGY[0] * TOPOLOGY[1]

    ref_losses, ref_grads = train_dense(args.steps, args.seed, args.lr)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "dcp.pt")
        mp.spawn(train_rank, nprocs=world, join=True,
                 args=(world, free_port(), args.steps, args.seed, args.lr, args.kernels, out))
        result = torch.load(out)

    ok = True
    print(f"{'step':>4}  {'dense loss':>12}  {'dcp loss':>12}  {'largest grad diff':>18}")
    for step, (ref, got) in enumerate(zip(ref_losses, result["losses"])):
        worst = 0.0
        for name, g in ref_grads[step].items():
            diff = (result["grads"][step][name] - g).abs().max().item()
            rel = diff / max(g.abs().max().item(), 1e-30)
            worst = max(worst, rel)
            ok = ok and rel <= GRAD_RTOL
        ok = ok and abs(got - ref) <= LOSS_RTOL * abs(ref)
        print(f"{step:>4}  {ref:>12.7f}  {got:>12.7f}  {worst:>18.3e}")
    print("OK: dcp on 4 ranks matches the dense run" if ok else
          f"FAILED: losses beyond {LOSS_RTOL} or gradients beyond {GRAD_RTOL} (relative)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
