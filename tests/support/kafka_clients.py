"""Real third-party Kafka clients as judges of the admin API: kafka-python, confluent-kafka (librdkafka), kafkajs.

Each judge wraps ONE long-lived admin client of its library behind the same small interface, and raises
:class:`JudgeFailure` for anything its library reports as a failure (an exception, or an error code in a
result), so a test counts failures the same way for every client. kafkajs runs in a Node.js process
(``tests/clients/kafkajs/admin.js``) driven one JSON command per line; ``make`` installs its ``node_modules``.

Nothing here retries: a client's own retries are part of what is judged.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

KAFKAJS_DIR = Path(__file__).resolve().parents[1] / "clients" / "kafkajs"
TOPIC, BROKER = 2, 4  # Kafka's config resource types


class JudgeFailure(AssertionError):
    """A client library reported a failure."""


class KafkaPythonJudge:
    name = "kafka-python"
    incremental = True

    def __init__(self, bootstrap: str, **security: Any) -> None:
        """``security``: kafka-python's own keyword settings (security_protocol, ssl_cafile, sasl_mechanism...)."""
        with warnings.catch_warnings():  # its first import reads schemas with a resources API Python deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            from kafka.admin import KafkaAdminClient

        self._admin = KafkaAdminClient(
            bootstrap_servers=bootstrap.split(","), client_id="kafka-python-judge", request_timeout_ms=15000, **security
        )

    def _resource(self, name: str, configs: Any = None) -> Any:
        from kafka.admin import ConfigResource, ConfigResourceType

        return ConfigResource(ConfigResourceType.TOPIC, name, configs=configs)

    @staticmethod
    def _check(what: str, result: Any) -> Any:
        for entry in result.get("topics", []) if isinstance(result, dict) else []:
            if entry.get("error_code", 0) != 0:
                raise JudgeFailure(f"kafka-python {what}: {entry}")
        return result

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        from kafka.admin import NewTopic

        self._check("create_topics", self._admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)]))

    def list_topics(self) -> set[str]:
        return set(self._admin.list_topics())

    def describe_topic(self, name: str) -> int:
        [topic] = self._check("describe_topics", {"topics": self._admin.describe_topics([name])})["topics"]
        return len(topic["partitions"])

    def describe_cluster(self) -> tuple[int, set[int]]:
        cluster = self._admin.describe_cluster()
        return cluster["controller_id"], {b["broker_id"] for b in cluster["brokers"]}

    def describe_configs(self, name: str) -> dict[str, str]:
        result = self._admin.describe_configs([self._resource(name)])
        entries = result["topic"][name]
        if not isinstance(entries, dict):
            raise JudgeFailure(f"kafka-python describe_configs: {entries!r}")
        return {k: v["value"] for k, v in entries.items()}

    def _alter(self, name: str, configs: dict[str, str], *, incremental: bool) -> None:
        result = self._admin.alter_configs(
            [self._resource(name, dict(configs))], raise_on_unknown=False, incremental=incremental
        )
        outcome = result["topic"][name]
        if outcome != "OK":
            raise JudgeFailure(f"kafka-python alter_configs(incremental={incremental}): {outcome!r}")

    def alter_configs(self, name: str, configs: dict[str, str]) -> None:
        """Kafka-python's AlterConfigs path: it first reads the topic's set configs and sends them along."""
        self._alter(name, configs, incremental=False)

    def incremental_alter_configs(self, name: str, configs: dict[str, str]) -> None:
        self._alter(name, configs, incremental=True)

    def delete_topic(self, name: str) -> None:
        result = self._admin.delete_topics([name])
        for entry in result.get("topics", []) if isinstance(result, dict) else []:
            if entry.get("error_code", 0) != 0:
                raise JudgeFailure(f"kafka-python delete_topics: {entry}")

    def close(self) -> None:
        self._admin.close()


