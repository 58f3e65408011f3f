# SPDX-License-Identifier: Apache-2.0
"""dcp.torch.DCPAttention on 2 and 4 gloo ranks, with dcp's CPU kernels and with the torch
kernels (forced on CPU tensors; on CUDA when there is a GPU): each rank holds only its tokens;
forward and backward (autograd) must give the dense single-process reference's rows for that
rank."""
from __future__ import annotations

import math
import os

import pytest
import torch
import torch.distributed as dist

import dcp
import dcp.torch as dt

from dense import attention, logsumexp
from ranks import run_ranks

SEQLENS = [150, 37, 64, 9]
SHAPE = dict(heads=4, kv_heads=2, head_dim=16)
# One spec of every mask family (docs/mask_spec.md), with parameters that matter at these lengths.
FAMILIES = ["causal", "full", "sliding-window:window=20", "lambda:sink=5,window=40",
            "causal-blockwise:block=16,local=1", "shared-question:question=0.25,answers=3",
            "documents:count=3", "modality:image=20,text=12"]
KERNELS = ["cpu", "torch"]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _inputs(dtype):
    g = torch.Generator().manual_seed(0)
    total = sum(SEQLENS)
    q = torch.randn(total, SHAPE["heads"], SHAPE["head_dim"], generator=g, dtype=torch.float64)
    kv = torch.randn(total, 2, SHAPE["kv_heads"], SHAPE["head_dim"], generator=g,
                     dtype=torch.float64)
    w = torch.randn(total, SHAPE["heads"], SHAPE["head_dim"], generator=g, dtype=torch.float64)
    # Representable in the run's dtype, so the reference sees the very same inputs.
    return [t.to(dtype).to(torch.float64) for t in (q, kv, w)]


def _check_rank(rank, world, specs, dtype_name, topology, kernels, device="cpu",
                score_bytes=None):
    if score_bytes is not None:
        dt.TorchKernels.score_bytes = score_bytes
    if device == "cuda":
        device = f"cuda:{torch.cuda.current_device()}"
    for spec in specs:
        _check_spec(rank, spec, getattr(torch, dtype_name), topology, kernels, torch.device(device))


def _check_spec(rank, spec, dtype, topology, kernels, device):
    batch = dcp.Batch(SEQLENS, spec, dtype="bf16" if dtype == torch.bfloat16 else "fp32",
                      **SHAPE)
    # dcp's own placement (static layouts are tuning candidates, not what this tests).
    plan = dcp.plan(batch, topology=topology, block_size=32, other_strategies=False)
    q, kv, w = _inputs(dtype)
    # The reference, in float64, with autograd for the gradients. Its backward takes Delta =
    # rowsum(dO * O) from O as stored in `dtype`, as dcp and FlashAttention do (C++:
    # DenseAttention): that moves dS = P (dP - Delta) by -P * dDelta, the gradient of
    # -dDelta * lse with dDelta held constant.
    qr, kvr = q.clone().requires_grad_(), kv.clone().requires_grad_()
    o_ref = attention(qr, kvr[:, 0], kvr[:, 1], SEQLENS, spec)
    stored = o_ref.detach().to(dtype).to(torch.float64)
    d_delta = ((stored - o_ref.detach()) * w).sum(-1)
    lse_ref = logsumexp(qr, kvr[:, 0], SEQLENS, spec)
    ((o_ref * w).sum() - (d_delta * lse_ref).sum()).backward()

    executor = dt.AttentionExecutor(kernels=kernels)
    executor.prepare(plan)
    ql = dt.dispatch(q, plan, rank).to(device, dtype).requires_grad_()
    kvl = dt.dispatch(kv, plan, rank).to(device, dtype).requires_grad_()
    o = dt.DCPAttention.apply(executor, ql, kvl)
    assert o.device == device and o.dtype == dtype
    (o.double() * dt.dispatch(w, plan, rank).to(device)).sum().backward()
    # The gradients of the leaves on `device`, read before moving (a moved copy has no grad).
    o, dq, dkv = o.detach().cpu(), ql.grad.cpu(), kvl.grad.cpu()

    # Element by element, |got - want| <= rtol (|want| + RMS(want)), with the rtol and its
    # derivation of dcp run's check (docs/architecture.md, "Numerics"): 2^-16 for fp32, 2^-6 for
    # bf16; the RMS is the whole tensor's (dK and dV each their own).
    rtol = 2.0 ** -16 if dtype == torch.float32 else 2.0 ** -6
    for name, got, want in (("o", o, o_ref), ("dq", dq, qr.grad), ("dk", dkv[:, 0], kvr.grad[:, 0]),
                            ("dv", dkv[:, 1], kvr.grad[:, 1])):
        want = want.detach()
        _expect_within(got.double(), dt.dispatch(want, plan, rank), want, rtol,
                       f"{spec} rank {rank} {name}")
    # undispatch gives back the whole output on every rank.
    whole = dt.undispatch(o.double(), plan)
    _expect_within(whole, o_ref.detach(), o_ref.detach(), rtol, f"{spec} undispatched o")


