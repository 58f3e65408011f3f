# SPDX-License-Identifier: Apache-2.0
"""dcp.torch.DCPDataLoader: packing, labels, data-parallel sharding, position ids, the plan
cache, background planning, planning errors; on a 1-rank gloo group in this process and on 2
spawned gloo ranks (plans checked across ranks, ranks that disagree or fail)."""
from __future__ import annotations

import re
import threading
import time

import pytest
import torch
import torch.distributed as dist

import dcp
import dcp.torch as dt

from ranks import run_ranks

SHAPE = dict(heads=4, kv_heads=2, head_dim=16, dtype="fp32")
OPTIONS = dict(block_size=16)


@pytest.fixture(scope="module", autouse=True)
def one_rank_group(tmp_path_factory):
    """A 1-rank gloo world in this process for the single-rank tests."""
    path = tmp_path_factory.mktemp("gloo") / "store"
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _samples(lengths, start=0):
    """Sample k: token ids start+1000*k, start+1000*k+1, ... (distinct across samples)."""
    return [torch.arange(n, dtype=torch.int64) + start + 1000 * k for k, n in enumerate(lengths)]


def _loader(dataset, mask_fn=lambda seqlens: "causal", **kwargs):
    kwargs.setdefault("token_budget", 12)
    kwargs.setdefault("plan_options", OPTIONS)
    return dt.DCPDataLoader(dataset, mask_fn, **{**SHAPE, **kwargs})


def _global(local: torch.Tensor, plan, rank: int = 0) -> torch.Tensor:
    """A 1-rank plan's local tensor back in the packed global order."""
    out = torch.full((sum(plan.seqlens),), -7, dtype=local.dtype)
    out[torch.from_numpy(plan.local_token_indices(rank))] = local
    return out


def _expected_labels(ids: torch.Tensor) -> torch.Tensor:
    return torch.cat([ids[1:], torch.tensor([-100])])


def test_packing_respects_the_budget_and_yields_the_last_partial_batch():
    lengths = [5, 7, 3, 9, 2, 4, 1]
    samples = _samples(lengths)
    batches = list(_loader(samples, token_budget=12))
    assert [d["seqlens"] for d, _ in batches] == [[5, 7], [3, 9], [2, 4, 1]]
    assert [d["batch_index"] for d, _ in batches] == [0, 1, 2]
    for d, plan in batches:
        assert sum(d["seqlens"]) <= 12 and plan.seqlens == d["seqlens"]
    # No sample lost: the undispatched tokens of every batch, in order, are the samples.
    packed = torch.cat([_global(d["input_ids"], p) for d, p in batches])
    assert torch.equal(packed, torch.cat(samples))


def test_drop_last_drops_only_the_batch_the_end_of_data_closed():
    batches = list(_loader(_samples([5, 7, 3, 9, 2]), token_budget=12, drop_last=True))
    assert [d["seqlens"] for d, _ in batches] == [[5, 7], [3, 9]]


def test_an_oversized_sample_gets_a_batch_of_its_own():
    samples = _samples([4, 30, 5, 6])
    batches = list(_loader(samples, token_budget=10))
    assert [d["seqlens"] for d, _ in batches] == [[4], [30], [5], [6]]
    packed = torch.cat([_global(d["input_ids"], p) for d, p in batches])
    assert torch.equal(packed, torch.cat(samples))


def test_split_cuts_an_oversized_sample_into_budget_pieces_keeping_its_labels():
    samples = _samples([4, 25, 5])
    batches = list(_loader(samples, token_budget=10, oversize="split"))
    assert [d["seqlens"] for d, _ in batches] == [[4], [10], [10], [5, 5]]
    ids = torch.cat([_global(d["input_ids"], p) for d, p in batches])
    labels = torch.cat([_global(d["labels"], p) for d, p in batches])
    assert torch.equal(ids, torch.cat(samples))
    # Labels are those of the whole sample: a piece's last label is the next piece's first id.
    assert torch.equal(labels, torch.cat([_expected_labels(s) for s in samples]))
    positions = torch.cat([_global(d["position_ids"], p) for d, p in batches])
    assert positions[4:29].tolist() == list(range(10)) * 2 + list(range(5))


