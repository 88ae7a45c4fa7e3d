"""Every error this project raises on purpose: one root, :class:`TieredError`, and a branch per kind of failure.

::

    TieredError                     name, message, hint, retriable (declared by every class)
    ├── KafkaError                  a Kafka wire code: raised where a server answers a request, and on the client
    │   ├── InvalidRequest (42) ... from a response's error code (for_code); Kafka's numbers, ours from 10950
    │   └── ...
    ├── InvalidArgument             a value given to a command or a function that cannot be used (a duration, a
    │                               bootstrap list, a reclaim category); nothing was sent anywhere
    ├── SettingsError               a process settings file that is missing, not TOML, or has unknown keys
    ├── ProtocolError               bytes on the wire that do not decode (the connection is closed, not answered)
    ├── ConnectionClosed            the peer closed a connection between frames (a clean end)
    ├── SaslExchangeFailed          this side, as a SASL client, could not finish a SCRAM exchange
    ├── RemoteStorageError          an object-store call failed for good (after the retry layer's attempts)
    ├── MissingCredentialsError     no credentials for the object store were found
    ├── ScanInputError              an inventory, a metadata export, a scan's output or an object key that cannot
    │                               be used; the message names the file
    ├── StoreUnavailable            the metadata store did not answer a command within its bound
    └── LocalClusterError           the local cluster could not be started, found or stopped

Rules the classes keep:

* ``name`` (a stable UPPER_SNAKE identifier printed by the CLI), ``retriable`` and ``hint`` are class attributes.
  Every class declares ``name`` and ``retriable`` in its own body (checked when the class is created), so whether
  an error is retried is always a decision written down, never inherited by accident.
* Only :class:`KafkaError` carries a ``code``, and only Kafka's number or one of ours (10950 and above, outside
  Kafka's range). A code read off the wire is turned back into its class by :func:`for_code`.
* A server translates what it catches into a :class:`KafkaError` at its boundary (for example a
  :class:`RemoteStorageError` becomes KAFKA_STORAGE_ERROR in a broker's answer); nothing else crosses the wire.

Codes of our own:

* ``TIERED_STORAGE_DISABLEMENT_IN_PROGRESS`` (10950): KIP-950 left the number open ("> 71, to be determined").
* ``STALE_TIERED_EPOCH`` (10951): a request or RLMM record carries a tiered epoch the topic is not at.
* ``METADATA_LOG_CORRUPT`` (10952): the metadata store found a record whose checksum does not match.
"""

from __future__ import annotations

from typing import Any, ClassVar


class TieredError(Exception):
    """The root of every error tieredctl raises on purpose."""

    name: ClassVar[str] = "TIERED_ERROR"
    retriable: ClassVar[bool] = False
    hint: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [attr for attr in ("name", "retriable") if attr not in cls.__dict__]
        if missing:
            raise TypeError(f"{cls.__qualname__} must declare {' and '.join(missing)} in its own body")

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.name)
        self.message = message or self.name

    def __str__(self) -> str:
        return self._with_hint(f"{self.name}: {self.message}")

    def _with_hint(self, text: str) -> str:
        return f"{text}. {self.hint}" if self.hint else text


# -- errors without a wire code -----------------------------------------------------------------------------------


class InvalidArgument(TieredError):
    name, retriable = "INVALID_ARGUMENT", False


class SettingsError(TieredError):
    name, retriable = "INVALID_SETTINGS", False
    hint = "The settings a process reads are described in README.md (Configuration) and deploy/config/."


class ProtocolError(TieredError):
    """Malformed bytes on the wire: truncated frame, bad varint, bad length, unknown api key or version.

    Raised by the codec and the framing; a server closes that connection and keeps serving the others.
    """

    name, retriable = "PROTOCOL_ERROR", False


class ConnectionClosed(TieredError):
    """The peer closed the connection between frames (a clean end, not an error of the peer)."""

    name, retriable = "CONNECTION_CLOSED", True


class RemoteStorageError(TieredError):
    """An object-store call failed for good (the retry layer already retried what was retriable), or returned
    something unusable."""

    name, retriable = "REMOTE_STORAGE_ERROR", False


