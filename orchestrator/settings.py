"""Process settings: frozen dataclasses in groups, with commented defaults, read from TOML at entry points only.

A settings file has one table for the process (``[broker]`` or ``[controller]``) and one table per group the
process nests (``[s3]``, ``[tls]``, ``[security]``, ``[metrics]``, ``[remote_log_metadata]``; a broker also
``[rsm]``; a controller also ``[membership]``, ``[topic_defaults]``, ``[disablement]``, ``[snapshots]``). A group is
one dataclass, held by the process settings as a field of the same name, and handed whole to the part that uses it
(the controller core gets ``membership``, ``topic_defaults``, ``disablement`` and ``remote_log_metadata``), never
copied field by field. ``[store]`` says how the ``metadata_store`` is reached (PostgreSQL's password file, schema,
timeouts).

A broker's ``[rsm]`` says how its RemoteStorageManager writes and reads a segment's objects (Aiven's format: chunk
size, compression, encryption and its key pairs, custom metadata, the chunk cache); the key files it names are read
by the broker's entry point (``orchestrator/broker/remote_storage_setup.py``), which refuses a missing or unreadable
one by name, never here and never logged.

A process that listens on an address other than loopback without authentication (neither SASL mechanisms nor
required client certificates) is refused at load time unless ``[security] allow_insecure = true``: anyone who
can reach such a port can delete topics.

Unknown tables or keys, and values of the wrong type, are refused with :class:`SettingsError` naming the file,
the table and the key (and for a type, the one expected and the one given), so a typo never silently falls back to
a default. Types are checked against each field's real type (its annotation resolved), the way TOML writes them:
an integer is never taken for a boolean nor a boolean for a number, an integer is taken where a float is expected
(TOML writes ``30`` for 30.0) and held as a float, an array is held as a tuple. Paths are resolved relative to the
file's directory; a ``metadata_store`` that is a URL (``postgresql://...``) is kept as written, never taken for a
path.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.errors import SettingsError

DEFAULT_CLUSTER_ID = "tieredctl"
_PATH_KEYS = frozenset(
    {
        "data_dir",
        "metadata_store",
        "ready_file",
        "certfile",
        "keyfile",
        "cafile",
        "client_cafile",
        "password_file",
        "sasl_password_file",
    }
)
# Keys whose value is a list of [name, path, path...] entries: the paths are resolved like a path key's.
_PATH_LIST_KEYS = frozenset({"encryption_key_pairs"})
# A value of a path key that starts with a URL scheme (``postgresql://``, ``sqlite:///``) is a URL, kept as written.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


LATE_WRITE_READ_TIMEOUTS = 5


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str | None = None  # None = AWS S3; set for MinIO, Ceph or moto's server
    bucket: str = "tiered-storage"
    prefix: str = "tiered/"  # every object key starts with this
    region: str = "us-east-1"
    # The S3 client's bounds on one request: a paused or silent endpoint ends each request in an error within them,
    # which the retry layer (remote_storage.retry) retries a bounded number of times and the caller then records.
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    # How many times one S3 call is tried in all (remote_storage.retry: the first try and its retries, with
    # exponential backoff and full jitter between them) before its caller records the error: 8, the retry
    # layer's own default. Fewer ends a call against a hung endpoint sooner (each try waits out the timeouts).
    max_attempts: int = 8

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise SettingsError(f"[s3] max_attempts must be >= 1, got {self.max_attempts}")

    @property
    def late_write_window_ms(self) -> int:
        """How long after its writer gave up a PUT may still land (held in the store's front end): five read
        timeouts, as assumed by the deletions that must leave nothing behind (remote_storage.deletion)."""
        return int(LATE_WRITE_READ_TIMEOUTS * self.read_timeout_s * 1000)


# Aiven's RemoteStorageManagerConfig bounds chunk.size to [1, Integer.MAX_VALUE / 2]
# (remote_storage.segment_format.transform.MAX_CHUNK_SIZE, which this layer cannot import).
MAX_CHUNK_SIZE = (2**31 - 1) // 2
CUSTOM_METADATA_FIELDS = ("REMOTE_SIZE", "OBJECT_PREFIX", "OBJECT_KEY")  # Aiven's SegmentCustomMetadataField


@dataclass(frozen=True)
class RemoteStorageManagerSettings:
    """How a broker writes segments to remote storage and reads them back, in Aiven's format. Each setting is one of
    Aiven's ``rsm.config.*`` (named beside it); both transforms are off by default, as in Aiven."""

    # chunk.size: the .log is stored in chunks of this many bytes, each compressed/encrypted on its own and the unit
    # of a range read. 4 MiB, where Aiven says to start: a ~1 MiB fetch reads at most two chunks (8 MiB); smaller
    # chunks cost more per byte (a zstd frame, an IV and tag, a manifest entry, a GET each).
    chunk_size: int = 4 * 1024 * 1024
    compression_enabled: bool = False  # compression.enabled: zstd each chunk (level 3)
    encryption_enabled: bool = False  # encryption.enabled: AES-256-GCM each chunk and index, RSA-wrapped data keys
    encryption_key_pair_id: str | None = None  # encryption.key.pair.id: the pair new data keys are wrapped with
    # encryption.key.pairs with their encryption.key.pairs.<id>.public.key.file / .private.key.file: one entry per key
    # pair, [id, public key PEM file, private key PEM file]. Keep retired pairs here: their segments stay readable.
    # Key pairs given with encryption off are used to read what was written encrypted.
    encryption_key_pairs: tuple[tuple[str, str, str], ...] = ()
    # custom.metadata.fields.include: which of REMOTE_SIZE, OBJECT_PREFIX, OBJECT_KEY the COPY_SEGMENT_FINISHED record
    # carries (none by default: no custom metadata)
    custom_metadata_fields_include: tuple[str, ...] = ()
    # Bytes of detransformed chunks and indexes kept in memory for the next reads (LRU); 0 keeps none. Ours: Aiven's
    # fetch.chunk.cache.size belongs to a cache of another design.
    chunk_cache_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 1 <= self.chunk_size <= MAX_CHUNK_SIZE:
            raise SettingsError(
                f"[rsm] chunk_size must be in [1, {MAX_CHUNK_SIZE}] (Aiven's bounds), got {self.chunk_size}"
            )
        if self.chunk_cache_bytes < 0:
            raise SettingsError(f"[rsm] chunk_cache_bytes must be >= 0, got {self.chunk_cache_bytes}")
        unknown = [f for f in self.custom_metadata_fields_include if f not in CUSTOM_METADATA_FIELDS]
        if unknown:
            raise SettingsError(
                f"[rsm] custom_metadata_fields_include: unknown field(s) {unknown}; "
                f"known: {list(CUSTOM_METADATA_FIELDS)}"
            )
        ids = [pair[0] for pair in self.encryption_key_pairs]
        for key_pair_id in ids:
            if not key_pair_id.strip() or ":" in key_pair_id:
                raise SettingsError(f"[rsm] a key pair id is not blank and holds no ':', got {key_pair_id!r}")
        if len(set(ids)) != len(ids):
            raise SettingsError(f"[rsm] encryption_key_pairs names a key pair twice: {ids}")
        if self.encryption_enabled and self.encryption_key_pair_id is None:
            raise SettingsError("[rsm] encryption_enabled needs encryption_key_pair_id and encryption_key_pairs")
        if self.encryption_key_pair_id is not None and self.encryption_key_pair_id not in ids:
            raise SettingsError(
                f"[rsm] encryption_key_pair_id {self.encryption_key_pair_id!r} is not in encryption_key_pairs {ids}"
            )


@dataclass(frozen=True)
class TlsSettings:
    certfile: str | None = None  # this process's certificate (PEM)
    keyfile: str | None = None
    cafile: str | None = None  # CA that signs the peers' certificates
    # Servers: refuse clients without a certificate signed by cafile. Without it, a server with a cafile still asks
    # for a certificate and, when one is sent, verifies it and takes its principal (User:<CN>) from it.
    require_client_cert: bool = False

    @property
    def enabled(self) -> bool:
        return self.certfile is not None or self.cafile is not None


@dataclass(frozen=True)
class SecuritySettings:
    """Who may use this process's port and what they may do there, and how the process proves who it is to the
    others. Principals are Kafka's: ``User:<name>``, from a SASL/SCRAM login or a client certificate's CN."""

    # SCRAM mechanisms offered to clients (Kafka's sasl.enabled.mechanisms): SCRAM-SHA-256, SCRAM-SHA-512. Empty: no
    # SASL. With SASL on, a connection that has no verified client certificate must log in before any other request.
    sasl_mechanisms: tuple[str, ...] = ()
    authorizer: bool = False  # check every request against the ACLs of the metadata log (denied when none allows)
    super_users: tuple[str, ...] = ()  # principals the authorizer allows everything (Kafka's super.users)
    # The principals of the cluster's own controllers and brokers: only they may register, heartbeat, forward
    # requests (Envelope) and send DisableRemoteTopic / DeleteRemotePartitions. Empty: not checked (no auth).
    cluster_principals: tuple[str, ...] = ()
    allow_insecure: bool = False  # listen on a non-loopback address without authentication (see the module docstring)
    # How this process logs in to the others when they require SASL (its TLS client certificate is [tls] certfile).
    sasl_mechanism: str = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password_file: str | None = None  # one line; never logged

    def __post_init__(self) -> None:
        for mechanism in (*self.sasl_mechanisms, self.sasl_mechanism):
            if mechanism not in SCRAM_MECHANISMS:
                raise SettingsError(
                    f"[security] SASL mechanism {mechanism!r} is not served; use {list(SCRAM_MECHANISMS)}"
                )
        for principal in (*self.super_users, *self.cluster_principals):
            if not principal.startswith("User:") or principal == "User:":
                raise SettingsError(f"[security] principal {principal!r} is not User:<name>")
        if (self.sasl_username is None) != (self.sasl_password_file is None):
            raise SettingsError("[security] sasl_username and sasl_password_file go together")


SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_LOOPBACK = re.compile(r"^(127(\.\d{1,3}){3}|::1|localhost)$")


def require_authentication(where: str, host: str, tls: TlsSettings, security: SecuritySettings) -> None:
    """Refuse a listener on a non-loopback ``host`` that authenticates nobody, unless ``allow_insecure`` says so."""
    authenticates = bool(security.sasl_mechanisms) or (tls.enabled and tls.require_client_cert)
    if authenticates or security.allow_insecure or _LOOPBACK.match(host):
        return
    raise SettingsError(
        f"[{where}] listens on {host}, reachable from other hosts, without authentication: anyone who can reach "
        "the port could create and delete topics or disable tiering. Turn on SASL ([security] sasl_mechanisms) or "
        "client certificates ([tls] require_client_cert), or set [security] allow_insecure = true to accept it"
    )


@dataclass(frozen=True)
class StoreSettings:
    """How a process reaches the metadata store its ``metadata_store`` names (a SQLite path or a PostgreSQL URL,
    see :mod:`orchestrator.metadata.open`). Everything but ``password_file`` matters to PostgreSQL only."""

    # A file holding the PostgreSQL password (one line). Without it: $TIEREDCTL_STORE_PASSWORD, else libpq's own
    # sources (PGPASSWORD, ~/.pgpass). Never logged.
    password_file: str | None = None
    schema: str = "tieredctl"  # the store's tables live in this schema of the database
    # Server-side bounds on every connection (the defaults of metadata.postgres.SessionTimeouts): a process paused
    # inside a write holds the store's write lock at most idle_in_transaction_timeout_ms; the others wait at most
    # lock_timeout_ms per attempt and retry.
    statement_timeout_ms: int = 5_000
    lock_timeout_ms: int = 5_000
    idle_in_transaction_timeout_ms: int = 10_000
    connect_timeout_s: int = 10
    # The client's own bound on one store operation: a server that answers nothing this long (paused, a link that
    # drops packets) is taken for gone, and the operation fails, retriable. Above the two bounds above.
    response_timeout_ms: int = 15_000
    # A process starting while the server cannot be reached (restarting, a link down) tries again for this long
    # before it gives up; a refusal (a wrong password, no such database) fails at once. 0: one attempt.
    startup_timeout_ms: int = 60_000


@dataclass(frozen=True)
class BrokerMembership:
    """How the controller treats brokers: who may register, when one is fenced, where leadership goes back."""

    cluster_id: str = DEFAULT_CLUSTER_ID  # brokers formatted for another cluster are refused (INCONSISTENT_CLUSTER_ID)
    session_timeout_ms: int = 6_000  # a broker with no heartbeat for this long is fenced
    # A preferred (first) replica that is in the ISR takes its partitions' leadership back (looked at every tick)
    auto_leader_rebalance: bool = True


@dataclass(frozen=True)
class TopicDefaults:
    """What CreateTopics applies when a request leaves it open (Kafka's num.partitions and friends)."""

    partitions: int = 1  # NumPartitions=-1
    replication_factor: int = 1  # ReplicationFactor=-1
    max_partitions: int = 10_000  # per topic: a larger count is INVALID_PARTITIONS, not a log flooded by mistake


@dataclass(frozen=True)
class DisablementSettings:
    """The controller's retry queue's timings (DisableRemoteTopic and DeleteRemotePartitions alike) and the
    sender's limits."""

    request_timeout_ms: int = 10_000  # an unanswered request counts as timed out after this
    repoll_ms: int = 200  # a broker whose IN_PROGRESS showed progress is asked again after this long; one whose
    # counts did not move, after the retry backoff (at least this long, growing up to retry_backoff_max_ms)
    # The retry backoff (full jitter, orchestrator.backoff): after n attempts without progress in a row a broker is
    # asked again after a random wait of at most retry_backoff_ms * 2**(n-1), and never more than the cap.
    retry_backoff_ms: int = 200
    retry_backoff_max_ms: int = 30_000
    stall_threshold_ms: int = 60_000  # a pending broker without progress for this long is reported stalled
    max_in_flight_per_broker: int = 512  # DisableRemoteTopic requests in flight to one broker at most
    max_topics_per_request: int = 1000  # topics one (version 1) DisableRemoteTopic request carries at most

    def __post_init__(self) -> None:
        if self.max_in_flight_per_broker < 1 or self.max_topics_per_request < 1:
            raise SettingsError(
                "[disablement] max_in_flight_per_broker and max_topics_per_request must be >= 1, got "
                f"{self.max_in_flight_per_broker} and {self.max_topics_per_request}"
            )
        if not 0 < self.retry_backoff_ms <= self.retry_backoff_max_ms:
            raise SettingsError(
                "[disablement] retry_backoff_ms must be > 0 and at most retry_backoff_max_ms, got "
                f"{self.retry_backoff_ms} and {self.retry_backoff_max_ms}"
            )


@dataclass(frozen=True)
class SnapshotSettings:
    """When the active controller snapshots its metadata image, and how much of the log the store keeps.

    Every process starts from the latest snapshot and replays only the log after it; saving a snapshot deletes
    the log's records below the oldest snapshot kept, so the store stays bounded.
    """

    every_records: int = 20_000  # a snapshot once this many records were appended since the last one (0 = never)
    every_ms: int = 3_600_000  # ... and one at least this often while records keep arriving (0 = never by time)
    retained: int = 2  # snapshots kept (>= 1); 2 or more leaves an older one if the newest is ever damaged

    def __post_init__(self) -> None:
        if self.every_records < 0 or self.every_ms < 0 or self.retained < 1:
            raise SettingsError(f"[snapshots] every_records and every_ms must be >= 0 and retained >= 1, got {self}")


@dataclass(frozen=True)
class MetricsSettings:
    """The process's Prometheus endpoint (``/metrics`` over HTTP, or HTTPS with client certificates:
    :mod:`orchestrator.metrics`)."""

    enabled: bool = True
    # The endpoint shows topic names: loopback unless scraped from another host, and then with client_cafile.
    host: str = "127.0.0.1"
    port: int = 0  # 0 = pick a free port (written to ready_file as "metrics_port")
    certfile: str | None = None  # serve HTTPS with this certificate (PEM) and keyfile; None: plain HTTP
    keyfile: str | None = None
    # Require a client certificate signed by this CA (mutual TLS, which a Prometheus scrape_config's tls_config
    # presents); a scrape without one is refused during the handshake. Needs certfile.
    client_cafile: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"[metrics] port must be 0..65535, got {self.port}")
        if (self.certfile is None) != (self.keyfile is None):
            raise SettingsError("[metrics] certfile and keyfile go together")
        if self.client_cafile is not None and self.certfile is None:
            raise SettingsError("[metrics] client_cafile needs certfile and keyfile: client certificates need TLS")


