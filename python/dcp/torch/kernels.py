# SPDX-License-Identifier: Apache-2.0
"""The torch kernel backend: dcp's kernels written with torch operations, on any device.

The C++ executor runs the plan's instruction stream unchanged and calls this object for every
computation (the contract of ``dcp::KernelBackend``, include/dcp/kernels.h), passing torch views
of its memory: the caller's tensors and its workspace, which ``allocate`` takes from torch on the
backend's device. So the same program runs on CPU, CUDA or ROCm tensors, on the current stream
of the calling thread, and nothing here assumes a device.

Numerics follow the CPU kernels: inputs in their storage dtype (float32 or bfloat16), every
product and accumulator in float32, outputs rounded to the storage dtype by ``copy``.
Layouts (one piece = one data block's tokens of one head group):
    q, o, dO, dq [tokens, heads, head_dim]; kv, dkv [tokens, 2, kv_heads, head_dim] (K, V);
    lse, delta [tokens, heads], float32.
A tile's mask comes as slices (row_begin, row_end, lo_base, lo_slope, hi_base, hi_slope): row i
of [row_begin, row_end) may see columns [lo_base + lo_slope*i, hi_base + hi_slope*i).
"""
from __future__ import annotations

import functools

import torch

_NEG_INF = float("-inf")