class MissingCredentialsError(TieredError):
    name, retriable = "MISSING_CREDENTIALS", False
    hint = (
        "Give the object store's credentials the usual AWS way: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
        "AWS_PROFILE, or an instance role (MinIO and moto accept any non-empty pair)"
    )


class ScanInputError(TieredError):
    """An inventory, a metadata export, a scan's output directory or an object key that cannot be used."""

    name, retriable = "SCAN_INPUT_ERROR", False


class ReclaimInProgress(TieredError):
    """Another ``reclaim --execute`` holds the scan's output directory: two would delete and journal the same
    objects twice (and count them twice)."""

    name, retriable = "RECLAIM_IN_PROGRESS", True


class LocalClusterError(TieredError):
    """The local cluster could not be started, found or stopped; the message says what to do."""

    name, retriable = "LOCAL_CLUSTER_ERROR", False


class StoreUnavailable(TieredError):
    """The metadata store did not answer a command within its bound (a PostgreSQL server paused or unreachable, a
    SQLite file whose write lock another process holds): the message names the store and what to do. No wire code:
    the client found it out itself."""

    name, retriable = "STORE_UNAVAILABLE", True


class SaslExchangeFailed(TieredError):
    """This side, as a SASL client, could not finish a SCRAM exchange: the server's message was malformed or its
    signature did not match (the server does not hold this user's credential). No wire code: nothing answered it."""

    name, retriable = "SASL_EXCHANGE_FAILED", False


class RecordsMissing(TieredError):
    """A read ended before the end of the log its broker reported: records it should hold could not be read."""

    name, retriable = "RECORDS_MISSING", False
    hint = "The broker's log or its remote segments lack these records; see the broker's log, and do not trust a copy"


# -- Kafka errors: a wire code ------------------------------------------------------------------------------------


class KafkaError(TieredError):
    """An error with a Kafka error code: what a server answers, and what a client raises from an answer."""

    code: ClassVar[int] = -1
    name, retriable = "UNKNOWN_SERVER_ERROR", False

    def __str__(self) -> str:
        return self._with_hint(f"{self.name} ({self.code}): {self.message}")


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
    code, name, retriable = -1, "UNKNOWN_SERVER_ERROR", False


@_register
class OffsetOutOfRange(KafkaError):
    code, name, retriable = 1, "OFFSET_OUT_OF_RANGE", False


@_register
class CorruptMessage(KafkaError):
    """Record data that does not decode (Kafka's CorruptRecordException): a CRC-32C mismatch, a bad magic, a length
    or count the bytes contradict. Retriable as in Kafka: bytes damaged in transit may arrive whole next time."""

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
class MessageTooLarge(KafkaError):
    """A record batch larger than the topic's ``max.message.bytes`` (or a broker's limit)."""

    code, name, retriable = 10, "MESSAGE_TOO_LARGE", False
    hint = "Send smaller batches (the producer's batch.size / message.max.bytes) or raise max.message.bytes."


@_register
class StaleControllerEpoch(KafkaError):
    code, name, retriable = 11, "STALE_CONTROLLER_EPOCH", False
    hint = "A newer controller is active; this writer has been deposed."


@_register
class CoordinatorNotAvailable(KafkaError):
    """No node can serve the request's coordinator role now (an InitProducerId while no broker is live)."""

    code, name, retriable = 15, "COORDINATOR_NOT_AVAILABLE", True


@_register
class InvalidTopic(KafkaError):
    code, name, retriable = 17, "INVALID_TOPIC_EXCEPTION", False
    hint = "Topic names are 1-249 characters of [a-zA-Z0-9._-], and not '.' or '..'."


@_register
class NotEnoughReplicas(KafkaError):
    """An acks=all write refused before it was appended: the ISR is smaller than ``min.insync.replicas``."""

    code, name, retriable = 19, "NOT_ENOUGH_REPLICAS", True


@_register
class NotEnoughReplicasAfterAppend(KafkaError):
    """An acks=all write appended by the leader, but the ISR shrank below ``min.insync.replicas`` before every
    member had it: the client retries (an idempotent producer's retry is not written twice)."""

    code, name, retriable = 20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True