def _expect_within(got, want, whole, rtol, what):
    """Every element of `got` within rtol (|want| + RMS(whole)) of `want`."""
    bound = rtol * (want.abs() + whole.pow(2).mean().sqrt())
    ratio = ((got - want).abs() / bound).nan_to_num(0.0, posinf=float("inf"))
    worst = ratio.max().item()
    at = ratio.argmax().item()
    assert worst <= 1.0, (f"{what}: element {at} = {got.flatten()[at].item()}, reference "
                          f"{want.flatten()[at].item()}: {worst:.3g}x its bound")


@pytest.mark.parametrize("kernels", KERNELS)
def test_every_mask_family_matches_the_dense_reference_on_four_ranks(kernels):
    run_ranks(_check_rank, 4, FAMILIES, "float32", (2, 2), kernels)


@pytest.mark.parametrize("kernels", KERNELS)
def test_bf16_on_two_ranks(kernels):
    run_ranks(_check_rank, 2, ["causal", "documents:count=3"], "bfloat16", (1, 2), kernels)


def test_torch_kernels_take_tiles_in_chunks_of_rows():
    # 3 rows of a 32-token KV block per chunk: chunks start inside the masks' row slices.
    rows = 3 * 4 * SHAPE["heads"] * 32
    run_ranks(_check_rank, 2, ["causal", "lambda:sink=5,window=40", "documents:count=3"],
              "float32", (1, 2), "torch", "cpu", rows)


@needs_cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_tensors_on_one_rank(dtype):
    run_ranks(_check_rank, 1, FAMILIES, dtype, (1, 1), "auto", "cuda", backend="nccl")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_cuda_tensors_on_two_ranks_over_nccl():
    run_ranks(_check_rank, 2, FAMILIES, "bfloat16", (1, 2), "auto", "cuda", backend="nccl")


def _refused_devices(rank, world, kernels, kv_device, message):
    plan = dcp.plan(dcp.Batch(SEQLENS, "causal", **SHAPE), topology=(1, world), block_size=32)
    executor = dt.AttentionExecutor(kernels=kernels)
    executor.prepare(plan)
    q, kv, _ = _inputs(torch.float32)
    with pytest.raises(ValueError, match=message):
        dt.DCPAttention.apply(executor, dt.dispatch(q, plan, rank).float().cuda(),
                              dt.dispatch(kv, plan, rank).float().to(kv_device))


@needs_cuda
@pytest.mark.parametrize("kernels, kv_device, message", [
    ("cpu", "cuda", "kernels='cpu' runs on CPU tensors"),  # the CPU kernels refuse CUDA tensors
    ("torch", "cpu", "kv: on cpu, but q is on cuda"),       # tensors on two devices
])
def test_tensors_the_kernels_cannot_run_are_refused(kernels, kv_device, message):
    run_ranks(_refused_devices, 1, kernels, kv_device, message, backend="nccl")


def test_an_unknown_kernel_choice_is_refused():
    run_ranks(_unknown_kernels, 1)


def _unknown_kernels(rank, world):
    with pytest.raises(ValueError, match="kernels='gpu'; expected one of"):
        dt.AttentionExecutor(kernels="gpu")


def _different_plans(rank, world):
    batch = dcp.Batch(SEQLENS if rank == 0 else SEQLENS[:-1], "causal", **SHAPE)
    plan = dcp.plan(batch, topology=(1, world), block_size=32)
    executor = dt.AttentionExecutor()
    with pytest.raises(ValueError, match="different plans"):
        executor.prepare(plan)


def test_different_plans_on_different_ranks_raise_on_every_rank():
    run_ranks(_different_plans, 2)