def test_labels_shift_left_with_ignore_index_at_sample_ends_and_given_labels_are_kept():
    samples = _samples([3, 4]) + [{"input_ids": torch.tensor([7, 8, 9]),
                                   "labels": torch.tensor([1, 2, 3])},
                                  {"input_ids": torch.tensor([5, 6], dtype=torch.int32)}]
    (d, plan), = list(_loader(samples, token_budget=100))
    assert d["input_ids"].dtype == d["labels"].dtype == torch.int64
    labels = _global(d["labels"], plan)
    assert labels.tolist() == [1, 2, -100, 1001, 1002, 1003, -100, 1, 2, 3, 6, -100]


def test_data_parallel_groups_take_every_dp_size_th_sample():
    samples = _samples([2, 3, 4, 5, 6, 7, 8])
    seen = []
    for dp_rank in range(3):
        batches = list(_loader(samples, token_budget=100, dp_rank=dp_rank, dp_size=3))
        ids = torch.cat([_global(d["input_ids"], p) for d, p in batches])
        assert torch.equal(ids, torch.cat(samples[dp_rank::3]))
        seen.append(ids)
    assert sorted(torch.cat(seen).tolist()) == sorted(torch.cat(samples).tolist())


def test_position_ids_are_positions_in_the_sequence_in_local_order():
    lengths = [40, 17, 33]
    (d, plan), = list(_loader(_samples(lengths), token_budget=100))
    expected = torch.cat([torch.arange(n) for n in lengths])
    idx = torch.from_numpy(plan.local_token_indices(0))
    assert torch.equal(d["position_ids"], expected[idx])
    assert torch.equal(d["input_ids"], torch.cat(_samples(lengths))[idx])


def test_masks_per_sequence_and_mask_spec_objects_are_accepted():
    seen = []

    def mask_fn(seqlens):
        seen.append(list(seqlens))
        return [dcp.MaskSpec.parse("full")] + ["sliding-window:window=4"] * (len(seqlens) - 1)

    (d, plan), = list(_loader(_samples([6, 8, 5]), mask_fn, token_budget=100))
    assert seen == [[6, 8, 5]]
    ref = dcp.plan(dcp.Batch([6, 8, 5], ["full", "sliding-window:window=4",
                                         "sliding-window:window=4"], **SHAPE),
                   topology=(1, 1), **OPTIONS)
    assert plan.to_bytes() == ref.to_bytes()


def test_the_cache_returns_the_same_plan_for_the_same_signature():
    samples = _samples([5, 7] * 3 + [6, 6])
    loader = _loader(samples, token_budget=12)
    plans = [p for _, p in loader]
    assert len(plans) == 4
    assert plans[0] is plans[1] is plans[2] and plans[3] is not plans[0]
    again = [p for _, p in loader]  # a second epoch reuses the cached plans
    assert again[0] is plans[0] and again[3] is plans[3]
    uncached = [p for _, p in _loader(samples, token_budget=12, cache_size=0)]
    assert uncached[0] is not uncached[1] and uncached[0] == uncached[1]


def test_prefetch_on_and_off_give_identical_batches_and_plans():
    samples = _samples([9, 3, 30, 12, 1, 7, 7, 20, 4])

    def run(**kwargs):
        return [(d, p.to_bytes()) for d, p in
                _loader(samples, lambda s: "lambda:sink=2,window=5", token_budget=24,
                        cache_size=0, **kwargs)]

    sync, ahead = run(prefetch=0), run(prefetch=3, planning_threads=2)
    assert len(sync) == len(ahead) == 5
    for (d0, b0), (d1, b1) in zip(sync, ahead):
        assert b0 == b1 and d0["seqlens"] == d1["seqlens"]
        assert d0["batch_index"] == d1["batch_index"]
        for key in ("input_ids", "labels", "position_ids"):
            assert torch.equal(d0[key], d1[key])