@_register
class InvalidRequiredAcks(KafkaError):
    code, name, retriable = 21, "INVALID_REQUIRED_ACKS", False
    hint = "acks must be 0, 1 or -1 (all)."


@_register
class TopicAuthorizationFailed(KafkaError):
    code, name, retriable = 29, "TOPIC_AUTHORIZATION_FAILED", False


@_register
class ClusterAuthorizationFailed(KafkaError):
    code, name, retriable = 31, "CLUSTER_AUTHORIZATION_FAILED", False


@_register
class InvalidTimestamp(KafkaError):
    """A record timestamp outside what the topic's ``message.timestamp.before/after.max.ms`` allow."""

    code, name, retriable = 32, "INVALID_TIMESTAMP", False


@_register
class UnsupportedSaslMechanism(KafkaError):
    """The client asked for a SASL mechanism the server has not enabled, or named an unknown SCRAM mechanism."""

    code, name, retriable = 33, "UNSUPPORTED_SASL_MECHANISM", False


@_register
class IllegalSaslState(KafkaError):
    """A SASL request out of order: SaslAuthenticate before SaslHandshake, or after the exchange ended."""

    code, name, retriable = 34, "ILLEGAL_SASL_STATE", False


@_register
class UnsupportedVersion(KafkaError):
    code, name, retriable = 35, "UNSUPPORTED_VERSION", False


@_register
class TopicAlreadyExists(KafkaError):
    code, name, retriable = 36, "TOPIC_ALREADY_EXISTS", False


@_register
class InvalidPartitions(KafkaError):
    code, name, retriable = 37, "INVALID_PARTITIONS", False


@_register
class InvalidReplicationFactor(KafkaError):
    code, name, retriable = 38, "INVALID_REPLICATION_FACTOR", False


@_register
class InvalidReplicaAssignment(KafkaError):
    code, name, retriable = 39, "INVALID_REPLICA_ASSIGNMENT", False


@_register
class InvalidConfig(KafkaError):
    code, name, retriable = 40, "INVALID_CONFIG", False


@_register
class NotController(KafkaError):
    code, name, retriable = 41, "NOT_CONTROLLER", True


@_register
class InvalidRequest(KafkaError):
    code, name, retriable = 42, "INVALID_REQUEST", False


@_register
class UnsupportedForMessageFormat(KafkaError):
    """A request this broker's log cannot serve as asked: an idempotent or transactional produce (a producer id in
    the batch, or a transactional id), since no InitProducerId and no producer state are kept."""

    code, name, retriable = 43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False
    hint = "Produce without idempotence or transactions (enable.idempotence=false, no transactional.id)."


@_register
class OutOfOrderSequenceNumber(KafkaError):
    """An idempotent producer's batch whose sequence does not follow the last one the partition has from it."""

    code, name, retriable = 45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False


@_register
class InvalidProducerEpoch(KafkaError):
    """A batch from an older epoch of a producer id than the partition has seen: a zombie producer."""

    code, name, retriable = 47, "INVALID_PRODUCER_EPOCH", False


@_register
class SecurityDisabled(KafkaError):
    """An ACL request to a server that has no authorizer configured."""

    code, name, retriable = 54, "SECURITY_DISABLED", False


@_register
class KafkaStorageError(KafkaError):
    code, name, retriable = 56, "KAFKA_STORAGE_ERROR", True


@_register
class SaslAuthenticationFailed(KafkaError):
    """The SASL exchange failed. The message never says why (an unknown user and a wrong password read alike)."""

    code, name, retriable = 58, "SASL_AUTHENTICATION_FAILED", False


@_register
class FetchSessionIdNotFound(KafkaError):
    """An incremental fetch naming a fetch session: this broker creates none (it answers session id 0)."""

    code, name, retriable = 70, "FETCH_SESSION_ID_NOT_FOUND", True


@_register
class FencedLeaderEpoch(KafkaError):
    """The client's leader epoch for a partition is older than the leader's: its metadata is stale."""

    code, name, retriable = 74, "FENCED_LEADER_EPOCH", True


@_register
class UnknownLeaderEpoch(KafkaError):
    """The client's leader epoch for a partition is newer than this broker knows: this broker's metadata lags."""

    code, name, retriable = 75, "UNKNOWN_LEADER_EPOCH", True


