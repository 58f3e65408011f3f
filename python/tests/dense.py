# SPDX-License-Identifier: Apache-2.0
"""The dense single-process reference of the torch tests, written from the mask definitions of
docs/mask_spec.md with torch operations in float64: no dcp code."""
from __future__ import annotations

import math

import torch


def mask(spec: str, length: int) -> torch.Tensor:
    """bool [length, length]: row i may attend to column j."""
    i = torch.arange(length).unsqueeze(1)
    j = torch.arange(length).unsqueeze(0)
    causal = j <= i
    family, _, params = spec.partition(":")
    p = dict(kv.split("=") for kv in params.split(",")) if params else {}
    if family == "causal":
        return causal
    if family == "full":
        return torch.ones(length, length, dtype=torch.bool)
    if family == "sliding-window":
        return causal & (j > i - int(p.get("window", 4096)))
    if family == "causal-blockwise":
        block, local = int(p.get("block", 256)), int(p.get("local", 2))
        b, n = i // block, -(-length // block)
        edge = (b == 0) | (b == n - 1)
        return causal & (edge | (j < block) | (j >= torch.clamp(i - local * block, min=block)))
    if family == "modality":  # the periodic form: `text` text tokens, then `image` image tokens
        image, text = int(p["image"]), int(p.get("text", 0))
        phase = i % (image + text)
        span_end = torch.clamp(i - phase + text + image, max=length)
        return torch.where(phase < text, causal, j < span_end)
    if family == "lambda":
        sink, window = int(p.get("sink", 64)), int(p.get("window", 4096))
        return causal & ((j < sink) | (j > i - window))
    if family == "shared-question":
        q = math.floor(float(p.get("question", 0.2)) * length)
        answers = int(p.get("answers", 4))
        size = (length - q) // answers
        start = torch.full((length,), 0)
        for a in range(answers):
            a0 = q + a * size
            a1 = length if a == answers - 1 else a0 + size
            start[a0:a1] = a0
        allowed = causal & ((j < q) | (j >= start.unsqueeze(1)))
        return allowed
    if family == "documents":
        count = int(p["count"])
        doc = torch.tensor([d * length // count for d in range(count)] + [length])
        first = torch.zeros(length, dtype=torch.long)
        for d in range(count):
            first[doc[d]:doc[d + 1]] = doc[d]
        return causal & (j >= first.unsqueeze(1))
    raise ValueError(f"no reference for mask {spec}")


def attention(q, k, v, seqlens, spec: str, scale: float | None = None):
    """o [T, H, D] of packed sequences, each under `spec`; GQA by repeating KV heads."""
    heads, kv_heads, dim = q.shape[1], k.shape[1], q.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(dim)
    out, begin = [], 0
    for length in seqlens:
        qs, ks, vs = (t[begin:begin + length] for t in (q, k, v))
        ks = ks.repeat_interleave(heads // kv_heads, dim=1)
        vs = vs.repeat_interleave(heads // kv_heads, dim=1)
        s = torch.einsum("ihd,jhd->hij", qs, ks) * scale
        s = s.masked_fill(~mask(spec, length), float("-inf"))
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        out.append(torch.einsum("hij,jhd->ihd", p, vs))
        begin += length
    return torch.cat(out)


def logsumexp(q, k, seqlens, spec: str, scale: float | None = None):
    """lse [T, H] of packed sequences under `spec` (rows that attend to nothing: -1e4 + log n, a
    finite stand-in whose gradient is finite; callers weigh those rows by 0)."""
    heads, kv_heads, dim = q.shape[1], k.shape[1], q.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(dim)
    out, begin = [], 0
    for length in seqlens:
        qs, ks = q[begin:begin + length], k[begin:begin + length]
        ks = ks.repeat_interleave(heads // kv_heads, dim=1)
        s = torch.einsum("ihd,jhd->hij", qs, ks) * scale
        # exp(-1e4 - max) is 0 in float64: masked columns add nothing to a row that attends.
        out.append(torch.logsumexp(s.masked_fill(~mask(spec, length), -1e4), dim=-1).T)
        begin += length
    return torch.cat(out)