def test_planning_runs_in_the_background_ahead_of_the_consumer(monkeypatch):
    # Order, not time: with prefetch, the plan of batch i is done before the consumer, which
    # works far longer than a plan takes, asks for batch i; without prefetch, only after.
    events, lock = [], threading.Lock()
    real_plan = dcp.plan

    def logged_plan(batch, *args, **kwargs):
        plan = real_plan(batch, *args, **kwargs)
        with lock:
            events.append(("planned", tuple(batch.seqlens), threading.current_thread()))
        return plan

    monkeypatch.setattr(dcp, "plan", logged_plan)
    samples = _samples([8, 9, 10, 11])  # one batch each: distinct signatures

    def run(prefetch):
        events.clear()
        loader = _loader(samples, token_budget=12, prefetch=prefetch)
        iterator = iter(loader)
        for _ in samples:
            with lock:
                events.append(("asked", None, None))
            local, plan = next(iterator)
            with lock:
                events.append(("got", tuple(plan.seqlens), None))
            time.sleep(0.25)  # the training step
        return list(events)

    ahead = run(2)
    assert all(t is not threading.main_thread() for kind, _, t in ahead if kind == "planned")
    asked = [i for i, e in enumerate(ahead) if e[0] == "asked"]
    planned = [i for i, e in enumerate(ahead) if e[0] == "planned"]
    assert all(p < a for p, a in zip(planned[1:], asked[1:])), ahead  # ready before asked for
    sync = run(0)
    assert all(t is threading.main_thread() for kind, _, t in sync if kind == "planned")
    asked = [i for i, e in enumerate(sync) if e[0] == "asked"]
    planned = [i for i, e in enumerate(sync) if e[0] == "planned"]
    assert all(p > a for p, a in zip(planned, asked)), sync  # planned only when asked for


def test_a_batch_that_cannot_be_planned_raises_naming_the_batch():
    def mask_fn(seqlens):
        return "documents:count=999" if seqlens == [6, 4] else "causal"

    loader = _loader(_samples([5, 7, 6, 4]), mask_fn, token_budget=12)
    got = []
    with pytest.raises(ValueError, match=r"batch 1 \(seqlens \[6, 4\]\).*count=999"):
        for d, _ in loader:
            got.append(d["batch_index"])
    assert got == [0]


def test_static_falls_back_to_zigzag_with_a_warning():
    options = dict(OPTIONS, memory_budget_bytes=1)  # no dcp plan fits in 1 byte
    loader = _loader(_samples([5, 7, 6]), token_budget=12, plan_options=options,
                     on_planning_error="static")
    with pytest.warns(UserWarning) as record:
        batches = list(loader)
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    assert re.search(r"batch 0 \(seqlens \[5, 7\]\).*'zigzag'.*memory budget", messages[0])
    assert re.search(r"batch 1 \(seqlens \[6\]\).*'zigzag'", messages[1])
    assert [d["seqlens"] for d, _ in batches] == [[5, 7], [6]]
    ref = dcp.plan_baseline("zigzag", dcp.Batch([5, 7], "causal", **SHAPE), (1, 1))
    assert batches[0][1].to_bytes() == ref.to_bytes()
    with pytest.raises(ValueError, match="memory budget"):
        list(_loader(_samples([5]), plan_options=options))


def test_static_still_raises_for_a_batch_no_plan_can_run():
    loader = _loader(_samples([5]), lambda s: "documents:count=999",
                     on_planning_error="static")
    with pytest.raises(ValueError, match=r"batch 0 .*count=999"):
        list(loader)


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="devices"):
        _loader([], plan_options=dict(topology=(1, 2)))
    with pytest.raises(ValueError, match="oversize"):
        _loader([], oversize="drop")
    with pytest.raises(ValueError, match="dp_rank"):
        _loader([], dp_rank=2, dp_size=2)
    with pytest.raises(ValueError, match="2-D|1-D"):
        list(_loader([torch.zeros(2, 2, dtype=torch.int64)]))


# --- two ranks -------------------------------------------------------------------------------


