"""The operations of a chaos run, performed against its cluster, and what the cluster acknowledged.

:meth:`Operations.run` performs one :class:`~chaos.scenario.Op` of the scenario through a client of its own and
writes the ``op`` and ``result`` events of the history. What the checker needs of the answers is kept here: every
acknowledged record batch (:class:`~chaos.checker.Ack`, with the values derived from the seed; an ``acked`` event
each) and the time of every delete-policy disable per topic id. Topics are created with the scenario's replication
factor and configs (:meth:`~chaos.scenario.Scenario.topic_configs`).

Invariants:

* An operation that fails with a cluster error, an OS error or a timeout is a failed operation, not a failed run:
  it is counted and recorded, and the run goes on.
* A disable with the delete policy whose answer never came (or came as a retriable error) may still be applied at
  any later time: it is kept as :data:`UNKNOWN_OUTCOME`, which stands for every record of the topic id from then
  on. A definite refusal (a non-retriable Kafka error) applied nothing and is not kept, except
  TIERED_STORAGE_DISABLEMENT_IN_PROGRESS: the client's retry of a request whose first try was applied (its
  controller died after the epoch bump, before answering) hears that the topic is already DISABLING.
* Produces are acks=all (the client's only mode): a batch is acknowledged once every in-sync replica has it, the
  only promise that survives a broker's death with replicas. A batch acknowledged before a later one of the same
  produce failed is kept; one whose answer never came is not (it may or may not be in the log).
* Produced values are a pure function of (seed, operation, index, size): the history never stores bytes.
* A create refused with INVALID_REPLICATION_FACTOR while no broker is held back by the run (only restarting, e.g.
  after a crash point restarted them all) is tried again every 0.5 s until the controller counts enough live
  brokers (at most :data:`BROKERS_WAIT_S`; ``brokers_awaited`` in the history), so a replicated run is not left
  without its topics; with a broker down, paused or on a failed disk, the refusal stands.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from chaos import checker as ck
from chaos.fault_injection import FaultInjector
from chaos.history import History
from chaos.rig import Rig
from chaos.scenario import Op
from orchestrator.clock import wall_ms
from orchestrator.errors import InvalidReplicationFactor, KafkaError, TieredError, TieredStorageDisablementInProgress

UNKNOWN_OUTCOME = 2**62  # the time of a request whose outcome the run never learned: "at any time from now on"
BROKERS_WAIT_S = 20.0  # how long a create refused for want of brokers waits for restarting ones


def _value(seed: int, op: int, i: int, size: int) -> bytes:
    return f"{seed}:{op}:{i}:".encode().ljust(size, b"v")


def ack_recorder(
    acks: list[ck.Ack], history: History, values: list[bytes], *, index: int, topic: str, tid: str, partition: int
) -> Callable[[int, int], None]:
    """The ``on_ack`` of one produce of ``values``: each batch acknowledged is kept in ``acks`` (and the history) as
    its answer arrives, so a produce that fails half way still holds the cluster to the batches it acked."""
    done = 0

    def acked(base: int, records: int) -> None:
        nonlocal done
        batch = tuple(values[done : done + records])
        done += records
        acks.append(ck.Ack(tid, partition, base, batch, wall_ms()))
        where = {"topic_id": tid, "partition": partition, "first_offset": base, "records": records}
        history.record("acked", index=index, topic=topic, **where)

    return acked


class Operations:
    def __init__(self, rig: Rig, history: History, injector: FaultInjector) -> None:
        self.rig = rig
        self.history = history
        self.injector = injector  # a decommission kills its broker first
        self.seed = rig.scenario.seed
        self.acks: list[ck.Ack] = []
        self.delete_requests: dict[str, list[int]] = defaultdict(list)
        self.failed = 0

    def run(self, op: Op) -> None:
        self.history.record("op", index=op.index, op=op.kind, topic=op.topic, args=op.args)
        started = time.monotonic()
        try:
            detail = self._perform(op)
        except (TieredError, OSError, TimeoutError) as exc:
            self.failed += 1
            error = f"{type(exc).__name__}: {exc}"
            self.history.record("result", index=op.index, op=op.kind, topic=op.topic, ok=False, error=error)
        else:
            took = round(time.monotonic() - started, 2)
            self.history.record("result", index=op.index, op=op.kind, topic=op.topic, ok=True, s=took, **detail)

    def _perform(self, op: Op) -> dict[str, Any]:
        a = op.args
        call = self.rig.call
        if op.kind == "settle":
            time.sleep(a["seconds"])
            return {}
        if op.kind == "decommission":
            return self._decommission(a["broker"], a["dead_for"])
        if op.kind in ("create", "recreate"):
            if op.kind == "recreate":
                with contextlib.suppress(TieredError):
                    call(lambda c: c.delete_topic(op.topic))
            configs = {"remote.storage.enable": "true" if a["tiered"] else "false", "retention.ms": "-1"}
            configs["local.retention.ms"] = "0"
            configs.update(self.rig.scenario.topic_configs())
            factor = self.rig.scenario.replication_factor

            def create() -> Any:
                return call(
                    lambda c: c.create_topic(
                        op.topic, partitions=a["partitions"], replication_factor=factor, configs=configs
                    )
                )

            try:
                created = create()
            except InvalidReplicationFactor:
                if self.injector.brokers_held_back():
                    raise
                created = self._create_once_brokers_are_back(create)
            return {"topic_id": str(created)}
        tid = str(call(lambda c: c.topic(op.topic))["topic_id"])
        if op.kind == "produce":
            return self._produce(tid, op, [_value(self.seed, op.index, i, a["size"]) for i in range(a["records"])])
        if op.kind == "disable":
            # A delete policy may take records acknowledged before its answer. One whose answer never came may
            # still be applied at any later time, so it stands for every record of the topic id from then on.
            delete = a["policy"] == "delete"
            try:
                call(lambda c: c.disable_tiering(op.topic, a["policy"]))
            except Exception as exc:
                # A definite no: nothing was applied. Not so "already DISABLING": the client's retry of a request
                # whose answer was lost (its controller died after the epoch bump) hears it of its own first try.
                refused = (
                    isinstance(exc, KafkaError)
                    and not exc.retriable
                    and not isinstance(exc, TieredStorageDisablementInProgress)
                )
                if delete and not refused:
                    self.delete_requests[tid].append(UNKNOWN_OUTCOME)
                raise
            if delete:
                self.delete_requests[tid].append(wall_ms())
        elif op.kind == "enable":
            call(lambda c: c.enable_tiering(op.topic))
        elif op.kind == "delete":
            call(lambda c: c.delete_topic(op.topic))
        elif op.kind == "add_partitions":
            call(lambda c: c.add_partitions(op.topic, a["total"]))
        else:  # pragma: no cover - the generator makes no other kind
            raise AssertionError(op.kind)
        return {"topic_id": tid}

    def _create_once_brokers_are_back(self, create: Callable[[], Any]) -> Any:
        """A create refused for want of brokers while the run holds none back (they are only restarting, as after a
        crash point's restarts), tried again until the controller counts enough live brokers, as an operator would,
        for at most :data:`BROKERS_WAIT_S`; then its refusal stands."""
        started = time.monotonic()
        while True:
            try:
                created = create()
            except InvalidReplicationFactor:
                if time.monotonic() - started >= BROKERS_WAIT_S:
                    raise
                time.sleep(0.5)
                continue
            self.history.record("brokers_awaited", s=round(time.monotonic() - started, 2))
            return created

    def _produce(self, tid: str, op: Op, values: list[bytes]) -> dict[str, Any]:
        """acks=all, one Produce per record batch: each batch is kept as acknowledged (and recorded in the history)
        as its answer arrives, so a produce that fails half way still holds the cluster to the batches it acked."""
        partition = op.args["partition"]
        acked = ack_recorder(
            self.acks, self.history, values, index=op.index, topic=op.topic, tid=tid, partition=partition
        )
        first, _last = self.rig.call(lambda c: c.produce(op.topic, values, partition=partition, on_ack=acked))
        return {"topic_id": tid, "partition": partition, "first_offset": first, "records": len(values)}

    def _decommission(self, broker: int, dead_for: int) -> dict[str, Any]:
        self.injector.decommission(broker, dead_for)
        self.rig.call(lambda c: c.decommission_broker(broker))
        return {"broker": broker}