def _wrong_group_size(rank, world):
    plan = dcp.plan(dcp.Batch(SEQLENS, "causal", **SHAPE), topology=(1, 4), block_size=32)
    with pytest.raises(ValueError, match="for 4 devices but the process group has 2"):
        dt.AttentionExecutor().prepare(plan)


def test_a_plan_for_another_group_size_raises_on_every_rank():
    run_ranks(_wrong_group_size, 2)


def _bad_shape_fails_every_rank(rank, world, store_path):
    # dcp's own placement: on so small a batch another strategy's may keep each sequence on one
    # rank, and then no rank waits for another to hear of its failure.
    plan = dcp.plan(dcp.Batch(SEQLENS, "causal", **SHAPE), topology=(1, world), block_size=32,
                    other_strategies=False)
    # rank 0 hears of rank 1's failure through the store (a timeout would name no rank).
    store = dist.FileStore(store_path, world) if store_path else None
    executor = dt.AttentionExecutor(timeout_s=20, store=store)
    executor.prepare(plan)
    q, kv, _ = _inputs(torch.float32)
    ql = dt.dispatch(q, plan, rank).float()
    kvl = dt.dispatch(kv, plan, rank).float()
    if rank == 1:
        ql = ql[:, :2]  # wrong number of heads
    with pytest.raises((ValueError, RuntimeError)) as info:
        dt.DCPAttention.apply(executor, ql, kvl)
    if rank == 1:
        assert "wrong shape" in str(info.value)
    else:
        assert "rank 1" in str(info.value)
    # The checks passed. Rank 0 still has receives posted that rank 1 will never send (gloo cannot
    # cancel them), and tearing such a group down aborts the process in torch's gloo ("terminate
    # called without an active exception", seen 1 run in 3): a rank whose group failed ends
    # without tearing it down, as a failed training job would.
    os._exit(0)


@pytest.mark.parametrize("store", ["default", "given"])
def test_a_bad_tensor_on_one_rank_raises_on_every_rank(store, tmp_path):
    run_ranks(_bad_shape_fails_every_rank, 2, str(tmp_path / "store") if store == "given" else "")


def _compiled(rank, world):
    plan = dcp.plan(dcp.Batch(SEQLENS, "causal", dtype="fp32", **SHAPE), topology=(1, world),
                    block_size=32)
    executor = dt.AttentionExecutor()
    executor.prepare(plan)
    q, kv, w = _inputs(torch.float32)
    ql = dt.dispatch(q, plan, rank).float()
    kvl = dt.dispatch(kv, plan, rank).float()

    def loss(q, kv):
        return (dt.DCPAttention.apply(executor, q, kv) * 2).sum()

    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    eager_q, eager_kv = ql.clone().requires_grad_(), kvl.clone().requires_grad_()
    comp_q, comp_kv = ql.clone().requires_grad_(), kvl.clone().requires_grad_()
    loss(eager_q, eager_kv).backward()
    compiled(comp_q, comp_kv).backward()
    assert torch.equal(eager_q.grad, comp_q.grad) and torch.equal(eager_kv.grad, comp_kv.grad)


def test_torch_compile_traces_the_operator_without_a_graph_break():
    run_ranks(_compiled, 1)


def _strided(rank, world, kernels):
    plan = dcp.plan(dcp.Batch(SEQLENS, "causal", dtype="fp32", **SHAPE), topology=(1, world),
                    block_size=32)
    executor = dt.AttentionExecutor(kernels=kernels)
    executor.prepare(plan)
    q, kv, _ = _inputs(torch.float32)
    ql = dt.dispatch(q, plan, rank).float()
    kvl = dt.dispatch(kv, plan, rank).float()
    # Views with other strides: q every other head_dim slot of a wider tensor, kv token-strided.
    wide = torch.zeros(ql.shape[0], ql.shape[1], 2 * ql.shape[2])
    wide[..., ::2] = ql
    padded = torch.zeros(kvl.shape[0], 3, *kvl.shape[2:])
    padded[:, :2] = kvl
    q_view, kv_view = wide[..., ::2], padded[:, :2]
    assert not q_view.is_contiguous() and not kv_view.is_contiguous()
    expected = dt.DCPAttention.apply(executor, ql, kvl)
    got = dt.DCPAttention.apply(executor, q_view, kv_view)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("kernels", KERNELS)
