"""The operations of a chaos run, performed against its cluster, and what the cluster acknowledged.

:meth:`Operations.run` performs one :class:`~chaos.scenario.Op` of the scenario through a client of its own and
writes the ``op`` and ``result`` events of the history. What the checker needs of the answers is kept here: every
acknowledged produce (:class:`~chaos.checker.Ack`, with the values derived from the seed) and the time of every
delete-policy disable per topic id.

Invariants:

* An operation that fails with a cluster error, an OS error or a timeout is a failed operation, not a failed run:
  it is counted and recorded, and the run goes on.
* A disable with the delete policy whose answer never came (or came as a retriable error) may still be applied at
  any later time: it is kept as :data:`UNKNOWN_OUTCOME`, which stands for every record of the topic id from then
  on. A definite refusal (a non-retriable Kafka error) applied nothing and is not kept.
* Produced values are a pure function of (seed, operation, index, size): the history never stores bytes.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from typing import Any

from chaos import checker as ck
from chaos.fault_injection import FaultInjector
from chaos.history import History
from chaos.rig import Rig
from chaos.scenario import Op
from orchestrator.clock import wall_ms
from orchestrator.errors import KafkaError, TieredError

UNKNOWN_OUTCOME = 2**62  # the time of a request whose outcome the run never learned: "at any time from now on"


def _value(seed: int, op: int, i: int, size: int) -> bytes:
    return f"{seed}:{op}:{i}:".encode().ljust(size, b"v")


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
            created = call(lambda c: c.create_topic(op.topic, partitions=a["partitions"], configs=configs))
            return {"topic_id": str(created)}
        tid = str(call(lambda c: c.topic(op.topic))["topic_id"])
        if op.kind == "produce":
            values = [_value(self.seed, op.index, i, a["size"]) for i in range(a["records"])]
            first, _last = call(lambda c: c.produce(op.topic, values, partition=a["partition"]))
            self.acks.append(ck.Ack(tid, a["partition"], first, tuple(values), wall_ms()))
            return {"topic_id": tid, "partition": a["partition"], "first_offset": first, "records": len(values)}
        if op.kind == "disable":
            # A delete policy may take records acknowledged before its answer. One whose answer never came may
            # still be applied at any later time, so it stands for every record of the topic id from then on.
            delete = a["policy"] == "delete"
            try:
                call(lambda c: c.disable_tiering(op.topic, a["policy"]))
            except Exception as exc:
                refused = isinstance(exc, KafkaError) and not exc.retriable  # a definite no: nothing was applied
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

    def _decommission(self, broker: int, dead_for: int) -> dict[str, Any]:
        self.injector.decommission(broker, dead_for)
        self.rig.call(lambda c: c.decommission_broker(broker))
        return {"broker": broker}