class ConfluentJudge:
    name = "confluent-kafka"
    incremental = True

    def __init__(self, bootstrap: str, **properties: str) -> None:
        """``properties``: librdkafka's own (``{"security.protocol": "SASL_SSL", ...}``)."""
        from confluent_kafka.admin import AdminClient

        self._admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "confluent-kafka-judge", **properties})

    @staticmethod
    def _wait(what: str, futures: dict[Any, Any]) -> dict[Any, Any]:
        out = {}
        for key, future in futures.items():
            try:
                out[key] = future.result(timeout=30)
            except Exception as exc:  # KafkaException, or a timeout of the future
                raise JudgeFailure(f"confluent-kafka {what}: {exc}") from exc
        return out

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        from confluent_kafka.admin import NewTopic

        self._wait("create_topics", self._admin.create_topics([NewTopic(name, partitions, 1, config=configs)]))

    def list_topics(self) -> set[str]:
        try:
            return set(self._admin.list_topics(timeout=15).topics)
        except Exception as exc:
            raise JudgeFailure(f"confluent-kafka list_topics: {exc}") from exc

    def describe_topic(self, name: str) -> int:
        from confluent_kafka import TopicCollection

        [description] = self._wait("describe_topics", self._admin.describe_topics(TopicCollection([name]))).values()
        return len(description.partitions)

    def describe_cluster(self) -> tuple[int, set[int]]:
        try:
            cluster = self._admin.describe_cluster(request_timeout=15).result(timeout=30)
        except Exception as exc:
            raise JudgeFailure(f"confluent-kafka describe_cluster: {exc}") from exc
        return cluster.controller.id, {n.id for n in cluster.nodes}

    def describe_configs(self, name: str) -> dict[str, str]:
        from confluent_kafka.admin import ConfigResource

        futures = self._admin.describe_configs([ConfigResource("topic", name)])
        [entries] = self._wait("describe_configs", futures).values()
        return {k: v.value for k, v in entries.items()}

    def alter_configs(self, name: str, configs: dict[str, str]) -> None:
        """librdkafka's AlterConfigs: the topic's configs become exactly ``configs``."""
        from confluent_kafka.admin import ConfigResource

        resource = ConfigResource("topic", name, set_config=dict(configs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # deprecated in favour of the incremental API
            futures = self._admin.alter_configs([resource])
        self._wait("alter_configs", futures)

    def incremental_alter_configs(self, name: str, configs: dict[str, str]) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
        resource = ConfigResource("topic", name, incremental_configs=entries)
        self._wait("incremental_alter_configs", self._admin.incremental_alter_configs([resource]))

    def delete_topic(self, name: str) -> None:
        self._wait("delete_topics", self._admin.delete_topics([name], operation_timeout=15))

    def close(self) -> None:
        pass  # librdkafka's handle is released with the object


class KafkaJsJudge:
    name = "kafkajs"
    incremental = False  # kafkajs has no IncrementalAlterConfigs: alterConfigs is its only way to change a config

    def __init__(self, bootstrap: str) -> None:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not installed: install Node.js 20 (e.g. 'apt-get install -y nodejs')")
        if not (KAFKAJS_DIR / "node_modules" / "kafkajs").is_dir():
            raise RuntimeError(f"kafkajs is not installed in {KAFKAJS_DIR}: run 'make test' (it runs 'npm ci' there)")
        self._proc = subprocess.Popen(
            [node, str(KAFKAJS_DIR / "admin.js"), bootstrap],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

    def _call(self, op: str, *args: Any) -> Any:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"op": op, "args": list(args)}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise JudgeFailure(f"kafkajs {op}: the judge process ended (exit status {self._proc.poll()})")
        reply = json.loads(line)
        if not reply["ok"]:
            kind = f" ({reply['type']})" if reply.get("type") else ""  # Kafka's error name, for a protocol error
            raise JudgeFailure(f"kafkajs {op}: {reply['error']}{kind}: {reply['message']}")
        return reply["result"]

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        entries = [{"name": k, "value": v} for k, v in configs.items()]
        topic = {"topic": name, "numPartitions": partitions, "replicationFactor": 1, "configEntries": entries}
        if not self._call("createTopics", {"topics": [topic], "waitForLeaders": False}):
            raise JudgeFailure(f"kafkajs createTopics: topic {name} was not created")

    def list_topics(self) -> set[str]:
        return set(self._call("listTopics"))

    def describe_topic(self, name: str) -> int:
        [topic] = self._call("fetchTopicMetadata", {"topics": [name]})["topics"]
        return len(topic["partitions"])

    def describe_cluster(self) -> tuple[int, set[int]]:
        cluster = self._call("describeCluster")
        return cluster["controller"], {b["nodeId"] for b in cluster["brokers"]}

    def describe_configs(self, name: str) -> dict[str, str]:
        [resource] = self._call("describeConfigs", {"resources": [{"type": TOPIC, "name": name}]})["resources"]
        if resource["errorCode"]:
            raise JudgeFailure(f"kafkajs describeConfigs: {resource}")
        return {e["configName"]: e["configValue"] for e in resource["configEntries"]}

    def alter_configs(self, name: str, configs: dict[str, str]) -> None:
        entries = [{"name": k, "value": v} for k, v in configs.items()]
        result = self._call("alterConfigs", {"resources": [{"type": TOPIC, "name": name, "configEntries": entries}]})
        [resource] = result["resources"]
        if resource["errorCode"]:
            raise JudgeFailure(f"kafkajs alterConfigs: {resource}")

    def incremental_alter_configs(self, name: str, configs: dict[str, str]) -> None:
        raise NotImplementedError("kafkajs has no IncrementalAlterConfigs")

    def delete_topic(self, name: str) -> None:
        self._call("deleteTopics", {"topics": [name]})

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


Judge = KafkaPythonJudge | ConfluentJudge | KafkaJsJudge
JUDGES: dict[str, type[Judge]] = {j.name: j for j in (KafkaPythonJudge, ConfluentJudge, KafkaJsJudge)}


# -- the data plane: producers and consumers -------------------------------------------------------------------------
#
# Records are compared as ``(partition, offset, key, value)``. Producers return what their library acknowledged
# (from delivery reports / futures); consumers assign partitions by hand (no consumer groups are served) and read
# until each partition's position reaches the end offset they were given, within a time bound.

Record = tuple[int, int, bytes | None, bytes | None]
"""(partition, offset, key, value); offset -1 for an acks=0 produce (no acknowledgement, no offset)."""
ToProduce = tuple[int | None, bytes | None, bytes | None]
"""(partition or None for the client's partitioner, key, value)."""
BEGINNING = -2  # Kafka's (and librdkafka's OFFSET_BEGINNING) "the earliest offset"


class ClientReportedError(JudgeFailure):
    """A client library reported an error; ``reported`` is its own error object (an exception, a KafkaError)."""

    def __init__(self, message: str, reported: Any) -> None:
        super().__init__(message)
        self.reported = reported


def _kafka_python() -> Any:
    with warnings.catch_warnings():  # its first import reads schemas with a resources API Python deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka

    return kafka


def produce_kafka_python(
    bootstrap: str,
    topic: str,
    records: list[ToProduce],
    *,
    timestamps: list[int] | None = None,
    timeout_s: float = 30,
    **config: Any,
) -> list[Record]:
    """Send ``records`` (with ``timestamps``, CreateTime in ms, if given) with one KafkaProducer, idempotence off
    unless ``config`` says otherwise, and return what each future acknowledged, in the order sent."""
    kafka = _kafka_python()
    settings = {
        "client_id": "kafka-python-producer",
        "enable_idempotence": False,
        "request_timeout_ms": 10000,
        "max_block_ms": int(timeout_s * 1000),  # send() waits for metadata at most this long
    }
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap.split(","), **{**settings, **config})
    times = timestamps if timestamps is not None else [None] * len(records)
    try:
        try:
            futures = [
                producer.send(topic, key=k, value=v, partition=p, timestamp_ms=t)
                for (p, k, v), t in zip(records, times, strict=True)
            ]
            producer.flush(timeout=timeout_s)
        except Exception as exc:
            raise ClientReportedError(f"kafka-python send to {topic}: {exc!r}", exc) from exc
        acked: list[Record] = []
        for (_, key, value), future in zip(records, futures, strict=True):
            try:
                meta = future.get(timeout=max(timeout_s, 1))
            except Exception as exc:
                raise ClientReportedError(f"kafka-python send to {topic}: {exc!r}", exc) from exc
            acked.append((meta.partition, meta.offset, key, value))
        return acked
    finally:
        producer.close(timeout=10)


def produce_confluent(
    bootstrap: str, topic: str, records: list[ToProduce], *, timeout_s: float = 30, **config: Any
) -> list[Record]:
    """Produce ``records`` with one librdkafka producer and return its delivery reports, in the order sent. Any
    delivery error, or any error librdkafka reports through ``error_cb``, fails."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    reports: dict[int, Record] = {}
    settings = {"bootstrap.servers": bootstrap, "client.id": "confluent-producer", "error_cb": errors.append}
    producer = Producer({**settings, **config})

    def on_delivery(index: int, key: bytes | None, value: bytes | None) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                reports[index] = (msg.partition(), msg.offset(), key, value)

        return report

    try:
        for index, (partition, key, value) in enumerate(records):
            extra = {} if partition is None else {"partition": partition}
            producer.produce(topic, key=key, value=value, on_delivery=on_delivery(index, key, value), **extra)
            producer.poll(0)
        left = producer.flush(timeout_s)
        if errors:
            raise ClientReportedError(f"confluent-kafka produce to {topic}: {errors[:5]}", errors[0])
        if left or len(reports) != len(records):
            raise JudgeFailure(f"confluent-kafka produce to {topic}: {left} message(s) undelivered after {timeout_s}s")
        return [reports[i] for i in range(len(records))]
    finally:
        producer.flush(0)
        del producer


def kafka_python_consumer(bootstrap: str, **config: Any) -> Any:
    """A KafkaConsumer without a group (``group_id=None``: no coordinator is needed) for manual assignment."""
    kafka = _kafka_python()
    settings = {
        "client_id": "kafka-python-consumer",
        "group_id": None,
        "enable_auto_commit": False,
        "request_timeout_ms": 10000,
        "fetch_max_wait_ms": 200,
    }
    return kafka.KafkaConsumer(bootstrap_servers=bootstrap.split(","), **{**settings, **config})


def consume_kafka_python(
    bootstrap: str,
    topic: str,
    partitions: list[int],
    *,
    from_offset: int = BEGINNING,
    until: dict[int, int] | None = None,
    timeout_s: float = 30,
    **config: Any,
) -> list[Record]:
    """Assign ``partitions``, seek each to ``from_offset`` (BEGINNING: ``seek_to_beginning``) and poll until every
    partition's position reaches ``until`` (default: its end offset as the consumer sees it first). Any exception
    the consumer raises is a :class:`ClientReportedError`; not reaching the end in ``timeout_s`` is a failure."""
    kafka = _kafka_python()
    consumer = kafka_python_consumer(bootstrap, **config)
    try:
        tps = {p: kafka.TopicPartition(topic, p) for p in partitions}
        consumer.assign(list(tps.values()))
        if until is None:
            until = {tp.partition: end for tp, end in consumer.end_offsets(list(tps.values())).items()}
        if from_offset == BEGINNING:
            consumer.seek_to_beginning(*tps.values())
        else:
            for tp in tps.values():
                consumer.seek(tp, from_offset)
        got: list[Record] = []
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                done = all(consumer.position(tps[p], timeout_ms=5000) >= until[p] for p in partitions)
                if done:
                    return got
                if time.monotonic() > deadline:
                    raise JudgeFailure(
                        f"kafka-python read {len(got)} records of {topic} in {timeout_s}s, not to {until}"
                    )
                polled = consumer.poll(timeout_ms=500)
            except JudgeFailure:
                raise
            except Exception as exc:
                raise ClientReportedError(f"kafka-python consume of {topic}: {exc!r}", exc) from exc
            for batch in polled.values():
                got.extend((r.partition, r.offset, r.key, r.value) for r in batch)
    finally:
        consumer.close()


def kafka_python_offsets(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """Each partition's (beginning, end) offsets as kafka-python's ``beginning_offsets`` / ``end_offsets`` say."""
    kafka = _kafka_python()
    consumer = kafka_python_consumer(bootstrap)
    try:
        tps = [kafka.TopicPartition(topic, p) for p in partitions]
        try:
            first, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        except Exception as exc:
            raise ClientReportedError(f"kafka-python offsets of {topic}: {exc!r}", exc) from exc
        return {tp.partition: (first[tp], end[tp]) for tp in tps}
    finally:
        consumer.close()


def kafka_python_offsets_for_times(
    bootstrap: str, topic: str, partitions: list[int], timestamp_ms: int
) -> dict[int, tuple[int, int] | None]:
    """Each partition's first (offset, timestamp) at or after ``timestamp_ms`` (None: none), by
    ``offsets_for_times``."""
    kafka = _kafka_python()
    consumer = kafka_python_consumer(bootstrap)
    try:
        tps = [kafka.TopicPartition(topic, p) for p in partitions]
        try:
            found = consumer.offsets_for_times(dict.fromkeys(tps, timestamp_ms))
        except Exception as exc:
            raise ClientReportedError(f"kafka-python offsets_for_times of {topic}: {exc!r}", exc) from exc
        return {tp.partition: None if found[tp] is None else (found[tp].offset, found[tp].timestamp) for tp in tps}
    finally:
        consumer.close()


def confluent_consumer(bootstrap: str, errors: list[Any], **config: Any) -> Any:
    """A librdkafka consumer for manual assignment: a ``group.id`` (librdkafka wants one) that never joins and commits
    nothing as long as only ``assign()`` is used. Its group handler still looks for a coordinator in the background;
    the brokers serve no FindCoordinator, so it stays in ``query-coord`` ("no broker available for coordinator
    query", a debug line only) and reports no error."""
    from confluent_kafka import Consumer

    settings = {
        "bootstrap.servers": bootstrap,
        "client.id": "confluent-consumer",
        "group.id": "tieredctl-manual-assignment",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 200,
        "error_cb": errors.append,
    }
    return Consumer({**settings, **config})


def consume_confluent(
    bootstrap: str,
    topic: str,
    partitions: list[int],
    *,
    from_offset: int = BEGINNING,
    until: dict[int, int] | None = None,
    timeout_s: float = 30,
    **config: Any,
) -> list[Record]:
    """Assign ``partitions`` at ``from_offset`` (BEGINNING: librdkafka's OFFSET_BEGINNING) and poll until every
    partition reached ``until`` (default: its high watermark, from ``get_watermark_offsets``). An error event
    (``msg.error()``) or an ``error_cb`` error is a :class:`ClientReportedError` whose ``reported`` is the
    KafkaError; not reaching the end in ``timeout_s`` is a failure."""
    from confluent_kafka import TopicPartition

    errors: list[Any] = []
    consumer = confluent_consumer(bootstrap, errors, **config)
    try:
        marks = {p: _watermarks(consumer, topic, p, 10.0) for p in partitions}
        if until is None:
            until = {p: high for p, (_, high) in marks.items()}
        consumer.assign([TopicPartition(topic, p, from_offset) for p in partitions])
        got: list[Record] = []
        last = {p: (low if from_offset == BEGINNING else from_offset) - 1 for p, (low, _) in marks.items()}
        deadline = time.monotonic() + timeout_s
        while not all(last[p] + 1 >= until[p] for p in partitions) or errors:
            if errors:
                raise ClientReportedError(f"confluent-kafka consume of {topic}: {errors[:5]}", errors[0])
            if time.monotonic() > deadline:
                raise JudgeFailure(
                    f"confluent-kafka read {len(got)} records of {topic} in {timeout_s}s, not to {until}"
                )
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise ClientReportedError(f"confluent-kafka consume of {topic}: {msg.error()}", msg.error())
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
            last[msg.partition()] = msg.offset()
        return got
    finally:
        consumer.close()


def _watermarks(consumer: Any, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
    """The partition's watermarks. A leader that moved since librdkafka last read Metadata answers
    NOT_LEADER_FOR_PARTITION (or LEADER_NOT_AVAILABLE mid-election), which librdkafka's call reports instead of
    retrying: as Kafka's own clients do, Metadata is read again and the call retried, within ``timeout_s``; any
    other error, or one that lasts, is a ClientReportedError."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    retriable = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}
    deadline = time.monotonic() + timeout_s
    while True:
        left = max(deadline - time.monotonic(), 0.1)
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=left, cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args else None
            if code not in retriable or time.monotonic() >= deadline:
                raise ClientReportedError(
                    f"confluent-kafka get_watermark_offsets of {topic}-{partition}: {exc}", exc
                ) from exc
            consumer.list_topics(topic, timeout=left)  # Metadata again (a round trip): where the leader is now


def confluent_watermarks(
    bootstrap: str, topic: str, partitions: list[int], *, timeout_s: float = 10.0
) -> dict[int, tuple[int, int]]:
    """Each partition's (low, high) watermarks as librdkafka's ``get_watermark_offsets`` asks the leader, each
    given up on (ClientReportedError) after ``timeout_s``."""
    errors: list[Any] = []
    consumer = confluent_consumer(bootstrap, errors)
    try:
        found = {p: _watermarks(consumer, topic, p, timeout_s) for p in partitions}
        if errors:
            raise ClientReportedError(f"confluent-kafka watermarks of {topic}: {errors[:5]}", errors[0])
        return found
    finally:
        consumer.close()


def confluent_offsets_for_times(bootstrap: str, topic: str, partitions: list[int], timestamp_ms: int) -> dict[int, int]:
    """Each partition's first offset at or after ``timestamp_ms`` (-1: none; ``BEGINNING`` asks for the earliest),
    by librdkafka's ``offsets_for_times``."""
    from confluent_kafka import KafkaException, TopicPartition

    errors: list[Any] = []
    consumer = confluent_consumer(bootstrap, errors)
    try:
        try:
            found = consumer.offsets_for_times([TopicPartition(topic, p, timestamp_ms) for p in partitions], timeout=10)
        except KafkaException as exc:
            raise ClientReportedError(f"confluent-kafka offsets_for_times of {topic}: {exc}", exc) from exc
        for tp in found:
            if tp.error is not None:
                raise ClientReportedError(f"confluent-kafka offsets_for_times of {topic}: {tp.error}", tp.error)
        if errors:
            raise ClientReportedError(f"confluent-kafka offsets_for_times of {topic}: {errors[:5]}", errors[0])
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()