def _two_ranks(rank, world):
    samples = _samples([40, 17, 33, 50, 8, 64])
    causal = lambda s: "causal"  # noqa: E731
    # Every rank plans for itself and gets the same plan; together the ranks hold every token.
    loader = dt.DCPDataLoader(samples, causal, token_budget=64, plan_options=OPTIONS, **SHAPE)
    assert loader.plan_options["topology"] == (1, 2)
    seen = []
    for d, plan in loader:
        h = torch.tensor([plan.hash() & ((1 << 62) - 1)], dtype=torch.int64)
        hs = [torch.zeros_like(h) for _ in range(world)]
        dist.all_gather(hs, h)
        assert hs[0] == hs[1]
        assert d["input_ids"].numel() == plan.local_tokens(rank)
        seen.append(dt.undispatch(d["input_ids"], plan))
        positions = dt.undispatch(d["position_ids"], plan)
        assert torch.equal(positions, torch.cat([torch.arange(n) for n in d["seqlens"]]))
    assert torch.equal(torch.cat(seen), torch.cat(samples))

    # Ranks whose masks differ plan differently: ValueError on every rank.
    other = (lambda s: "causal") if rank == 0 else (lambda s: "full")
    with pytest.raises(ValueError, match="differently"):
        list(dt.DCPDataLoader(samples, other, token_budget=64, plan_options=OPTIONS, **SHAPE))

    # Planning fails on rank 1 only: rank 1 raises its error, rank 0 hears of it.
    bad = (lambda s: "causal") if rank == 0 else (lambda s: "documents:count=999")
    loader = dt.DCPDataLoader(samples, bad, token_budget=64, plan_options=OPTIONS, **SHAPE)
    if rank == 1:
        with pytest.raises(ValueError, match="batch 0.*count=999"):
            list(loader)
    else:
        with pytest.raises(RuntimeError, match="another rank.*batch 0"):
            list(loader)
    # The dataset raises on rank 1 only, in the third batch: both ranks get the two batches
    # before it, then raise (rank 1 its own error, rank 0 hearing of it), with prefetch on and off.
    def failing(rank):
        yield from samples[:4]
        if rank == 1:
            raise OSError("disk gone")
        yield from samples[4:]

    for prefetch in (0, 2):
        loader = dt.DCPDataLoader(failing(rank), causal, token_budget=64, plan_options=OPTIONS,
                                  prefetch=prefetch, **SHAPE)
        got = []
        expected = (RuntimeError, "reading the dataset failed after 2 batches: disk gone") \
            if rank == 1 else (RuntimeError, "reading the dataset failed on another rank")
        with pytest.raises(expected[0], match=expected[1]):
            for d, _ in loader:
                got.append(d["batch_index"])
        assert got == [0, 1]

    # Rank 1's data ends a batch early: both raise instead of waiting for each other.
    short = samples if rank == 0 else samples[:-1]
    with pytest.raises(RuntimeError, match="data ended at different batches"):
        list(dt.DCPDataLoader(short, causal, token_budget=64, plan_options=OPTIONS, **SHAPE))
    dist.barrier()  # the group still works after the failures


def test_two_ranks_check_plans_agree_and_fail_together():
    run_ranks(_two_ranks, 2)


def _one_nccl_rank(rank, world):
    # The loader's plan checks are collectives: on an NCCL group their tensors must be on the GPU.
    samples = _samples([40, 17, 33])
    batches = list(dt.DCPDataLoader(samples, lambda s: "causal", token_budget=64,
                                    plan_options=OPTIONS, **SHAPE))
    assert torch.equal(torch.cat([d["input_ids"] for d, _ in batches]), torch.cat(samples))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_an_nccl_group_plans_and_checks_its_batches():
    run_ranks(_one_nccl_rank, 1, backend="nccl")


_CUDA = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("backend, tensor, device", [
    ("gloo", None, "cpu"), ("gloo", "cpu", "cpu"), ("cpu:gloo,cuda:nccl", None, "cpu"),
    ("cpu:gloo,cuda:nccl", "cpu", "cpu"), ("nccl", None, _CUDA), ("nccl", "cpu", _CUDA),
    ("cuda:nccl", "cpu", _CUDA)])
def test_collectives_run_where_the_backend_serves_tensors(monkeypatch, backend, tensor, device):
    from dcp.torch._comm import collective_device
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    given = torch.device(tensor) if tensor else None
    assert collective_device(None, given).type == device
