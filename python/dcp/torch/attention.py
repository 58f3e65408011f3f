# SPDX-License-Identifier: Apache-2.0
"""DCP attention for PyTorch: one executor per rank and plan, an autograd op over it.

    executor = dcp.torch.AttentionExecutor(group=pg)
    executor.prepare(plan)                       # once per batch, on every rank of the group
    o = dcp.torch.DCPAttention.apply(executor, q, kv)

q is [local tokens, heads, head_dim], kv [local tokens, 2, kv_heads, head_dim] (K then V), in
the plan's token-map order (``dcp.torch.dispatch``); float32 or bfloat16, any strides, on any
device. The output is [local tokens, heads, head_dim] in q's dtype. Forward and backward run the
plan's programs on this rank's tokens only, exchanging data through the process group.

Kernels: the executor is dcp's C++ executor either way; its kernels are dcp's CPU kernels
(OpenBLAS) for CPU tensors, or torch operations (``dcp.torch.kernels.TorchKernels``) on the
tensors' device. ``kernels="auto"`` picks the CPU kernels for CPU tensors and torch's otherwise.
"""
# No `from __future__ import annotations`: torch 2.4 reads the operators' annotations as types.

import itertools
import math
import weakref

import torch
import torch.distributed as dist

from .. import _core
from ._comm import ProcessGroupComm, collective_device
from .kernels import TorchKernels

_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16"}
_KERNELS = ("auto", "cpu", "torch")


def _arg(name: str, t: torch.Tensor, device: torch.device) -> tuple:
    if t.device != device:
        raise ValueError(f"{name}: on {t.device}, but q is on {device}")
    if t.dtype not in _DTYPES:
        raise ValueError(f"{name}: dtype {t.dtype} is not supported (float32 or bfloat16)")
    return (t.data_ptr(), _DTYPES[t.dtype], tuple(t.shape), tuple(t.stride()))