class TorchKernels:
    """dcp's kernels as torch operations on ``device``."""

    name = "torch"

    #: The most bytes of float32 scores one step materialises: a tile is taken in chunks of
    #: query rows under it (the backward holds about four such blocks at once), so a tile of
    #: long chunks (a MagiAttention plan of one 48K-token sequence makes one 48K x 48K tile)
    #: needs bounded memory rather than its whole score matrix: 76 GB there.
    score_bytes = 256 << 20

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        # Masks repeat from tile to tile (every diagonal tile of a causal sequence has the same
        # one), so each is built once; rows its slices cover whole get None (no masking).
        self._mask = functools.lru_cache(maxsize=64)(self._build_mask)

    # -- memory ---------------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src)  # converts float32 <-> bfloat16 rounding to nearest even

    # -- attention ------------------------------------------------------------------------------
    def attend_forward(self, tiles: list, scale: float) -> None:
        for o, lse, q, kv, slices in tiles:
            k, v = kv[:, 0].float(), kv[:, 1].float()  # once per tile, whatever its chunks
            for r0, r1 in self._row_chunks(q.shape, kv.shape[0]):
                allowed = self._mask(r0, r1, kv.shape[0], slices)
                s = _scores(_grouped(q[r0:r1], k), k, allowed, scale)  # [kvh, g, rows, k]
                chunk_lse = torch.logsumexp(s, dim=-1)              # [kvh, g, rows]
                p = torch.exp(s - _finite(chunk_lse).unsqueeze(-1))  # masked: exp(-inf) = 0
                chunk_o = torch.einsum("hgqk,khd->qhgd", p, v).reshape(o[r0:r1].shape)
                chunk_lse = chunk_lse.permute(2, 0, 1).reshape(lse[r0:r1].shape)
                _merge_into(o[r0:r1], lse[r0:r1], chunk_o, chunk_lse)

    def attend_backward(self, tiles: list, scale: float) -> None:
        for dq, dkv, q, kv, d_o, lse, delta, slices in tiles:
            k, v = kv[:, 0].float(), kv[:, 1].float()
            for r0, r1 in self._row_chunks(q.shape, kv.shape[0]):
                allowed = self._mask(r0, r1, kv.shape[0], slices)
                q32 = _grouped(q[r0:r1], k)
                s = _scores(q32, k, allowed, scale)
                by_group = q32.shape[:3]  # (rows, kv_heads, group)
                p = torch.exp(s - _finite(lse[r0:r1]).reshape(by_group).permute(1, 2, 0)
                              .unsqueeze(-1))
                d_o32 = d_o[r0:r1].float().reshape(*by_group, -1)
                dp = torch.einsum("qhgd,khd->hgqk", d_o32, v)
                ds = p * (dp - delta[r0:r1].reshape(by_group).permute(1, 2, 0).unsqueeze(-1))
                dq[r0:r1] += (torch.einsum("hgqk,khd->qhgd", ds, k) * scale).reshape(
                    dq[r0:r1].shape)
                dkv[:, 0] += torch.einsum("hgqk,qhgd->khd", ds, q32) * scale
                dkv[:, 1] += torch.einsum("hgqk,qhgd->khd", p, d_o32)

    # -- reductions -----------------------------------------------------------------------------
    def merge_lse(self, o: torch.Tensor, lse: torch.Tensor, sources: list, lse_sources: list) -> None:
        if not sources:
            o.zero_()
            lse.fill_(_NEG_INF)
            return
        lses = torch.stack(lse_sources)                             # [n, rows]
        merged = torch.logsumexp(lses, dim=0)
        weights = torch.exp(lses - _finite(merged))                 # -inf sources weigh 0
        out = sum(w.unsqueeze(-1) * src.float() for w, src in zip(weights, sources))
        o.copy_(out)  # computed before writing: o may be one of the sources
        lse.copy_(merged)

    def sum(self, dst: torch.Tensor, sources: list) -> None:
        if not sources:
            dst.zero_()
            return
        dst.copy_(sum(src.float() for src in sources))

    def delta(self, delta: torch.Tensor, o: torch.Tensor, d_o: torch.Tensor) -> None:
        delta.copy_((o.float() * d_o.float()).sum(dim=-1))

    # -- helpers --------------------------------------------------------------------------------
    def _row_chunks(self, q_shape: torch.Size, kv_tokens: int) -> list[tuple[int, int]]:
        """[r0, r1) ranges of a tile's query rows whose scores fit ``score_bytes``."""
        q_tokens, heads = q_shape[0], q_shape[1]
        rows = max(1, self.score_bytes // (4 * heads * max(kv_tokens, 1)))
        return [(r0, min(r0 + rows, q_tokens)) for r0 in range(0, q_tokens, rows)]

    def _build_mask(self, r0: int, r1: int, kv_tokens: int,
                    slices: tuple) -> torch.Tensor | None:
        """Which columns rows [r0, r1) of a tile may see, or None when they see all of them."""
        if any(row_begin <= r0 and row_end >= r1 and lo_base <= 0 and lo_slope == 0 and
               hi_slope == 0 and hi_base >= kv_tokens
               for row_begin, row_end, lo_base, lo_slope, hi_base, hi_slope in slices):
            return None
        rows = torch.arange(r0, r1, device=self.device).unsqueeze(1)
        cols = torch.arange(kv_tokens, device=self.device).unsqueeze(0)
        allowed = torch.zeros(r1 - r0, kv_tokens, dtype=torch.bool, device=self.device)
        for row_begin, row_end, lo_base, lo_slope, hi_base, hi_slope in slices:
            allowed |= ((rows >= row_begin) & (rows < row_end) &
                        (cols >= lo_base + lo_slope * rows) & (cols < hi_base + hi_slope * rows))
        return allowed


def _grouped(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q [rows, heads, head_dim] in float32 as [rows, kv_heads, group, head_dim] (K's heads)."""
    rows, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    return q.float().reshape(rows, kv_heads, heads // kv_heads, head_dim)


def _scores(q32: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor | None,
            scale: float) -> torch.Tensor:
    """Masked scores [kv_heads, group, rows, k] in float32 of grouped q32 against float32 K."""
    s = torch.einsum("qhgd,khd->hgqk", q32, k) * scale
    return s if allowed is None else s.masked_fill(~allowed, _NEG_INF)


def _finite(x: torch.Tensor) -> torch.Tensor:
    """x with -inf (a row that sees nothing) as 0, so that subtracting it never makes a NaN."""
    return torch.where(torch.isinf(x), torch.zeros_like(x), x)


def _merge_into(o: torch.Tensor, lse: torch.Tensor, tile_o: torch.Tensor,
                tile_lse: torch.Tensor) -> None:
    """(o, lse) <- the log-sum-exp merge of (o, lse) and (tile_o, tile_lse), in place."""
    merged = torch.logaddexp(lse, tile_lse)
    base = _finite(merged)
    o.mul_(torch.exp(lse - base).unsqueeze(-1)).add_(tile_o * torch.exp(tile_lse - base).unsqueeze(-1))
    lse.copy_(merged)