RLMM_RECORD_VERSIONS = (0, 1)  # the versions of Kafka's remote log metadata records this build writes


@dataclass(frozen=True)
class RemoteLogMetadataTopicSettings:
    """Kafka's ``__remote_log_metadata`` topic as this cluster lays it out and fills it (``[remote_log_metadata]``,
    read by controllers and brokers alike; the layout and why version 0: ``remote_storage/rlmm_topic/layout.py``).
    The active controller creates the topic; each broker publishes the store's RLMM records to the partitions of it
    that it leads (``orchestrator/broker/rlmm_publisher.py``)."""

    # Kafka's remote.log.metadata.topic.num.partitions default; used when the controller creates the topic. A
    # topic already there keeps its count (records go where Kafka's partitioner puts them for that count).
    partitions: int = 50
    # The version of the records the brokers publish (0 is read by every Kafka release with tiered storage).
    record_version: int = 0
    # Brokers: how often each one publishes the store's new RLMM records to the partitions it leads.
    publish_interval_ms: int = 200
    # Controller: the topic is created once the set of live brokers has stayed the same this long, so that a
    # cluster whose brokers register one by one gets its partitions spread over all of them, not the first one.
    placement_settle_ms: int = 3_000

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= 0x7FFFFFFF:
            raise SettingsError(
                f"[remote_log_metadata] remote log metadata topic partitions must be at least 1, got {self.partitions}"
            )
        if self.record_version not in RLMM_RECORD_VERSIONS:
            raise SettingsError(
                f"[remote_log_metadata] remote log metadata record version must be one of {RLMM_RECORD_VERSIONS}, "
                f"got {self.record_version}"
            )
        if self.publish_interval_ms < 1 or self.placement_settle_ms < 0:
            raise SettingsError(
                "[remote_log_metadata] publish_interval_ms must be >= 1 and placement_settle_ms >= 0, got "
                f"{self.publish_interval_ms} and {self.placement_settle_ms}"
            )


