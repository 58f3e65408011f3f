# SPDX-License-Identifier: Apache-2.0
"""A dcp communicator over a torch.distributed process group.

The C++ executor calls it (through dcp._core.RankExecutor) to move its buffer slots between ranks:
every part of a message is one point-to-point send or receive of the slot's bytes where they lie
(a uint8 tensor over the executor's memory, on its device: no copy), tagged with the exchange id,
so launches of one id between two ranks match in the order they were made.

Completion, CPU tensors: a gloo work completes only inside its blocking ``wait()``
(``is_completed()`` stays False before, and a ``wait`` that times out closes the connection), so
each launch gets a thread that waits for its works; ``wait(id)`` joins it while watching the
failure channel. Device tensors (NCCL): the parts of a launch go out as one
``batch_isend_irecv`` (NCCL needs the sends and receives between two ranks grouped), ``test``
asks ``is_completed()`` and ``wait`` calls the works' ``wait()`` on the calling thread, which
orders the current stream after them; a timeout is then the process group's own.

Failures: a rank that fails writes its reason under a key of a store all ranks share (the one
given, else the default process group's); every rank's later ``launch``, ``test`` and ``wait``
raise RuntimeError naming it. Without a store (see ``_default_store``) a failed rank is noticed only when the group's own timeout ends the transfers waiting
for it. After a failure, transfers still posted may touch the executor's memory until the process
group ends them: destroy the group rather than reuse it.
"""
from __future__ import annotations

import itertools
import threading
import time

import torch
import torch.distributed as dist

_instances = itertools.count()  # communicators are made in the same order on every rank


def collective_device(group: dist.ProcessGroup | None,
                      device: torch.device | None = None) -> torch.device:
    """Where the tensors of a collective over ``group`` must lie: ``device`` (default CPU) when
    the group's backend serves tensors there, else this process's current CUDA device. Every
    backend but NCCL serves CPU tensors (gloo, MPI, or a mixed backend with a "cpu:" entry);
    NCCL serves only CUDA tensors."""
    backend = str(dist.get_backend(group)).lower()
    serves_cpu = backend != "nccl" and (":" not in backend or "cpu:" in backend)
    if device is not None and (device.type != "cpu" or serves_cpu):
        return device
    if serves_cpu or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def _default_store():
    """The key-value store behind the default process group, or None. torch keeps the accessor
    private (every torch 2.x has it): used when present, never required."""
    try:
        from torch.distributed import distributed_c10d
        return distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - without a store, failures surface through timeouts
        return None


class _Exchange:
    """The works of one launch and the thread that waits for them."""

    def __init__(self, works: list) -> None:
        self.works = works
        self.error: BaseException | None = None
        self.done = threading.Event()
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        try:
            for w in self.works:
                w.wait()
        except BaseException as e:  # noqa: BLE001 - reported by the caller's wait
            self.error = e
        self.done.set()

    def finished(self) -> bool:
        return self.done.is_set()


class _DeviceExchange:
    """The works of one launch on device memory, waited for on the caller's thread and stream."""

    error = None

    def __init__(self, works: list) -> None:
        self.works = works

    def finished(self) -> bool:
        return all(w.is_completed() for w in self.works)

    def wait(self) -> None:
        for w in self.works:
            w.wait()


class ProcessGroupComm:
    """launch/test/wait/fail of one rank of ``group`` (the contract of dcp::Communicator)."""

    def __init__(self, group: dist.ProcessGroup | None, timeout_s: float,
                 store: dist.Store | None = None) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.timeout_s = timeout_s
        self._global = [dist.get_global_rank(group, r) if group is not None else r
                        for r in range(self.size)]
        self._pending: dict[int, _Exchange] = {}
        self._store = store if store is not None else _default_store()
        self._key = f"dcp/failed/{next(_instances)}"
        self._failure: str | None = None

    # -- the contract -------------------------------------------------------------------------
    def launch(self, id: int, sends: list, recvs: list) -> None:
        self._check_failure()
        if id in self._pending:
            raise ValueError(f"rank {self.rank}: exchange id {id} is already launched")
        ops = [(dist.isend, part, peer) for peer, parts in sends for part in parts] + \
              [(dist.irecv, part, peer) for peer, parts in recvs for part in parts]
        ops = [(op, part, self._global[peer]) for op, part, peer in ops if part.numel() > 0]
        try:
            if any(part.device.type != "cpu" for _, part, _ in ops):
                p2p = [dist.P2POp(op, part, peer, group=self.group, tag=id)
                       for op, part, peer in ops]
                self._pending[id] = _DeviceExchange(dist.batch_isend_irecv(p2p) if p2p else [])
            else:
                self._pending[id] = _Exchange([op(part, peer, group=self.group, tag=id)
                                               for op, part, peer in ops])
        except Exception:
            self._check_failure()  # a peer that failed and closed its connections says why
            raise

    def test(self, id: int) -> bool:
        self._check_failure()
        exchange = self._exchange(id)
        if not exchange.finished():
            return False
        self._finish(id)
        return True

    def wait(self, id: int) -> None:
        exchange = self._exchange(id)
        if isinstance(exchange, _DeviceExchange):
            del self._pending[id]
            try:
                exchange.wait()
            except Exception as e:  # noqa: BLE001 - the group's own timeout or failure
                self._check_failure()  # a peer's own reason, when it gave one, says more
                raise RuntimeError(f"rank {self.rank}: exchange id {id}: {e}") from e
            return
        deadline = time.monotonic() + self.timeout_s
        while not exchange.done.wait(0.005):
            self._check_failure()
            if time.monotonic() > deadline:
                del self._pending[id]
                raise TimeoutError(f"rank {self.rank}: exchange id {id}: not complete after "
                                   f"{self.timeout_s} s")
        self._finish(id)

    def fail(self, reason: str) -> None:
        if self._failure is None:
            self._failure = f"rank {self.rank} failed: {reason}"
            if self._store is not None:
                self._store.set(self._key, self._failure)

    # -- helpers ------------------------------------------------------------------------------
    def _exchange(self, id: int) -> _Exchange | _DeviceExchange:
        if id not in self._pending:
            raise ValueError(f"rank {self.rank}: exchange id {id} was never launched")
        return self._pending[id]

    def _finish(self, id: int) -> None:
        exchange = self._pending.pop(id)
        if exchange.error is not None:
            # A peer that failed closes its connections after telling the store why: its reason
            # says more than the broken transfer.
            self._check_failure()
            raise RuntimeError(f"rank {self.rank}: exchange id {id}: {exchange.error}")

    def _check_failure(self) -> None:
        if self._failure is None and self._store is not None and \
                self._store.check([self._key]):
            self._failure = self._store.get(self._key).decode(errors="replace")
        if self._failure is not None:
            raise RuntimeError(self._failure)
