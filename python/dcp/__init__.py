# SPDX-License-Identifier: Apache-2.0
"""dcp: dynamic context parallelism for long-context attention.

A thin package over the extension ``dcp._core`` (the C++ library's planner). A batch of packed
variable-length sequences, each with its own mask, is planned onto a topology of devices; the plan
says which tokens each rank owns (its token map) and holds every device's forward and backward
programs::

    import dcp
    batch = dcp.Batch([131072, 4096, 17], "lambda:sink=64,window=4096")
    plan = dcp.plan(batch, topology="4x8")
    idx = plan.local_token_indices(rank)   # this rank's tokens, in its local order
    pos = plan.position_ids(rank)          # their positions, for rotary embeddings
    payload = plan.to_bytes()              # ship to the other ranks; Plan.from_bytes() there

Errors: bad input (a spec, a shape, an option, damaged bytes) raises ValueError, a fault at run
time RuntimeError, both carrying dcp's message. Requires Python >= 3.10; the torch layer needs
torch >= 2.4 (torch.library.custom_op).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Union

from . import _core
from ._core import AttentionShape, Batch, MaskSpec, Plan

__all__ = [
    "AttentionShape",
    "Batch",
    "MaskSpec",
    "Plan",
    "batch_from_idx",
    "plan",
    "plan_baseline",
    "read_lengths_file",
    "read_megatron_index",
    "simulate",
    "synthetic_batch_lengths",
    "synthetic_lengths",
]

#: A topology: "NODESxDEVICES" ("4x8") or (nodes, devices_per_node).
Topology = Union[str, tuple[int, int]]
#: One mask for every sequence (a spec string or a MaskSpec), or one per sequence.
Masks = Union[str, MaskSpec, Sequence[Union[str, MaskSpec]]]


def _integer(what: str, value: Any) -> int:
    """``value`` as an int: any integer type (numpy's too), never a float or bool to truncate."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{what} must be an integer, not {value!r}")


def _topology(topology: Topology) -> str:
    if isinstance(topology, str):
        return topology
    if isinstance(topology, (tuple, list)) and len(topology) == 2:
        nodes, devices_per_node = (_integer(f"topology {topology!r}: a count", x) for x in topology)
        return f"{nodes}x{devices_per_node}"
    raise TypeError(f"topology must be 'NxM' or (nodes, devices_per_node), not {topology!r}")


def _tuned(what: str, value: int | None) -> int:
    """An option that None tunes, as the planner takes it (0 there means tune)."""
    if value is None:
        return 0
    value = _integer(what, value)
    if value < 1:
        raise ValueError(f"{what}={value} must be >= 1, or None to tune it")
    return value


def _tolerance_pair(what: str, pair: Any) -> tuple[float, float]:
    if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
        raise TypeError(f"{what} must be a (per device, per node) pair of numbers, not {pair!r}")
    return float(pair[0]), float(pair[1])


def plan(
    batch: Batch,
    topology: Topology = "1x1",
    *,
    block_size: int | None = None,
    head_groups: int | None = None,
    tolerances: tuple[float, float] | None = None,
    eps_memory: float = 0.2,
    divisions: int = 0,
    division_choice: str = "cost_model",
    cluster: str = "p4de",
    candidate_block_sizes: Sequence[int] | None = None,
    candidate_tolerances: Sequence[tuple[float, float]] | None = None,
    other_strategies: bool = True,
    max_candidates: int = 12,
    threads: int = 1,
    memory_budget_bytes: int = 0,
    max_planning_bytes: int = 0,
    seed: int = 0,
    partitioner: str = "builtin",
) -> Plan:
    """Plans ``batch`` on ``topology`` with dcp's planner (blocks, placement, schedule, programs).

    What is left open is tuned: every candidate (dcp's placement at each block size and pair of
    tolerances, and the other strategies ring, zigzag, TE, LoongTrain, FCP and MagiAttention) is planned and simulated on
    ``cluster``, and the fastest kept (``Plan.origin`` names it, ``Plan.candidates`` lists them
    all). The result depends only on the arguments, never on ``threads`` or the machine's load.

    Args:
        batch: the sequences, their masks and the attention shape.
        topology: ``"4x8"`` or ``(4, 8)``: nodes x devices per node.
        block_size: tokens per data block; None tunes it among ``candidate_block_sizes``.
        head_groups: compute blocks per tile; divides the batch's KV heads. None: 1, and the
            best of dcp's candidates is also tried with 2 when that divides the KV heads.
            With tolerances tuned, the fastest two of dcp's own are then planned once more
            with tolerances (0.005, 0.005).
        tolerances: (per device, per node) compute tolerances; None tunes them among
            ``candidate_tolerances``.
        eps_memory: data-bytes tolerance per device.
        divisions: divisions per pass; 0 lets ``division_choice`` pick for each candidate.
        division_choice: ``"cost_model"`` (fast) or ``"simulate"`` (every count simulated).
        cluster: the cluster the plan is tuned for: a preset (``"p4de"``, ``"h100"``) or the JSON
            of docs/simulator.md.
        candidate_block_sizes, candidate_tolerances: the tuning's lists (None: the planner's
            defaults, 1024/2048/4096 and (0.1, 0.4)/(0.05, 0.05)/(0.02, 0.02)/(0.02, 0.1)).
        other_strategies: whether the other strategies' plans are candidates.
        max_candidates: at most this many of dcp's own candidates (the bound on tuning work).
        threads: threads planning candidates at once; the result does not depend on it.
        memory_budget_bytes: when > 0, the most buffer bytes a device may need; candidates above
            it are skipped.
        max_planning_bytes: the memory planning itself may take (0: 80% of the machine's, or of ulimit -v); a
            batch whose tiles would need more is refused (ValueError) instead of being killed.
        seed: placement seed; the same inputs and seed give the same plan.
        partitioner: ``"builtin"`` or ``"zoltan"`` (when built with Zoltan).

    The GIL is released while planning, so other Python threads run meanwhile.
    Raises ValueError for bad options or a batch the options cannot plan.
    """
    return _core.plan(
        batch,
        _topology(topology),
        _tuned("block_size", block_size),
        _tuned("head_groups", head_groups),
        None if tolerances is None else _tolerance_pair("tolerances", tolerances),
        eps_memory,
        divisions,
        division_choice,
        cluster,
        None if candidate_block_sizes is None else list(candidate_block_sizes),
        None if candidate_tolerances is None else
        [_tolerance_pair("each of candidate_tolerances", t) for t in candidate_tolerances],
        other_strategies,
        max_candidates,
        threads,
        memory_budget_bytes,
        max_planning_bytes,
        seed,
        partitioner,
    )


def plan_baseline(strategy: str, batch: Batch, topology: Topology, *, inner_ring: int = 1) -> Plan:
    """The plan of another strategy in dcp's IR: ``"ring"``, ``"zigzag"``, ``"ulysses"``,
    ``"te"``, ``"loongtrain"`` (``inner_ring``: LoongTrain's context ranks per inner ring),
    ``"fcp"`` or ``"magi"`` (their default options, docs/baselines.md).

    Raises ValueError for an unknown strategy or one that cannot run the batch on the topology,
    and for an ``inner_ring`` other than 1 given to a strategy without inner rings.
    """
    inner_ring = _integer("inner_ring", inner_ring)
    if inner_ring != 1 and strategy != "loongtrain":
        raise ValueError(f"inner_ring={inner_ring} is LoongTrain's option; {strategy!r} has none")
    return _core.plan_baseline(strategy, batch, _topology(topology), inner_ring)


def simulate(plan: Plan, cluster: str = "p4de", *, trace: bool = False) -> dict[str, Any]:
    """Replays a whole plan on a cluster model (a preset or JSON, as for :func:`plan`).

    Returns ``{"cluster", "forward", "backward", "total_s", "ideal_s", "efficiency",
    "compute_imbalance"}``, where each
    pass is a dict of ``makespan_s``, ``busy_s``, ``exposed_comm_s``, ``idle_s`` (summed over
    devices), ``bytes_sent_intra_node``, ``bytes_sent_inter_node``, ``attention_flops`` and
    ``flows``; with ``trace``, ``trace_json`` holds a Chrome/Perfetto trace. Raises ValueError when
    the plan's nodes have more devices than the cluster's (fewer is a plan on part of each node),
    or for a plan's part.
    """
    return _core.simulate(plan, cluster, trace)


def read_megatron_index(path: str) -> list[int]:
    """The sequence lengths of a Megatron-LM indexed dataset, read from its ``.idx`` file."""
    return _core.read_megatron_index(path)


def read_lengths_file(path: str) -> list[int]:
    """Lengths from a text file, one per line; blank lines and ``#`` comments are ignored."""
    return _core.read_lengths_file(path)


def batch_from_idx(
    path: str,
    masks: Masks = "causal",
    *,
    heads: int = 8,
    kv_heads: int = 2,
    head_dim: int = 128,
    dtype: str = "bf16",
) -> Batch:
    """A batch of every non-empty sequence of a Megatron-LM ``.idx`` file (as ``dcp plan --idx``)."""
    return Batch(read_megatron_index(path), masks, heads, kv_heads, head_dim, dtype)


def synthetic_lengths(
    count: int, distribution: str = "ldc", *, scale: float = 1.0, seed: int = 0
) -> list[int]:
    """``count`` lengths from a seeded distribution of the DCP paper (``"ldc"``,
    ``"longalign"``), each multiplied by ``scale``; the same seed gives the same lengths."""
    return _core.synthetic_lengths(count, distribution, scale, seed)


def synthetic_batch_lengths(
    tokens: int, distribution: str = "ldc", *, scale: float = 1.0, seed: int = 0
) -> list[int]:
    """The lengths of one batch of about ``tokens`` tokens packed from the distribution."""
    return _core.synthetic_batch_lengths(tokens, distribution, scale, seed)
