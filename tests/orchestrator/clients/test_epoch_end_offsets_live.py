"""OffsetForLeaderEpoch on a live cluster (3 brokers, separate OS processes) across a leader change: the new leader
says where the old leader's epoch ended, which is the first offset written under its own epoch, and the other
brokers say they do not lead. Asked with our own connection and, once, encoded and decoded by kafka-python's
structs (an independent judge of the bytes); the records are written by confluent-kafka (librdkafka), and a
librdkafka consumer reading across the leader change checks its position with the new leader (KIP-320: it asks
OffsetForLeaderEpoch because the brokers advertise it) and reads on.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import struct
import time
import warnings
from typing import Any

import pytest

from orchestrator.net.connection import KafkaConnection
from orchestrator.protocol.api_keys import ApiKey
from tests.support.kafka_clients import confluent_consumer, consume_confluent, produce_confluent
from tests.support.live_cluster import live_cluster, wait_until

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's import-time importlib.resources call
    from kafka.protocol.old import offset_for_leader_epoch as kp

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOPIC = "epochs"
NONE, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH = 0, 6, 74
BEFORE, AFTER = 40, 25  # records written under the first leader, then under the second


def _partition(cluster: Any) -> dict[str, Any]:
    async def ask(c: Any) -> dict[str, Any]:
        md = await c.metadata([TOPIC])
        (p,) = md["topics"][0]["partitions"]
        return dict(p)

    return cluster.call(ask)  # type: ignore[no-any-return]


def _ask(port: int, leader_epoch: int, current_leader_epoch: int = -1, version: int = 4) -> tuple[int, int, int]:
    """(error code, leader epoch, end offset) of partition 0, asked of the broker on ``port`` as a consumer."""
    body = {
        "replica_id": -1,
        "topics": [
            {
                "topic": TOPIC,
                "partitions": [
                    {"partition": 0, "current_leader_epoch": current_leader_epoch, "leader_epoch": leader_epoch}
                ],
            }
        ],
    }

    async def go() -> dict[str, Any]:
        async with await KafkaConnection.open("127.0.0.1", port) as conn:
            versions = await conn.api_versions(timeout_s=10)
            assert versions[ApiKey.OFFSET_FOR_LEADER_EPOCH] == (2, 4), "advertised in ApiVersions"
            return await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, body, timeout_s=10)

    response = asyncio.run(go())
    ((topic,),) = [response["topics"]]
    (p,) = topic["partitions"]
    assert (topic["topic"], p["partition"]) == (TOPIC, 0)
    return p["error_code"], p["leader_epoch"], p["end_offset"]


def _ask_with_kafka_python(port: int, leader_epoch: int, current_leader_epoch: int) -> tuple[int, int, int]:
    """The same question as :func:`_ask` at v3, framed, encoded and decoded by kafka-python over a plain socket."""
    request = kp.OffsetForLeaderEpochRequest[3](
        replica_id=-1, topics=[(TOPIC, [(0, current_leader_epoch, leader_epoch)])]
    )
    request.with_header(correlation_id=42, client_id="kafka-python-judge")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode(header=True, framed=True))
        (size,) = struct.unpack(">i", _read_exactly(sock, 4))
        response = kp.OffsetForLeaderEpochResponse[3].decode(_read_exactly(sock, size), header=True)
    assert response.header.correlation_id == 42
    ((topic, partitions),) = response.topics
    ((error_code, partition, epoch, end_offset),) = partitions
    assert (topic, partition) == (TOPIC, 0)
    return error_code, epoch, end_offset


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class _Reader:
    """A librdkafka consumer assigned partition 0 from offset 0, polled in steps, that keeps librdkafka's protocol
    debug lines: it consumes across the leader change, so it checks its position with the new leader."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import TopicPartition

        self.errors: list[Any] = []
        self.log = _Lines()
        logger = logging.getLogger(f"{__name__}.librdkafka")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(self.log)
        self.consumer = confluent_consumer(bootstrap, self.errors, debug="protocol", logger=logger)
        self.consumer.assign([TopicPartition(TOPIC, 0, 0)])
        self.offsets: list[int] = []

    def read_to(self, end: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while (not self.offsets or self.offsets[-1] + 1 < end) and time.monotonic() < deadline:
            msg = self.consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            self.offsets.append(msg.offset())
        assert self.offsets == list(range(end))
        # The killed broker's connection fails; nothing else may.
        from confluent_kafka import KafkaError

        transport = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
        assert [e for e in self.errors if e.code() not in transport] == []


def _produce(cluster: Any, prefix: bytes, count: int) -> list[int]:
    records = [(0, None, prefix + b"%03d" % i) for i in range(count)]
    reports = produce_confluent(cluster.bootstrap, TOPIC, records, acks="all", **{"enable.idempotence": True})
    return [r[1] for r in reports]


def test_the_new_leader_says_where_the_old_epoch_ended_and_the_others_that_they_do_not_lead(tmp_path):
    with live_cluster(tmp_path / "c", brokers=3, controllers=1) as cluster:
        cluster.call(
            lambda c: c.create_topic(TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        )
        wait_until("all three replicas in sync", lambda: sorted(_partition(cluster)["isr_nodes"]) == [1, 2, 3], 60)
        first = _partition(cluster)
        old_leader, old_epoch = first["leader_id"], first["leader_epoch"]
        assert _produce(cluster, b"a", BEFORE) == list(range(BEFORE))
        port = {b: cluster.process("broker", b).port for b in (1, 2, 3)}
        assert _ask(port[old_leader], old_epoch, old_epoch) == (NONE, old_epoch, BEFORE), "the latest epoch: the LEO"
        reader = _Reader(cluster.bootstrap)
        reader.read_to(BEFORE)

        cluster.signal("broker", old_leader, signal.SIGKILL)
        second = wait_until(
            "a new leader", lambda: (p := _partition(cluster))["leader_id"] not in (old_leader, -1) and p, 60
        )
        new_leader, new_epoch = second["leader_id"], second["leader_epoch"]
        assert new_epoch > old_epoch
        assert _produce(cluster, b"b", AFTER) == list(range(BEFORE, BEFORE + AFTER))
        read = consume_confluent(cluster.bootstrap, TOPIC, [0], until={0: BEFORE + AFTER}, timeout_s=60)
        assert [o for _, o, _, _ in read] == list(range(BEFORE + AFTER))
        reader.read_to(BEFORE + AFTER)  # librdkafka validated its position with the new leader, and read on
        reader.consumer.close()
        asked = [line for line in reader.log.lines if "OffsetForLeaderEpoch" in line]
        assert any("Sent OffsetForLeaderEpochRequest" in line for line in asked), "librdkafka checked its position"
        assert any("Received OffsetForLeaderEpochResponse" in line for line in asked), asked

        leader_port = port[new_leader]
        # The old epoch ends where the new one's first record was written; the current one at the log end.
        for version in (2, 3, 4):
            assert _ask(leader_port, old_epoch, new_epoch, version) == (NONE, old_epoch, BEFORE)
        assert _ask(leader_port, new_epoch, new_epoch) == (NONE, new_epoch, BEFORE + AFTER)
        assert _ask(leader_port, new_epoch + 1) == (NONE, -1, -1), "an epoch the log has not reached: undefined"
        assert _ask(leader_port, old_epoch, old_epoch)[0] == FENCED_LEADER_EPOCH, "an asker behind the leader change"
        assert _ask_with_kafka_python(leader_port, old_epoch, new_epoch) == (NONE, old_epoch, BEFORE)

        (follower,) = {1, 2, 3} - {old_leader, new_leader}
        assert _ask(port[follower], old_epoch, new_epoch) == (NOT_LEADER_OR_FOLLOWER, -1, -1)
        assert _ask_with_kafka_python(port[follower], old_epoch, new_epoch) == (NOT_LEADER_OR_FOLLOWER, -1, -1)