@_register
class UnsupportedCompressionType(KafkaError):
    """A record batch compressed with a codec this process cannot read or write (snappy, lz4, zstd)."""

    code, name, retriable = 76, "UNSUPPORTED_COMPRESSION_TYPE", False


@_register
class StaleBrokerEpoch(KafkaError):
    code, name, retriable = 77, "STALE_BROKER_EPOCH", False


@_register
class InvalidRecord(KafkaError):
    """A record batch that decodes but breaks the log's rules (offset deltas out of sequence, a control batch from
    a client, a record count that disagrees with the header)."""

    code, name, retriable = 87, "INVALID_RECORD", False


@_register
class ResourceNotFound(KafkaError):
    code, name, retriable = 91, "RESOURCE_NOT_FOUND", False


@_register
class DuplicateResource(KafkaError):
    code, name, retriable = 92, "DUPLICATE_RESOURCE", False


@_register
class UnacceptableCredential(KafkaError):
    """A SCRAM credential the server will not store: an empty user name, iterations out of Kafka's range, or (ours)
    a salt too short to log in with or a salted password of the wrong size for its mechanism."""

    code, name, retriable = 93, "UNACCEPTABLE_CREDENTIAL", False


@_register
class InvalidUpdateVersion(KafkaError):
    """An AlterPartition based on a partition epoch that is not the partition's current one: the leader's view of
    the partition is stale (it learns the current one from the metadata, then decides again)."""

    code, name, retriable = 95, "INVALID_UPDATE_VERSION", False


@_register
class UnknownTopicId(KafkaError):
    code, name, retriable = 100, "UNKNOWN_TOPIC_ID", True


@_register
class DuplicateBrokerRegistration(KafkaError):
    code, name, retriable = 101, "DUPLICATE_BROKER_REGISTRATION", False


@_register
class BrokerIdNotRegistered(KafkaError):
    code, name, retriable = 102, "BROKER_ID_NOT_REGISTERED", False


@_register
class InconsistentTopicId(KafkaError):
    code, name, retriable = 103, "INCONSISTENT_TOPIC_ID", True


@_register
class InconsistentClusterId(KafkaError):
    code, name, retriable = 104, "INCONSISTENT_CLUSTER_ID", False


@_register
class OffsetMovedToTieredStorage(KafkaError):
    """A follower's fetch below the leader's local log start (KIP-405): those records are in remote storage only,
    so the follower starts its log at the leader's local log start instead of copying them back."""

    code, name, retriable = 109, "OFFSET_MOVED_TO_TIERED_STORAGE", False


@_register
class IneligibleReplica(KafkaError):
    """An AlterPartition whose new ISR names a replica that may not be in it: not registered, fenced, or (version 3)
    at another broker epoch than the registered one (KIP-841, KIP-903)."""

    code, name, retriable = 107, "INELIGIBLE_REPLICA", False


@_register
class UnsupportedEndpointType(KafkaError):
    """DescribeCluster asked for an endpoint type other than brokers (1) or controllers (2) (KIP-919)."""

    code, name, retriable = 115, "UNSUPPORTED_ENDPOINT_TYPE", False


@_register
class TieredStorageDisablementInProgress(KafkaError):
    code, name, retriable = 10950, "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS", False
    hint = "Wait for the topic to reach DISABLED ('tieredctl tiering status NAME') and retry."


@_register
class StaleTieredEpoch(KafkaError):
    code, name, retriable = 10951, "STALE_TIERED_EPOCH", False


@_register
class MetadataLogCorrupt(KafkaError):
    code, name, retriable = 10952, "METADATA_LOG_CORRUPT", False


def as_wire_error(exc: TieredError) -> KafkaError:
    """What a server answers for ``exc``: itself if it has a code; a remote-storage failure is KAFKA_STORAGE_ERROR
    (as a Kafka broker answers for a failing log directory or tier); anything else UNKNOWN_SERVER_ERROR."""
    if isinstance(exc, KafkaError):
        return exc
    detail = f"{exc.name}: {exc.message}"
    if isinstance(exc, RemoteStorageError | MissingCredentialsError):
        return KafkaStorageError(detail)
    return UnknownServerError(detail)
