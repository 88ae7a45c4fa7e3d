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
import warnings
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
            raise JudgeFailure(f"kafkajs {op}: {reply['error']}: {reply['message']}")
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
