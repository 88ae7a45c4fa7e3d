"""The cluster's internal topics: what every node says of them, and what it refuses a client to do to them. Pure.

One topic is internal: ``__remote_log_metadata`` (:mod:`remote_storage.rlmm_topic.layout`), which the active
controller creates and the brokers fill from the store. Clients read it; only the cluster writes it. Every node
answers alike:

* **Metadata** says ``is_internal=true`` for it (Kafka's ``KRaftMetadataCache.scala`` line 256 sets ``isInternal``
  from ``Topic.isInternal``), so Kafka's admin clients leave it out of ``listTopics`` unless asked (``listInternal``),
  as ``tieredctl topic list`` does without ``--include-internal``.
* **Produce** is refused on each of its partitions with INVALID_TOPIC_EXCEPTION (17), "Cannot append to internal
  topic __remote_log_metadata": the error and text of Kafka's ``ReplicaManager.appendToLocalLog``
  (``core/src/main/scala/kafka/server/ReplicaManager.scala``, lines 1457-1462 at apache/kafka
  1eb7644349cb07139d6a3c1ad1986979647cac99). Kafka leaves the text out of the response (``hasCustomErrorMessage =
  false``); we send it, so a client can say why. Kafka lets a client whose id is ``__admin_client`` through
  (``KafkaApis.scala`` line 742); we let nobody through: the publisher appends to its own log, never by Produce.
* **CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs** naming it are refused,
  for that topic alone, with INVALID_REQUEST (42) and "<Change> of internal topic __remote_log_metadata is
  prohibited.": the code and wording of Kafka's refusal to create its own internal ``__cluster_metadata``
  (``ControllerApis.scala`` lines 431-436, ``KafkaApis.scala`` lines 1993-1996, same commit). Kafka itself has no
  such check for deleting, growing or reconfiguring its internal topics (``ControllerApis.deleteTopics`` checks
  authorization only; ``Topic.isInternal`` is used for appends, DeleteRecords and Metadata): there, ACLs protect
  them. We refuse them outright because each would break the topic's contract: a client-made topic of that name
  would not be filled, a deletion or a shorter retention loses records readers rely on (a scan of the topic
  refuses a metadata topic that may have lost records), and more partitions move every topic-partition's records
  to another partition.

Stock Kafka does not count ``__remote_log_metadata`` among ``Topic.INTERNAL_TOPICS`` (``__consumer_offsets``,
``__transaction_state``, ``__share_group_state``); we do, because here nothing but the cluster may write it.

Kafka's own internal names (``Topic.INTERNAL_TOPICS`` in ``clients/src/main/java/org/apache/kafka/common/internals/
Topic.java`` line 37, and ``__cluster_metadata``, ``Topic.CLUSTER_METADATA_TOPIC_NAME``) are **reserved**: this
cluster serves none of them (no group or transaction coordinator, no metadata log as a topic), so a client-made
topic of such a name would pass for Kafka's to every client that trusts the name. Creating one is refused as Kafka
refuses ``__cluster_metadata`` (the same INVALID_REQUEST and wording); as none can exist, every other change of one
is UNKNOWN_TOPIC_OR_PARTITION as for any absent topic.
"""

from __future__ import annotations

from orchestrator.errors import InvalidRequest, InvalidTopic
from remote_storage.rlmm_topic.layout import TOPIC_NAME as REMOTE_LOG_METADATA_TOPIC

INTERNAL_TOPICS = frozenset({REMOTE_LOG_METADATA_TOPIC})
# Kafka's internal topics and its metadata log's name: never served here, so never created by a client.
RESERVED_KAFKA_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"}
)

CREATION, DELETION, PARTITION_CHANGE, CONFIG_CHANGE = "Creation", "Deletion", "Partition change", "Config change"


def is_internal(name: str | None) -> bool:
    """Whether topic ``name`` is one of the cluster's internal topics."""
    return name in INTERNAL_TOPICS


def client_change_refusal(name: str | None, change: str) -> InvalidRequest | None:
    """The error a client's ``change`` (:data:`CREATION`, :data:`DELETION`, ...) of topic ``name`` is refused with,
    or None when the topic is not internal (nor, for a creation, one of Kafka's reserved internal names)."""
    if not is_internal(name) and not (change == CREATION and name in RESERVED_KAFKA_TOPICS):
        return None
    return InvalidRequest(f"{change} of internal topic {name} is prohibited.")


def check_client_change(name: str | None, change: str) -> None:
    """Raise :func:`client_change_refusal`'s error, if any."""
    refusal = client_change_refusal(name, change)
    if refusal is not None:
        raise refusal


def produce_refusal(name: str) -> InvalidTopic | None:
    """The error a client's Produce to topic ``name`` is refused with, or None when the topic is not internal."""
    if not is_internal(name):
        return None
    return InvalidTopic(f"Cannot append to internal topic {name}")
