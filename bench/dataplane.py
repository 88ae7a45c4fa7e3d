"""Kafka's data plane on our brokers (Produce v3-9, Fetch v4-12, ListOffsets v1-9): records per second through a
real local cluster (one broker, one controller, separate processes), for tieredctl's own client against real Kafka
clients on the same cluster in the same run.

Produce: the same N records (``VALUE_BYTES`` each, no key) to an empty one-partition topic without tiering (a plain
local log, Kafka's default ``segment.bytes`` of 1 GiB), acks=all, no idempotence. ``TieredClient.produce`` sends
one Produce per record batch of at most ``max_batch_bytes`` (16 KiB), one at a time; the references are
confluent-kafka (librdkafka) and kafka-python with Kafka's producer defaults of ``batch.size`` 16 KiB and
``linger.ms`` 5, timed from the first send to the last acknowledgement (flush).

Fetch: every client reads the same partition (the records ``TieredClient.produce`` wrote) from its start to its end;
``TieredClient.consume`` against a confluent-kafka consumer (``assign`` at OFFSET_BEGINNING, a group id, no
commits) and a kafka-python one (no group). Each count and each value read is checked.

The ceiling: confluent-kafka also produces to and fetches from a bare server (:mod:`bench.bare_broker`, its own
process, the same server and codec as a broker) that appends what it is sent to a file and serves the broker's
own segment files, the same bytes: the broker's figure with confluent-kafka over the bare one's is what the
broker's own work (validation, offsets, the log and its indexes, the metadata image, acks=all) costs.

Each client opens its connections before its clock starts (a metadata request), so the figures are steady-state
rates, not connection setup. The clients take turns, a few rounds each (a fresh topic per produce), and the best
round of each client counts: on a small machine one round's rate varies by a third from run to run.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.report import Figure, print_figures
from orchestrator.client import TieredClient
from orchestrator.local import cluster as lc
from orchestrator.logging import configure_logging

VALUE_BYTES = 100
LINGER_MS, BATCH_BYTES = 5, 16384  # Kafka's producer defaults (4.0); also TieredClient's max_batch_bytes
SEGMENT_BYTES = 1 << 30  # Kafka's default segment.bytes


def _values(n: int) -> list[bytes]:
    return [f"{i:010d}".encode().ljust(VALUE_BYTES, b".") for i in range(n)]


def _check_read(client: str, got: list[bytes], values: list[bytes]) -> None:
    if got != values:
        n = min(len(got), len(values))
        at = next((i for i in range(n) if got[i] != values[i]), n)
        raise AssertionError(f"{client} read {len(got):,} of {len(values):,} records; first difference at {at}")


# -- tieredctl's client ------------------------------------------------------------------------------------------


def _ours_produce(bootstrap: str, topic: str, values: list[bytes]) -> float:
    async def go() -> float:
        async with TieredClient(bootstrap, timeout_s=60, max_batch_bytes=BATCH_BYTES) as c:
            await c.list_offset(topic, 0, -1)  # connections to the controller and the leader
            t0 = time.perf_counter()
            first, last = await c.produce(topic, values)
            took = time.perf_counter() - t0
            assert (first, last) == (0, len(values) - 1), (first, last)
            return took

    return asyncio.run(go())


def _ours_consume(bootstrap: str, topic: str, values: list[bytes]) -> float:
    async def go() -> float:
        async with TieredClient(bootstrap, timeout_s=60) as c:
            await c.list_offset(topic, 0, -1)
            got: list[bytes] = []
            t0 = time.perf_counter()
            async for r in c.consume(topic):
                got.append(r.value or b"")
            took = time.perf_counter() - t0
            _check_read("TieredClient.consume", got, values)
            return took

    return asyncio.run(go())


# -- confluent-kafka (librdkafka) --------------------------------------------------------------------------------


def _confluent_produce(bootstrap: str, topic: str, values: list[bytes]) -> float:
    from confluent_kafka import KafkaException, Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": False,
            "acks": "all",
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_BYTES,
            "compression.type": "none",
        }
    )
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    try:
        producer.list_topics(topic, timeout=30)  # connections up before the clock starts
        t0 = time.perf_counter()
        for v in values:
            while True:
                try:
                    producer.produce(topic, v, partition=0, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: serve delivery reports, then try again
                    producer.poll(0.05)
            producer.poll(0)
        left = producer.flush(60)
        took = time.perf_counter() - t0
    except KafkaException as exc:
        raise AssertionError(f"confluent-kafka producer: {exc}") from exc
    finally:
        producer.flush(10)
    if left or failures:
        raise AssertionError(f"confluent-kafka producer: {left} undelivered, {len(failures)} failed: {failures[:3]}")
    return took


def _confluent_consume(bootstrap: str, topic: str, values: list[bytes]) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-dataplane",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # librdkafka stops fetching once 100,000 records wait in its queue (queued.min.messages), and then fetches
            # again only after fetch.queue.backoff.ms (1 s): whether a run crossed that line decided whether it took
            # 0.3 s or 1.1 s, against a broker or the bare server alike. A queue that holds the whole run never stops.
            "queued.min.messages": 10_000_000,
        }
    )
    try:
        consumer.list_topics(topic, timeout=30)
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        t0 = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while len(got) < len(values) and time.monotonic() < deadline:
            # Never more than the records still to come: a call asking for more waits out its whole timeout once the
            # partition's end is read, which made one round take 0.8 s longer than another at random.
            for msg in consumer.consume(num_messages=min(10_000, len(values) - len(got)), timeout=1.0):
                if msg.error():
                    raise AssertionError(f"confluent-kafka consumer: {msg.error()}")
                got.append(msg.value() or b"")
        took = time.perf_counter() - t0
    finally:
        consumer.close()
    _check_read("confluent-kafka consumer", got, values)
    return took


# -- kafka-python ------------------------------------------------------------------------------------------------


def _kafka_python_produce(bootstrap: str, topic: str, values: list[bytes]) -> float:
    with warnings.catch_warnings():  # its first import reads schemas with a resources API Python deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        acks="all",
        enable_idempotence=False,
        linger_ms=LINGER_MS,
        batch_size=BATCH_BYTES,
    )
    try:
        producer.partitions_for(topic)  # metadata and a connection before the clock starts
        t0 = time.perf_counter()
        futures = [producer.send(topic, v, partition=0) for v in values]
        producer.flush(60)
        took = time.perf_counter() - t0
        failed = [f.exception for f in futures if f.failed()]
        if failed or not all(f.is_done for f in futures):
            raise AssertionError(f"kafka-python producer: {len(failed)} failed: {failed[:3]}")
    finally:
        producer.close(10)
    return took


def _kafka_python_consume(bootstrap: str, topic: str, values: list[bytes]) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap.split(","), group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    try:
        consumer.partitions_for_topic(topic)
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        tp = TopicPartition(topic, 0)
        t0 = time.perf_counter()
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        while len(got) < len(values) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000, max_records=10_000).values():
                got.extend(r.value for r in batch)
        took = time.perf_counter() - t0
    finally:
        consumer.close()
    _check_read("kafka-python consumer", got, values)
    return took


# -- the section -------------------------------------------------------------------------------------------------

Timed = Callable[[str, str, list[bytes]], float]
OURS = "tieredctl"
CLIENTS: dict[str, tuple[Timed, Timed]] = {  # name: (produce, consume), each returning its seconds
    OURS: (_ours_produce, _ours_consume),
    "confluent-kafka": (_confluent_produce, _confluent_consume),
    "kafka-python": (_kafka_python_produce, _kafka_python_consume),
}


BARE = "bare server"


@contextmanager
def _bare_broker(directory: Path, served: dict[str, Path]) -> Iterator[str]:
    """A :mod:`bench.bare_broker` process serving ``served`` (topic: a broker's partition directory); its
    bootstrap address."""
    serve = [arg for topic, path in served.items() for arg in ("--serve", f"{topic}={path}")]
    command = [sys.executable, "-m", "bench.bare_broker", "--dir", str(directory), *serve]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline().split()  # its first line: logging is off below warnings
            if line[:1] != ["port"]:
                status = process.wait(timeout=10)
                raise AssertionError(f"the bare broker did not start: {line!r} (exit status {status})")
            yield f"127.0.0.1:{line[1]}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _partition_dir(cluster_dir: Path, topic: str) -> Path:
    """The one broker's directory of ``topic``'s partition 0."""
    found = [p for p in (cluster_dir / "data").glob(f"broker-*/{topic}-0") if p.is_dir()]
    if len(found) != 1:
        raise AssertionError(f"expected one directory of {topic}-0 under {cluster_dir / 'data'}, found {found}")
    return found[0]


def _create_topics(bootstrap: str, names: list[str]) -> None:
    async def go() -> None:
        async with TieredClient(bootstrap, timeout_s=60) as c:
            for name in names:
                # no remote.storage.enable: a plain local log; Kafka's default segment.bytes, not the local
                # cluster's 64 KiB (made for watching tiering): a roll every few requests is no steady state
                await c.create_topic(name, partitions=1, configs={"segment.bytes": str(SEGMENT_BYTES)})

    asyncio.run(go())


def _log_end(bootstrap: str, topic: str) -> int:
    async def go() -> int:
        async with TieredClient(bootstrap, timeout_s=60) as c:
            return (await c.offsets(topic)).log_end_offset

    return asyncio.run(go())


def run(records: int = 200_000, rounds: int = 3) -> list[Figure]:
    """Each client produces ``records`` to a fresh topic in each of ``rounds`` rounds, then reads the first topic
    ``TieredClient.produce`` wrote ``rounds`` times, the clients taking turns; the best round of each counts."""
    from confluent_kafka import libversion
    from kafka import __version__ as kafka_python_version

    configure_logging("cli", level=logging.WARNING)  # as the CLI: no per-connection debug lines between the tables
    values = _values(records)
    labels = {
        "confluent-kafka": f"confluent-kafka (librdkafka {libversion()[0]})",
        "kafka-python": f"kafka-python {kafka_python_version}",
    }
    produced: dict[str, float] = {}  # client: best records/s
    fetched: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="tieredctl-bench-") as tmp:
        state = lc.up(Path(tmp), brokers=1, controllers=1, timeout_s=120)
        try:
            bootstrap = state.bootstrap_server
            topics = {(client, r): f"dp-{client}-{r}" for r in range(rounds) for client in CLIENTS}
            _create_topics(bootstrap, list(topics.values()))
            for (client, _r), topic in topics.items():
                rate = records / CLIENTS[client][0](bootstrap, topic, values)
                produced[client] = max(rate, produced.get(client, 0.0))
            for topic in topics.values():
                end = _log_end(bootstrap, topic)
                assert end == records, f"{topic} ends at offset {end}, expected {records}"
            for _r in range(rounds):
                for client, (_, consume) in CLIENTS.items():
                    rate = records / consume(bootstrap, topics[(OURS, 0)], values)
                    fetched[client] = max(rate, fetched.get(client, 0.0))
            served = {topics[(OURS, 0)]: _partition_dir(Path(tmp), topics[(OURS, 0)])}
            with _bare_broker(Path(tmp) / "bare", served) as bare:
                for r in range(rounds):  # the best of as many rounds as each client had with the broker
                    rate = records / _confluent_produce(bare, f"bare-{r}", values)
                    produced[BARE] = max(rate, produced.get(BARE, 0.0))
                for _r in range(rounds):
                    rate = records / _confluent_consume(bare, topics[(OURS, 0)], values)
                    fetched[BARE] = max(rate, fetched.get(BARE, 0.0))
        finally:
            lc.down(Path(tmp), purge=True)
    figures = [
        *(Figure("produce: TieredClient.produce", produced[OURS], "rec/s", labels[c], produced[c]) for c in labels),
        *(Figure("fetch: TieredClient.consume", fetched[OURS], "rec/s", labels[c], fetched[c]) for c in labels),
        Figure(
            "produce: the broker, with confluent-kafka",
            produced["confluent-kafka"],
            "rec/s",
            "a bare server appending the same bytes to a file",
            produced[BARE],
        ),
        Figure(
            "fetch: the broker, with confluent-kafka",
            fetched["confluent-kafka"],
            "rec/s",
            "a bare server serving the same bytes from the broker's segment files",
            fetched[BARE],
        ),
    ]
    mb = records * VALUE_BYTES / 1e6
    title = (
        f"Data plane, 1 broker: {records:,} records x {VALUE_BYTES} B ({mb:.1f} MB) per client and run, acks=all, "
        f"best of {rounds}"
    )
    print_figures(title, figures)
    return figures


if __name__ == "__main__":
    run()