def test_strided_tensors_give_the_results_of_contiguous_ones(kernels):
    run_ranks(_strided, 2, kernels)


def _nan_reaches_its_row(rank, world, kernels, sign):
    # One NaN in Q of token T, head H of the first (causal) sequence.
    batch = dcp.Batch(SEQLENS, "causal", dtype="fp32", **SHAPE)
    plan = dcp.plan(batch, topology=(1, world), block_size=32, other_strategies=False)
    q, kv, w = _inputs(torch.float32)
    T, H = 100, 3
    q[T, H, 5] = math.copysign(math.nan, sign)
    executor = dt.AttentionExecutor(kernels=kernels)
    executor.prepare(plan)
    ql = dt.dispatch(q, plan, rank).float().requires_grad_()
    kvl = dt.dispatch(kv, plan, rank).float().requires_grad_()
    o = dt.DCPAttention.apply(executor, ql, kvl)
    (o * dt.dispatch(w, plan, rank).float()).sum().backward()
    o, dq, dkv = (dt.undispatch(x.detach(), plan) for x in (o, ql.grad, kvl.grad))
    kv_head = H // (SHAPE["heads"] // SHAPE["kv_heads"])
    # The row and its gradients are NaN, as the dense softmax gives; the rows before it (which do
    # not see it) and every other sequence stay finite.
    assert o[T, H].isnan().all() and dq[T, H].isnan().all()
    assert dkv[:T + 1, :, kv_head].isnan().all()
    assert o[:T].isfinite().all() and dq[:T].isfinite().all()
    first = SEQLENS[0]
    for x in (o, dq, dkv):
        assert x[first:].isfinite().all()


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_nan_input_reaches_its_rows_output_and_gradients(kernels, sign):
    run_ranks(_nan_reaches_its_row, 2, kernels, sign)


def _backward_without_its_plan(rank, world):
    import gc
    plans = [dcp.plan(dcp.Batch(lengths, "causal", dtype="fp32", **SHAPE), topology=(1, world),
                      block_size=32) for lengths in ([96, 64], [64, 96])]
    executor = dt.AttentionExecutor()
    executor.prepare(plans[0])
    q, kv, _ = _inputs(torch.float32)
    q, kv = q[:160].float(), kv[:160].float()

    def forward(plan):
        ql = dt.dispatch(q, plan, rank).requires_grad_()
        kvl = dt.dispatch(kv, plan, rank).requires_grad_()
        return dt.DCPAttention.apply(executor, ql, kvl).sum(), ql
    # The same local token count under both plans: only the generation check tells them apart.
    assert plans[0].local_tokens(rank) == plans[1].local_tokens(rank)
    loss, _ = forward(plans[0])
    executor.prepare(plans[1])
    with pytest.raises(RuntimeError, match=r"prepare\(\) was called between this attention's "
                                           r"forward and its backward"):
        loss.backward()
    # Forward and backward of the new plan run, and the next prepare after a backward is fine.
    loss, ql = forward(plans[1])
    loss.backward()
    assert ql.grad.isfinite().all()
    executor.prepare(plans[0])
    loss, ql = forward(plans[0])
    loss.backward()
    assert ql.grad.isfinite().all()
    # An executor gone before the backward: a clear error, not a KeyError.
    loss, _ = forward(plans[0])
    del executor
    gc.collect()
    with pytest.raises(RuntimeError, match="keep it alive until the backward has run"):
        loss.backward()


def test_a_backward_whose_plan_is_gone_raises_a_clear_error():
    run_ranks(_backward_without_its_plan, 1)


def _bad_timeouts_and_scalars(rank, world):
    for timeout in (0, -1.0, math.nan, math.inf, "5"):
        with pytest.raises(ValueError, match="timeout_s=.* must be a positive number of seconds"):
            dt.AttentionExecutor(timeout_s=timeout)
    plan = dcp.plan(dcp.Batch([64], "causal", dtype="fp32", **SHAPE), topology=(1, world),
                    block_size=32)
    with pytest.raises(ValueError, match="dispatch: the tensor is a scalar"):
        dt.dispatch(torch.tensor(1.0), plan, rank)
    with pytest.raises(ValueError, match="undispatch: the tensor is a scalar"):
        dt.undispatch(torch.tensor(1.0), plan)


def test_a_bad_timeout_or_a_scalar_tensor_raises_value_error():
    run_ranks(_bad_timeouts_and_scalars, 1)
