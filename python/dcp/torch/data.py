# SPDX-License-Identifier: Apache-2.0
"""A data loader that packs samples into token-budgeted batches, plans each batch with dcp in
background threads, and hands every rank of a context-parallel group its own tokens::

    loader = dcp.torch.DCPDataLoader(dataset, lambda seqlens: "causal", group=pg,
                                     token_budget=65536, plan_options=dict(topology=(1, 8)))
    executor = dcp.torch.AttentionExecutor(group=pg)
    for local_data, plan in loader:
        executor.prepare(plan)
        logits = model(local_data["input_ids"], position_ids=local_data["position_ids"])

Rules (each one documented on :class:`DCPDataLoader`):

- Data parallelism: sample ``i`` of ``dataset`` (counting from 0) belongs to data-parallel group
  ``i % dp_size``; every rank of the context-parallel ``group`` sees the same samples.
- Packing: samples are packed in order; a batch closes when the next sample would take it past
  ``token_budget`` tokens. Longer samples follow ``oversize``. What is left at the end of the
  dataset is yielded as a last, smaller batch unless ``drop_last``.
- Labels: a sample without ``"labels"`` is labelled with its own ``input_ids`` shifted left by one;
  the last token of each sample gets -100 (the ignore index of ``torch.nn.CrossEntropyLoss``).
- Planning: ``dcp.plan`` is a pure function of the batch (lengths, masks, attention shape) and the
  plan options, seed included: every rank plans the same batch itself and gets a byte-identical
  plan, so nothing is broadcast. The loader checks it (one all-reduce of the plan hash per batch)
  and raises ValueError on every rank when the ranks disagree.

Thread safety: one loader is iterated by one thread at a time. The planning threads run only
``dcp.Batch``/``dcp.plan`` (which release the GIL); the dataset, ``mask_fn``, the plan cache and
every collective stay on the iterating thread.
"""
from __future__ import annotations

import collections
import concurrent.futures
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Union

import torch
import torch.distributed as dist

import dcp

from ._comm import collective_device

__all__ = ["DCPDataLoader"]

#: The ignore index given to the label of each sample's last token.
IGNORE_INDEX = -100

#: What ``mask_fn`` returns: one spec for every sequence, or one per sequence.
MaskSpecs = Union[str, dcp.MaskSpec, Sequence[Union[str, dcp.MaskSpec]]]
#: A sample: a 1-D integer tensor of token ids, or a dict with "input_ids" (and "labels").
Sample = Union[torch.Tensor, dict]

# A rank's state at each batch, all-reduced so that every rank raises when any fails (_agree).
_STATES = ("planned", "planning failed", "data failed", "ended")
_MASK_62 = (1 << 62) - 1
_SEQLENS_SHOWN = 16


def _show_seqlens(seqlens: Sequence[int]) -> str:
    if len(seqlens) <= _SEQLENS_SHOWN:
        return str(list(seqlens))
    head = ", ".join(str(n) for n in seqlens[:_SEQLENS_SHOWN])
    return f"[{head}, ...] ({len(seqlens)} sequences, {sum(seqlens)} tokens)"


