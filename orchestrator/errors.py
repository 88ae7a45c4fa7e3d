"""Typed errors carrying Kafka error codes.

Every error that crosses a process boundary is a :class:`KafkaError` subclass with a class-level ``code``
(Kafka's number where Kafka has one), ``name`` (Kafka's error name) and ``retriable`` flag. A code read off the
wire is turned back into the right class with :func:`for_code`, so a client can decide retries from the class.

Codes of our own live at 10950 and above (outside Kafka's assigned range, which ends far below):

* ``TIERED_STORAGE_DISABLEMENT_IN_PROGRESS`` (10950): KIP-950 left the number open ("> 71, to be determined").
* ``STALE_TIERED_EPOCH`` (10951): a request or RLMM record carries a tiered epoch the topic is not at.
* ``METADATA_LOG_CORRUPT`` (10952): the metadata store found a record whose checksum does not match.
"""

from __future__ import annotations

from typing import ClassVar


class KafkaError(Exception):
    """Base of every error with a Kafka error code."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False
    hint: ClassVar[str] = ""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.name)
        self.message = message or self.name

    def __str__(self) -> str:
        text = f"{self.name} ({self.code}): {self.message}"
        return f"{text}. {self.hint}" if self.hint else text


_BY_CODE: dict[int, type[KafkaError]] = {}


def _register(cls: type[KafkaError]) -> type[KafkaError]:
    if cls.code in _BY_CODE:
        raise RuntimeError(f"duplicate error code {cls.code}")
    _BY_CODE[cls.code] = cls
    return cls


def for_code(code: int) -> type[KafkaError]:
    """The error class for a wire error code; unknown codes map to :class:`UnknownServerError`."""
    return _BY_CODE.get(code, UnknownServerError)


def error_name(code: int) -> str:
    return "NONE" if code == 0 else for_code(code).name


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the error for ``code`` unless it is 0 (NONE)."""
    if code != 0:
        raise for_code(code)(message or "")


@_register
class UnknownServerError(KafkaError):
    code, name = -1, "UNKNOWN_SERVER_ERROR"


@_register
class OffsetOutOfRange(KafkaError):
    code, name = 1, "OFFSET_OUT_OF_RANGE"


@_register
class CorruptMessage(KafkaError):
    code, name, retriable = 2, "CORRUPT_MESSAGE", True


@_register
class UnknownTopicOrPartition(KafkaError):
    code, name, retriable = 3, "UNKNOWN_TOPIC_OR_PARTITION", True
    hint = "Check the name with 'tieredctl topic list'."


@_register
class LeaderNotAvailable(KafkaError):
    code, name, retriable = 5, "LEADER_NOT_AVAILABLE", True


@_register
class NotLeaderOrFollower(KafkaError):
    code, name, retriable = 6, "NOT_LEADER_OR_FOLLOWER", True


@_register
class RequestTimedOut(KafkaError):
    code, name, retriable = 7, "REQUEST_TIMED_OUT", True


@_register
class BrokerNotAvailable(KafkaError):
    code, name, retriable = 8, "BROKER_NOT_AVAILABLE", True


@_register
class StaleControllerEpoch(KafkaError):
    code, name = 11, "STALE_CONTROLLER_EPOCH"
    hint = "A newer controller is active; this writer has been deposed."


@_register
class InvalidTopic(KafkaError):
    code, name = 17, "INVALID_TOPIC_EXCEPTION"
    hint = "Topic names are 1-249 characters of [a-zA-Z0-9._-], and not '.' or '..'."


@_register
class UnsupportedVersion(KafkaError):
    code, name = 35, "UNSUPPORTED_VERSION"


@_register
class TopicAlreadyExists(KafkaError):
    code, name = 36, "TOPIC_ALREADY_EXISTS"


@_register
class InvalidPartitions(KafkaError):
    code, name = 37, "INVALID_PARTITIONS"


@_register
class InvalidReplicationFactor(KafkaError):
    code, name = 38, "INVALID_REPLICATION_FACTOR"


@_register
class InvalidReplicaAssignment(KafkaError):
    code, name = 39, "INVALID_REPLICA_ASSIGNMENT"


@_register
class InvalidConfig(KafkaError):
    code, name = 40, "INVALID_CONFIG"


@_register
class NotController(KafkaError):
    code, name, retriable = 41, "NOT_CONTROLLER", True


@_register
class InvalidRequest(KafkaError):
    code, name = 42, "INVALID_REQUEST"


@_register
class KafkaStorageError(KafkaError):
    code, name, retriable = 56, "KAFKA_STORAGE_ERROR", True


@_register
class StaleBrokerEpoch(KafkaError):
    code, name = 77, "STALE_BROKER_EPOCH"


@_register
class UnknownTopicId(KafkaError):
    code, name, retriable = 100, "UNKNOWN_TOPIC_ID", True


@_register
class DuplicateBrokerRegistration(KafkaError):
    code, name = 101, "DUPLICATE_BROKER_REGISTRATION"


@_register
class BrokerIdNotRegistered(KafkaError):
    code, name = 102, "BROKER_ID_NOT_REGISTERED"


@_register
class InconsistentTopicId(KafkaError):
    code, name, retriable = 103, "INCONSISTENT_TOPIC_ID", True


@_register
class InconsistentClusterId(KafkaError):
    code, name = 104, "INCONSISTENT_CLUSTER_ID"


@_register
class TieredStorageDisablementInProgress(KafkaError):
    code, name = 10950, "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS"
    hint = "Wait for the topic to reach DISABLED ('tieredctl tiering status NAME') and retry."


@_register
class StaleTieredEpoch(KafkaError):
    code, name = 10951, "STALE_TIERED_EPOCH"


@_register
class MetadataLogCorrupt(KafkaError):
    code, name = 10952, "METADATA_LOG_CORRUPT"


class ProtocolError(InvalidRequest):
    """Malformed bytes on the wire: truncated frame, bad varint, bad length, unknown api key or version.

    Raised by the codec and the framing; a server closes that connection and keeps serving the others.
    """