@dataclass(frozen=True)
class BrokerSettings:
    broker_id: int
    data_dir: str  # partition directories live here
    metadata_store: str  # the shared SQLite file's path, or a postgresql:// URL (password not in it: see [store])
    # Kafka-style bootstrap list of the controllers, "host:port,host:port". An entry written "id@host:port" (Kafka's
    # controller.quorum.voters) pins that controller to that address, whatever address it advertises (a NAT, a proxy).
    controllers: str
    host: str = "127.0.0.1"
    port: int = 0  # 0 = pick a free port (written to ready_file)
    # The port the broker registers for others to reach it at (Kafka's advertised.listeners), when something in
    # between relays to the bound one (a NAT, a proxy); 0 = the bound port.
    advertised_port: int = 0
    ready_file: str | None = None  # JSON {"port": ..., "pid": ...} written once serving
    rack: str | None = None
    cluster_id: str = DEFAULT_CLUSTER_ID  # must be the controllers' membership.cluster_id
    heartbeat_interval_ms: int = 500
    metadata_poll_ms: int = 100  # how often the metadata log is tailed (a store that notifies appends: see below)
    # PostgreSQL notifies every append (LISTEN/NOTIFY): the log is read on each notification, and at least this
    # often in case one was missed (a reconnection)
    metadata_notified_poll_ms: int = 2_000
    tiering_interval_ms: int = 500  # how often copy, local retention and remote expiry run
    # A partition whose inputs (log offsets and segments, partition, configs, RLMM entries, high watermark, the epoch
    # its topic was last enabled at) did not change since its last tiering pass is passed again only every this many
    # rounds: what the clock alone makes due on it (a roll by segment.ms, retention by time, and so the local
    # retention of a topic whose tiering was turned off) waits at most that long; 1: every partition every round.
    tiering_idle_rounds: int = 10
    segment_bytes: int = 64 * 1024  # segment.bytes default for partitions of this broker
    segment_ms: int = 10_000  # segment.ms default
    # A partition directory the image no longer has (its topic deleted, or deleted and re-created under the same
    # name) is moved to data_dir/stale/ at once and deleted this long after; -1 keeps them until the operator does.
    stale_dir_retention_ms: int = 24 * 3600 * 1000
    # Registration and heartbeats: one the controller does not answer this soon goes to the next controller of
    # ``controllers``. Keep lease_ttl_ms + this below the controllers' session_timeout_ms, so a frozen controller's
    # brokers reach its successor before it fences them (defaults: 3 s + 2 s < 6 s).
    request_timeout_ms: int = 2_000
    # An upload in flight this long is reported stalled (``tiering status``, with the segment and the object): one
    # S3 request may take the S3 read timeout ([s3] read_timeout_s), so by default no longer than that.
    copy_stall_threshold_ms: int = 30_000
    # A follower that has not caught up with its leader's log this long leaves the partition's ISR (Kafka's
    # replica.lag.time.max.ms); acks=all then waits for the others only.
    replica_lag_time_max_ms: int = 30_000
    # The longest wait before a failing background loop, partition or replica fetch is tried again (the waits
    # double from 0.2 s up to this, with full jitter; orchestrator.supervision).
    loop_retry_max_ms: int = 10_000
    # A DisableRemoteTopic or DeleteRemotePartitions that finds its job running is answered once a job ends, or
    # IN_PROGRESS (with its progress) after this long (0: at once), so the controller hears DONE without waiting
    # for its next poll; keep it well below the controllers' [disablement] request_timeout_ms.
    job_answer_wait_ms: int = 2_000
    s3: S3Settings = field(default_factory=S3Settings)
    rsm: RemoteStorageManagerSettings = field(default_factory=RemoteStorageManagerSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    remote_log_metadata: RemoteLogMetadataTopicSettings = field(default_factory=RemoteLogMetadataTopicSettings)

    def __post_init__(self) -> None:
        if not 0 <= self.advertised_port <= 65535:
            raise SettingsError(f"[broker] advertised_port must be 0..65535, got {self.advertised_port}")
        if self.loop_retry_max_ms < 100:
            raise SettingsError(f"[broker] loop_retry_max_ms must be >= 100, got {self.loop_retry_max_ms}")
        if self.tiering_idle_rounds < 1:
            raise SettingsError(f"[broker] tiering_idle_rounds must be >= 1, got {self.tiering_idle_rounds}")
        if not 0 <= self.job_answer_wait_ms <= 5_000:
            raise SettingsError(f"[broker] job_answer_wait_ms must be 0..5000, got {self.job_answer_wait_ms}")
        require_authentication("broker", self.host, self.tls, self.security)


@dataclass(frozen=True)
class ControllerSettings:
    node_id: int  # distinct from every broker id
    metadata_store: str  # as the brokers': a SQLite path or a postgresql:// URL
    host: str = "127.0.0.1"
    port: int = 0
    ready_file: str | None = None
    lease_ttl_ms: int = 3_000  # a standby takes over this long after the active controller stops renewing
    membership: BrokerMembership = field(default_factory=BrokerMembership)
    topic_defaults: TopicDefaults = field(default_factory=TopicDefaults)
    disablement: DisablementSettings = field(default_factory=DisablementSettings)
    snapshots: SnapshotSettings = field(default_factory=SnapshotSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    remote_log_metadata: RemoteLogMetadataTopicSettings = field(default_factory=RemoteLogMetadataTopicSettings)

    def __post_init__(self) -> None:
        require_authentication("controller", self.host, self.tls, self.security)


T = TypeVar("T")


def _groups(cls: type[Any]) -> dict[str, type[Any]]:
    """The nested settings groups of ``cls``: field name -> dataclass."""
    out: dict[str, type[Any]] = {}
    for f in dataclasses.fields(cls):
        factory = f.default_factory
        if isinstance(factory, type) and dataclasses.is_dataclass(factory):
            out[f.name] = factory
    return out


_NOT_ACCEPTED = object()  # what _accepted answers for a value a field does not take


def _field_types(cls: type[Any]) -> dict[str, Any]:
    """The real type of each field of a settings dataclass (its annotations are text: ``from __future__``)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _accepted(hint: Any, value: Any) -> Any:
    """``value`` as a field of type ``hint`` holds it, or :data:`_NOT_ACCEPTED`. TOML has its own types: an
    integer is not a boolean (nor the other way round), an integer is taken where a float is expected (TOML writes
    ``30`` for 30.0) and becomes one, and an array becomes a tuple."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        for arm in typing.get_args(hint):
            taken = _accepted(arm, value)
            if taken is not _NOT_ACCEPTED:
                return taken
        return _NOT_ACCEPTED
    if origin is tuple:
        if not isinstance(value, list):
            return _NOT_ACCEPTED
        args = typing.get_args(hint)
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        if len(items) != len(value):
            return _NOT_ACCEPTED
        taken_items = tuple(_accepted(item, v) for item, v in zip(items, value, strict=True))
        return _NOT_ACCEPTED if _NOT_ACCEPTED in taken_items else taken_items
    if origin is typing.Literal:
        choices = typing.get_args(hint)
        return value if any(type(value) is type(c) and value == c for c in choices) else _NOT_ACCEPTED
    if hint is float:
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else _NOT_ACCEPTED
    if hint is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NOT_ACCEPTED
    if isinstance(hint, type):
        return value if isinstance(value, hint) else _NOT_ACCEPTED
    raise TypeError(f"a setting annotated {hint!r} cannot be read from TOML")


def _expected(hint: Any) -> str:
    """What a field of type ``hint`` takes, in words (``None`` left out: TOML cannot write it)."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return " or ".join(_expected(arm) for arm in typing.get_args(hint) if arm is not type(None))
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_PLURALS.get(args[0], _expected(args[0]))}"
        return f"a list of {len(args)}: " + ", ".join(_expected(arg) for arg in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(choice) for choice in typing.get_args(hint))
    return _WORDS.get(hint, getattr(hint, "__name__", repr(hint)))


_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_PLURALS = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}
# What TOML wrote, in its own words (tomllib's types: strings, integers, floats, booleans, arrays, tables, dates).
_TOML_WORDS = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array"}


def _given(value: Any) -> str:
    kind = _TOML_WORDS.get(type(value), "a table" if isinstance(value, dict) else f"a {type(value).__name__}")
    return f"{kind} ({value!r})"


def _checked(source: Path, where: str, name: str, hint: Any, value: Any) -> Any:
    """``value`` as the field holds it; :class:`SettingsError` naming the file, table, key, expected and given."""
    taken = _accepted(hint, value)
    if taken is _NOT_ACCEPTED:
        raise SettingsError(f"{source}: [{where}] {name} must be {_expected(hint)}, got {_given(value)}")
    return taken


def _build(cls: type[T], values: Any, where: str, source: Path, nested: dict[str, Any] | None = None) -> T:
    if not isinstance(values, dict):
        raise SettingsError(f"{source}: [{where}] must be a table, got {_given(values)}")
    types_of = _field_types(cls)
    settable = set(types_of) - set(nested or {})
    unknown = sorted(set(values) - settable)
    if unknown:
        raise SettingsError(f"{source}: unknown key(s) {unknown} in [{where}]; known: {sorted(settable)}")
    out: dict[str, Any] = dict(nested or {})
    for name, value in values.items():
        taken = _checked(source, where, name, types_of[name], value)
        is_path = name in _PATH_KEYS and isinstance(taken, str) and taken and not _URL.match(taken)
        out[name] = str((source.parent / taken).resolve()) if is_path else taken
        if name in _PATH_LIST_KEYS:
            out[name] = tuple((entry[0], *(str((source.parent / p).resolve()) for p in entry[1:])) for entry in taken)
    try:
        return cls(**out)
    except TypeError as exc:
        raise SettingsError(f"{source}: [{where}]: {exc}") from exc


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SettingsError(f"settings file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"settings file {path} is not valid TOML: {exc}") from exc


def load_settings(cls: type[T], table: str, path: str | Path) -> T:
    """The ``cls`` settings in the file at ``path``: ``[table]`` plus one table per nested group."""
    source = Path(path)
    doc = _read(source)
    groups = _groups(cls)
    expected = [table, *groups]
    extra = sorted(set(doc) - set(expected))
    if extra or table not in doc:
        tables = ", ".join(f"[{t}]" for t in expected)
        raise SettingsError(f"{path}: expected the tables {tables} ([{table}] is required); got {sorted(doc)}")
    nested = {name: _build(group, doc.get(name, {}), name, source) for name, group in groups.items()}
    return _build(cls, doc[table], table, source, nested)


def load_broker_settings(path: str | Path) -> BrokerSettings:
    return load_settings(BrokerSettings, "broker", path)


def load_controller_settings(path: str | Path) -> ControllerSettings:
    return load_settings(ControllerSettings, "controller", path)