def _freeze(value: Any) -> Any:
    """A hashable copy of an option value (lists and dicts become tuples)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _devices(topology: Any) -> int:
    if isinstance(topology, str):
        parts = topology.lower().split("x")
        if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
            return int(parts[0]) * int(parts[1])
        raise ValueError(f"DCPDataLoader: topology {topology!r} is not 'NODESxDEVICES'")
    if isinstance(topology, (tuple, list)) and len(topology) == 2:
        return int(topology[0]) * int(topology[1])
    raise ValueError(f"DCPDataLoader: topology {topology!r} is not 'NxM' or (nodes, devices)")


@dataclass
class _Packed:
    """One packed batch: the global token order is the sequences one after another."""

    index: int
    seqlens: list[int]
    input_ids: torch.Tensor  # int64 [total tokens]
    labels: torch.Tensor  # int64 [total tokens]


@dataclass
class _Planned:
    plan: "dcp.Plan"
    fallback: str | None = None  # the static strategy used, when dcp.plan failed
    reason: str | None = None  # dcp.plan's error, when it fell back


class _PlanningFailed(Exception):
    """Carries the exception of a batch whose planning (or mask_fn) failed."""


class DCPDataLoader:
    """Packs ``dataset`` into batches of at most ``token_budget`` tokens, plans them with dcp
    ahead of time and yields ``(local_data, plan)`` for this rank of ``group``.

    Args:
        dataset: any iterable of samples. A sample is a 1-D integer tensor of token ids, or a dict
            with ``"input_ids"`` (1-D) and optionally ``"labels"`` (1-D, same length). Iterated
            once per ``iter(loader)`` (an epoch), on the iterating thread.
        mask_fn: ``mask_fn(seqlens) -> spec | [spec per sequence]`` with spec a mask spec string
            (docs/mask_spec.md) or a ``dcp.MaskSpec``; called once per batch on the iterating
            thread. It must be deterministic, and the same on every rank of ``group``.
        group: the context-parallel process group (default: the whole world). Every rank of it
            iterates the loader in step: each batch costs one all-reduce on it.
        token_budget: the most tokens of a batch (but see ``oversize``).
        plan_options: keyword arguments of :func:`dcp.plan` (``topology``, ``block_size``, ...).
            ``topology`` defaults to ``(1, group size)`` and must have as many devices as the
            group has ranks; ``seed`` is the loader's ``seed`` argument instead.
        heads, kv_heads, head_dim, dtype: the attention shape of the batches (``dcp.Batch``).
        prefetch: batches planned ahead of the one being consumed (in background threads); 0
            plans each batch synchronously when it is reached.
        planning_threads: worker threads planning at once (a ThreadPoolExecutor).
        dp_rank, dp_size: this rank's data-parallel group and the number of them; sample ``i``
            goes to data-parallel group ``i % dp_size``.
        oversize: for a sample longer than ``token_budget``: ``"own_batch"`` (default) gives it
            a batch of its own, which then exceeds the budget; ``"split"`` cuts it into pieces of
            ``token_budget`` tokens (the last piece the remainder), each packed as a sequence of
            its own: a piece attends only to itself and its positions restart at 0, while its
            labels stay those of the whole sample (a piece's last label is the next piece's
            first token; only the sample's last token gets -100).
        on_planning_error: ``"raise"`` (default): a batch that cannot be planned raises, on every
            rank, the ValueError of dcp (or a RuntimeError) naming the batch index and its
            lengths. ``"static"``: when ``dcp.plan`` fails, the batch gets the static plan
            ``dcp.plan_baseline("zigzag")`` (``"ring"`` if zigzag cannot run it) and a warning
            names the batch and the error; a batch that is itself invalid (a mask that does not
            fit its sequence, an error of ``mask_fn``) still raises.
        seed: the planner's placement seed (``dcp.plan(seed=...)``); the same seed on every rank.
        drop_last: drop the last batch of an epoch (the one the end of the data closed) instead
            of yielding it.
        cache_size: plans kept for reuse (least recently used evicted): a batch with the same
            signature (lengths, masks, shape, options) as a cached one gets the same Plan object.
            0 disables the cache.

    Each item is ``(local_data, plan)``, with ``local_data``:

    - ``"input_ids"``, ``"labels"``: int64 [local tokens], this rank's tokens in the plan's
      token-map order (``plan.local_token_indices(rank)``);
    - ``"position_ids"``: int64 [local tokens], each token's position in its sequence
      (``plan.position_ids(rank)``), for rotary embeddings;
    - ``"seqlens"``: list[int], the lengths of the batch's sequences (global, packed order);
    - ``"batch_index"``: int, the batch's index in this epoch (0, 1, ...).

    ``last_plan_wait_s`` is how long the iterating thread waited for the plan of the batch last
    yielded (about 0 when it was planned in the background in time).
    """

    def __init__(
        self,
        dataset: Iterable[Sample],
        mask_fn: Callable[[list[int]], MaskSpecs],
        *,
        group: dist.ProcessGroup | None = None,
        token_budget: int,
        plan_options: dict[str, Any] | None = None,
        heads: int = 8,
        kv_heads: int = 2,
        head_dim: int = 128,
        dtype: str = "bf16",
        prefetch: int = 2,
        planning_threads: int = 1,
        dp_rank: int = 0,
        dp_size: int = 1,
        oversize: str = "own_batch",
        on_planning_error: str = "raise",
        seed: int = 0,
        drop_last: bool = False,
        cache_size: int = 64,
    ) -> None:
        if not dist.is_initialized():
            raise RuntimeError("dcp.torch.DCPDataLoader needs torch.distributed initialised")
        if int(token_budget) < 1:
            raise ValueError(f"DCPDataLoader: token_budget={token_budget} must be >= 1")
        if prefetch < 0:
            raise ValueError(f"DCPDataLoader: prefetch={prefetch} must be >= 0")
        if planning_threads < 1:
            raise ValueError(f"DCPDataLoader: planning_threads={planning_threads} must be >= 1")
        if dp_size < 1 or not 0 <= dp_rank < dp_size:
            raise ValueError(f"DCPDataLoader: dp_rank={dp_rank} is not in [0, dp_size={dp_size})")
        if oversize not in ("own_batch", "split"):
            raise ValueError(f"DCPDataLoader: oversize={oversize!r} is not 'own_batch' or 'split'")
        if on_planning_error not in ("raise", "static"):
            raise ValueError(f"DCPDataLoader: on_planning_error={on_planning_error!r} is not "
                             "'raise' or 'static'")
        if cache_size < 0:
            raise ValueError(f"DCPDataLoader: cache_size={cache_size} must be >= 0")
        options = dict(plan_options or {})
        if "seed" in options:
            raise ValueError("DCPDataLoader: pass the planner's seed as seed=, not in plan_options")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        options.setdefault("topology", (1, self.size))
        if _devices(options["topology"]) != self.size:
            raise ValueError(f"DCPDataLoader: topology {options['topology']!r} has "
                             f"{_devices(options['topology'])} devices but the process group "
                             f"has {self.size} ranks")
        options["seed"] = seed
        self.dataset = dataset
        self.mask_fn = mask_fn
        self.token_budget = int(token_budget)
        self.plan_options = options
        self.shape = (heads, kv_heads, head_dim, dtype)
        self.prefetch = prefetch
        self.planning_threads = planning_threads
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.oversize = oversize
        self.on_planning_error = on_planning_error
        self.drop_last = drop_last
        self.cache_size = cache_size
        self.last_plan_wait_s = 0.0
        self._options_key = (self.shape, _freeze(options))
        # signature -> Future of _Planned; touched only by the iterating thread.
        self._cache: collections.OrderedDict[tuple, concurrent.futures.Future] = (
            collections.OrderedDict())

    # --- samples and packing -------------------------------------------------------------

    @staticmethod
    def _sample(sample: Sample, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids and labels (int64 [length]) of one sample."""
        labels = None
        if isinstance(sample, dict):
            if "input_ids" not in sample:
                raise ValueError(f"DCPDataLoader: sample {index} is a dict without 'input_ids'")
            ids, labels = sample["input_ids"], sample.get("labels")
        else:
            ids = sample
        ids = torch.as_tensor(ids)
        if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex():
            raise ValueError(f"DCPDataLoader: sample {index}: input_ids must be a 1-D integer "
                             f"tensor, not {ids.dtype} of shape {tuple(ids.shape)}")
        ids = ids.to(torch.int64)
        if labels is None:
            labels = torch.full_like(ids, IGNORE_INDEX)
            labels[:-1] = ids[1:]
        else:
            labels = torch.as_tensor(labels).to(torch.int64)
            if labels.shape != ids.shape:
                raise ValueError(f"DCPDataLoader: sample {index}: labels of shape "
                                 f"{tuple(labels.shape)}, input_ids of {tuple(ids.shape)}")
        return ids, labels

    def _sequences(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This data-parallel group's sequences (oversized samples cut when splitting)."""
        for i, sample in enumerate(self.dataset):
            if i % self.dp_size != self.dp_rank:
                continue
            ids, labels = self._sample(sample, i)
            if ids.numel() == 0:
                warnings.warn(f"DCPDataLoader: sample {i} is empty; skipped", stacklevel=3)
                continue
            if self.oversize == "split" and ids.numel() > self.token_budget:
                for begin in range(0, ids.numel(), self.token_budget):
                    end = begin + self.token_budget
                    yield ids[begin:end], labels[begin:end]
            else:
                yield ids, labels

    def _batches(self) -> Iterator[_Packed]:
        """Packed batches in order: a batch closes when the next sequence would not fit."""
        index = 0
        ids: list[torch.Tensor] = []
        labels: list[torch.Tensor] = []
        tokens = 0

        def close() -> _Packed:
            return _Packed(index, [t.numel() for t in ids], torch.cat(ids), torch.cat(labels))

        for seq_ids, seq_labels in self._sequences():
            n = seq_ids.numel()
            if ids and tokens + n > self.token_budget:
                yield close()
                index += 1
                ids, labels, tokens = [], [], 0
            ids.append(seq_ids)
            labels.append(seq_labels)
            tokens += n
            if tokens >= self.token_budget:  # full, or an oversized sample on its own
                yield close()
                index += 1
                ids, labels, tokens = [], [], 0
        if ids and not self.drop_last:
            yield close()

    # --- planning ------------------------------------------------------------------------

    def _masks(self, seqlens: list[int]) -> tuple["dcp.MaskSpec", ...]:
        specs = self.mask_fn(list(seqlens))
        if isinstance(specs, (str, dcp.MaskSpec)):
            specs = [specs] * len(seqlens)
        specs = list(specs)
        if len(specs) != len(seqlens):
            raise ValueError(f"mask_fn returned {len(specs)} masks for {len(seqlens)} sequences")
        return tuple(s if isinstance(s, dcp.MaskSpec) else dcp.MaskSpec.parse(s) for s in specs)

    def _plan(self, seqlens: list[int], masks: tuple) -> _Planned:
        """Runs on a planning thread: dcp.Batch and dcp.plan, or the static fallback."""
        batch = dcp.Batch(seqlens, list(masks), *self.shape)
        try:
            return _Planned(dcp.plan(batch, **self.plan_options))
        except (ValueError, RuntimeError) as error:
            if self.on_planning_error != "static":
                raise
            topology = self.plan_options["topology"]
            try:
                return _Planned(dcp.plan_baseline("zigzag", batch, topology), "zigzag",
                                str(error))
            except ValueError:
                return _Planned(dcp.plan_baseline("ring", batch, topology), "ring", str(error))

    def _submit(self, packed: _Packed, pool: concurrent.futures.Executor | None
                ) -> concurrent.futures.Future:
        """The future plan of ``packed``: from the cache, a planning thread, or planned now."""
        try:
            masks = self._masks(packed.seqlens)
        except Exception as error:  # noqa: BLE001 - reported collectively when consumed
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_exception(error)
            return future
        key = (tuple(packed.seqlens), masks, self._options_key)
        if self.cache_size and key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        if pool is None:
            future = concurrent.futures.Future()
            try:
                future.set_result(self._plan(packed.seqlens, masks))
            except Exception as error:  # noqa: BLE001 - reported collectively when consumed
                future.set_exception(error)
        else:
            future = pool.submit(self._plan, packed.seqlens, masks)
        if self.cache_size:
            self._cache[key] = future
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return future

    def _uncache(self, future: concurrent.futures.Future) -> None:
        for key in [k for k, f in self._cache.items() if f is future]:
            del self._cache[key]

    def _agree(self, state: str, digest: int = 0) -> tuple[set[str], bool]:
        """Collective: every rank tells its state (one of _STATES) and plan hash; returns the
        states some rank is in and whether all hashes are equal."""
        flags = [int(state == name) for name in _STATES]
        check = torch.tensor(flags + [digest, -digest], dtype=torch.int64,
                             device=collective_device(self.group))
        dist.all_reduce(check, op=dist.ReduceOp.MAX, group=self.group)
        states = {name for name, flag in zip(_STATES, check.tolist()) if flag}
        return states, int(check[-2]) == -int(check[-1])

    @staticmethod
    def _raise_for_others(where: str, states: set[str]) -> None:
        """Raises on a rank whose own state was fine when another rank's was not."""
        if "data failed" in states:
            raise RuntimeError(f"DCPDataLoader: reading the dataset failed on another rank of the "
                               f"group, {where}")
        if "ended" in states and len(states) > 1:
            raise RuntimeError(f"DCPDataLoader: the ranks' data ended at different batches, "
                               f"{where}: the dataset must yield the same samples on every rank "
                               "of the group")
        if "planning failed" in states:
            raise RuntimeError(f"DCPDataLoader: planning failed on another rank of the group, "
                               f"{where}")

    def _check(self, packed: _Packed, future: concurrent.futures.Future, waited: float
               ) -> _Planned:
        """Waits for the plan of ``packed`` and checks, on every rank of the group, that all of
        them planned it and got the same plan. Collective. ``waited``: seconds already spent
        planning it on this thread (prefetch 0)."""
        error: BaseException | None = None
        planned: _Planned | None = None
        start = time.perf_counter()
        try:
            planned = future.result()
        except Exception as e:  # noqa: BLE001 - every rank must reach the all-reduce
            error = e
            self._uncache(future)
        self.last_plan_wait_s = waited + time.perf_counter() - start
        digest = 0 if planned is None else planned.plan.hash() & _MASK_62
        states, same = self._agree("planning failed" if planned is None else "planned", digest)
        where = f"batch {packed.index} (seqlens {_show_seqlens(packed.seqlens)})"
        if error is not None:
            message = f"DCPDataLoader: planning {where} failed: {error}"
            if isinstance(error, ValueError):
                raise ValueError(message) from error
            raise RuntimeError(message) from error
        self._raise_for_others(f"at {where}", states)
        if not same:
            raise ValueError(f"DCPDataLoader: the ranks of the group planned {where} differently "
                             "(their plan hashes differ); dataset, mask_fn and options must be "
                             "the same on every rank")
        if planned.plan.devices != self.size:
            raise ValueError(f"DCPDataLoader: the plan of {where} is for {planned.plan.devices} "
                             f"devices but the process group has {self.size} ranks")
        return planned

    def _check_end(self, batches: int, data_error: BaseException | None) -> None:
        """Collective, after this rank's last batch: every rank ended there, none failed."""
        states, _ = self._agree("ended" if data_error is None else "data failed")
        where = f"after {batches} batches"
        if data_error is not None:
            kind = ValueError if isinstance(data_error, ValueError) else RuntimeError
            raise kind(f"DCPDataLoader: reading the dataset failed {where}: "
                       f"{data_error}") from data_error
        self._raise_for_others(where, states)

    def _local(self, packed: _Packed, plan: "dcp.Plan") -> dict[str, Any]:
        indices = torch.from_numpy(plan.local_token_indices(self.rank))
        return {
            "input_ids": packed.input_ids.index_select(0, indices),
            "labels": packed.labels.index_select(0, indices),
            "position_ids": torch.from_numpy(plan.position_ids(self.rank)),
            "seqlens": list(packed.seqlens),
            "batch_index": packed.index,
        }

    def __iter__(self) -> Iterator[tuple[dict[str, Any], "dcp.Plan"]]:
        pool = (concurrent.futures.ThreadPoolExecutor(self.planning_threads,
                                                      thread_name_prefix="dcp-planning")
                if self.prefetch > 0 else None)
        batches = self._batches()
        pending: collections.deque[tuple[_Packed, concurrent.futures.Future]] = (
            collections.deque())

        data_error: BaseException | None = None  # the dataset (or packing) raised
        yielded = 0

        def fill(ahead: int) -> None:
            nonlocal data_error
            while len(pending) < ahead and data_error is None:
                try:
                    packed = next(batches, None)
                except Exception as e:  # noqa: BLE001 - raised on every rank by _check_end
                    data_error = e
                    return
                if packed is None:
                    return
                pending.append((packed, self._submit(packed, pool)))

        try:
            while True:
                start = time.perf_counter()
                if not pending:
                    fill(1)  # planned right here when prefetch == 0
                if not pending:
                    self._check_end(yielded, data_error)
                    break
                packed, future = pending.popleft()
                waited = time.perf_counter() - start  # planning here, when prefetch == 0
                fill(self.prefetch)  # the batches after this one plan while it is consumed
                planned = self._check(packed, future, waited)
                if planned.fallback is not None:
                    warnings.warn(f"DCPDataLoader: batch {packed.index} (seqlens "
                                  f"{_show_seqlens(packed.seqlens)}) fell back to the static "
                                  f"'{planned.fallback}' plan: dcp.plan failed: "
                                  f"{planned.reason}", stacklevel=2)
                yielded += 1
                yield self._local(packed, planned.plan), planned.plan
        finally:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
                for key in [k for k, f in self._cache.items()
                            if not f.done() or f.cancelled()]:
                    del self._cache[key]