class AttentionExecutor:
    """Runs prepared plans on this rank of ``group`` (default: the whole world).

    Args:
        group: the process group whose ranks are the plan's devices (rank i runs device i).
        timeout_s: how long a rank waits for a transfer before raising TimeoutError (CPU
            tensors; on devices the process group's own timeout applies).
        kernels: "auto" (dcp's CPU kernels for CPU tensors, torch's on other devices), "cpu"
            or "torch" (``dcp.torch.kernels.TorchKernels``, any device).
        store: a ``torch.distributed.Store`` every rank shares, through which a rank that fails
            mid-call tells the others at once. Default: the default process group's store where
            torch exposes it; without one, the others learn of a failure by their timeout.
    """

    def __init__(self, group: dist.ProcessGroup | None = None, timeout_s: float = 60.0,
                 kernels: str = "auto", store: dist.Store | None = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError("dcp.torch.AttentionExecutor needs torch.distributed initialised")
        if not (isinstance(timeout_s, (int, float)) and 0 < timeout_s < math.inf):
            raise ValueError(f"dcp.torch: timeout_s={timeout_s!r} must be a positive number of "
                             "seconds")
        if kernels not in _KERNELS:
            raise ValueError(f"dcp.torch: kernels={kernels!r}; expected one of {_KERNELS}")
        self.kernels = kernels
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.timeout_s = timeout_s
        self.plan = None
        self._executors: dict[torch.device, _core.RankExecutor] = {}  # of self.plan, by device
        self._last: _core.RankExecutor | None = None  # the one that ran the last call
        # One communicator for every plan this executor runs: exchange ids repeat from plan to
        # plan and match in order; its failure channel stays posted once.
        self._comm = ProcessGroupComm(group, timeout_s, store)
        # Never reused (an id() is, once its object is gone), so a handle names one executor.
        self.handle = next(_handles)
        _executors[self.handle] = self
        # Counts prepare() calls: a forward hands its backward the generation it ran, so that a
        # backward after the next prepare() raises instead of running another plan's programs.
        self.generation = 0

    def prepare(self, plan: "_core.Plan") -> None:
        """Makes ``plan`` the one the next calls run. Collective: every rank of the group calls
        it; when the plan is for another number of devices, or ranks hold different plans, it
        raises ValueError on every rank."""
        digest = plan.hash() & ((1 << 62) - 1)
        check = torch.tensor([digest, -digest, plan.devices, -plan.devices], dtype=torch.int64,
                             device=collective_device(self.group))
        dist.all_reduce(check, op=dist.ReduceOp.MAX, group=self.group)
        if check[0] != -check[1]:
            raise ValueError("dcp.torch: the ranks of the group hold different plans (their "
                             "hashes differ); every rank must prepare the same plan")
        if plan.devices != self.size or check[2] != -check[3]:
            raise ValueError(f"dcp.torch: the plan is for {plan.devices} devices but the process "
                             f"group has {self.size} ranks")
        self.plan = plan
        self._executors = {}
        self.generation += 1

    @property
    def local_tokens(self) -> int:
        """This rank's tokens under the prepared plan."""
        self._require_plan()
        return self.plan.local_tokens(self.rank)

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """o [L, heads, head_dim] (q's dtype) and lse [L, heads] (float32), on q's device."""
        run = self._executor_for(q.device)
        o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
        d = q.device
        run.forward(_arg("q", q, d), _arg("kv", kv, d), _arg("o", o, d), _arg("lse", lse, d))
        return o, lse

    def backward(self, q, kv, o, lse, d_o) -> tuple[torch.Tensor, torch.Tensor]:
        """dq (q's dtype) and dkv (kv's dtype) from the forward's tensors and the output grad."""
        run = self._executor_for(q.device)
        dq = torch.empty_like(q, memory_format=torch.contiguous_format)
        dkv = torch.empty_like(kv, memory_format=torch.contiguous_format)
        d = q.device
        run.backward(_arg("q", q, d), _arg("kv", kv, d), _arg("o", o, d), _arg("lse", lse, d),
                     _arg("d_o", d_o, d), _arg("dq", dq, d), _arg("dkv", dkv, d))
        return dq, dkv

    def last_profile(self) -> dict:
        """Where the last forward or backward call spent its time inside the C++ executor:
        total_s, attention_s, reduction_s, copies_s, communication_s, overhead_s."""
        if self._last is None:
            raise RuntimeError("dcp.torch: no call has run yet")
        return self._last.last_profile()

    def _executor_for(self, device: torch.device) -> "_core.RankExecutor":
        """The prepared plan's executor for tensors on ``device``, made on first use."""
        self._require_plan()
        if device not in self._executors:
            on_cpu = device.type == "cpu"
            if self.kernels == "cpu" and not on_cpu:
                raise ValueError(f"dcp.torch: kernels='cpu' runs on CPU tensors, not {device}; "
                                 "use kernels='torch' or 'auto'")
            kernels = None if self.kernels == "cpu" or (self.kernels == "auto" and on_cpu) \
                else TorchKernels(device)
            dl_device = torch.empty(0, device=device).__dlpack_device__()
            self._executors[device] = _core.RankExecutor(
                self.plan, self.rank, self.size, self._comm, kernels,
                (int(dl_device[0]), int(dl_device[1])))
        self._last = self._executors[device]
        return self._last

    def _require_plan(self) -> None:
        if self.plan is None:
            raise RuntimeError("dcp.torch: call AttentionExecutor.prepare(plan) first")


# The executor behind each handle: the operators below take an int, not the executor object, so
# that torch.library (and torch.compile through it) sees only tensors and plain numbers. The
# handle stays the same from plan to plan (a compiled graph holds it as a constant); the plan's
# generation travels from forward to backward as a tensor instead.
_executors: "weakref.WeakValueDictionary[int, AttentionExecutor]" = weakref.WeakValueDictionary()
_handles = itertools.count(1)


def _executor(handle: int) -> AttentionExecutor:
    executor = _executors.get(handle)
    if executor is None:
        raise RuntimeError("dcp.torch: the AttentionExecutor of this attention call no longer "
                           "exists; keep it alive until the backward has run")
    return executor


@torch.library.custom_op("dcp::attention_forward", mutates_args=())
def _attention_forward(q: torch.Tensor, kv: torch.Tensor,
                       handle: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    executor = _executor(handle)
    o, lse = executor.forward(q, kv)
    return o, lse, torch.tensor([executor.generation], dtype=torch.int64)


@_attention_forward.register_fake
def _(q, kv, handle):
    return (q.new_empty(q.shape), q.new_empty(q.shape[:2], dtype=torch.float32),
            torch.empty(1, dtype=torch.int64, device="cpu"))


@torch.library.custom_op("dcp::attention_backward", mutates_args=())
def _attention_backward(q: torch.Tensor, kv: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                        d_o: torch.Tensor, generation: torch.Tensor,
                        handle: int) -> tuple[torch.Tensor, torch.Tensor]:
    executor = _executor(handle)
    if int(generation.item()) != executor.generation:
        raise RuntimeError(
            "dcp.torch: AttentionExecutor.prepare() was called between this attention's forward "
            "and its backward, so its plan is gone; run the backward before preparing the next "
            "batch, or use one executor per batch in flight (pipelined micro-batches)")
    return executor.backward(q, kv, o, lse, d_o)


@_attention_backward.register_fake
def _(q, kv, o, lse, d_o, generation, handle):
    return q.new_empty(q.shape), kv.new_empty(kv.shape)


def _setup_context(ctx, inputs, output) -> None:
    q, kv, handle = inputs
    o, lse, generation = output
    ctx.save_for_backward(q, kv, o, lse, generation)
    ctx.handle = handle


def _backward(ctx, d_o, d_lse, d_generation):
    q, kv, o, lse, generation = ctx.saved_tensors
    dq, dkv = _attention_backward(q, kv, o, lse, d_o.contiguous(), generation, ctx.handle)
    return dq, dkv, None


_attention_forward.register_autograd(_backward, setup_context=_setup_context)


class DCPAttention:
    """o = attention of this rank's q against every key its queries may see, as the plan says.

    ``DCPAttention.apply(executor, q, kv)`` runs the operator ``dcp::attention_forward`` (its
    backward ``dcp::attention_backward``), registered with torch.library: autograd goes through
    it, and ``torch.compile`` traces it as one opaque operator (no graph break)."""

    @staticmethod
    def apply(executor: AttentionExecutor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return _attention_forward(q, kv, executor.handle)[0]


def dcp_attention(executor: AttentionExecutor, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor) -> torch.Tensor:
    """The (q, k, v) form: k and v [L, kv_heads, head_dim] each."""
    return DCPAttention.apply(executor, q, torch.stack([k, v], dim=1))
