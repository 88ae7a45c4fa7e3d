"""A broker's RemoteStorageManager, built from its settings at the entry point: the one place key files are read.

``[s3]`` says where the objects go, ``[rsm]`` (:class:`~orchestrator.settings.RemoteStorageManagerSettings`) how
they are made: the chunk size, compression, encryption with its key pairs, the custom metadata fields, the chunk
cache's bound. The key pairs' PEM files are read here, once, when the broker starts: a file that is missing,
unreadable or not an RSA key of the right kind is :class:`~orchestrator.errors.SettingsError` naming the setting,
the key pair and the file, and the broker does not start. Key material never reaches a log line or an error message
(only file names and key pair ids do). ``[s3]``'s endpoint URL and region are checked at start too (the S3 client
itself is built on the broker's first S3 call): one the client could not use refuses the start the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import InvalidArgument, SettingsError
from orchestrator.metrics import RemoteStorageMetrics
from orchestrator.settings import RemoteStorageManagerSettings, S3Settings
from remote_storage.chunk_cache import ChunkCache
from remote_storage.object_format import ObjectFormat
from remote_storage.remote_segments import RemoteSegmentReader
from remote_storage.s3 import S3RemoteStorage, lazy_s3_client
from remote_storage.segment_format.custom_metadata import parse_fields_include
from remote_storage.segment_format.key_ring import KeyRing, RsaKeyPair


def _read_pem(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SettingsError(f"[rsm] {what} file {path} cannot be read: {exc.strerror or exc}") from None


def load_key_ring(settings: RemoteStorageManagerSettings) -> KeyRing | None:
    """The key ring the ``[rsm]`` key pairs make (their files read now), or None when none is configured."""
    if not settings.encryption_key_pairs:
        return None
    pairs = {}
    for key_pair_id, public_file, private_file in settings.encryption_key_pairs:
        public = _read_pem(public_file, f"key pair {key_pair_id!r}: the public key")
        private = _read_pem(private_file, f"key pair {key_pair_id!r}: the private key")
        try:
            pairs[key_pair_id] = RsaKeyPair.from_pem(public, private)
        except InvalidArgument as exc:
            files = f"{public_file}, {private_file}"
            raise SettingsError(f"[rsm] key pair {key_pair_id!r} ({files}): {exc.message}") from None
    active = settings.encryption_key_pair_id or next(iter(pairs))
    return KeyRing(active, pairs)


def object_format(settings: RemoteStorageManagerSettings) -> ObjectFormat:
    """What the ``[rsm]`` settings say a segment's objects are made of (key files read now)."""
    try:
        fields = parse_fields_include(settings.custom_metadata_fields_include)
        return ObjectFormat(
            chunk_size=settings.chunk_size,
            compression=settings.compression_enabled,
            encrypt=settings.encryption_enabled,
            key_ring=load_key_ring(settings),
            custom_metadata_fields=fields,
        )
    except InvalidArgument as exc:
        raise SettingsError(f"[rsm] {exc.message}") from None


@dataclass(frozen=True, slots=True)
class RemoteStorage:
    """The broker's RemoteStorageManager and its range reader (with the chunk cache)."""

    rsm: S3RemoteStorage
    reader: RemoteSegmentReader


def remote_storage(
    s3: S3Settings, rsm: RemoteStorageManagerSettings, *, metrics: RemoteStorageMetrics | None = None
) -> RemoteStorage:
    """The RemoteStorageManager of a broker with these settings: an S3 client (its requests timed in ``metrics``),
    the object format, and a reader with a chunk cache of ``chunk_cache_bytes``. The client is built on first use
    (a broker with no tiered topic never calls S3); an endpoint URL or a region it could not use refuses the start
    (SettingsError naming the ``[s3]`` setting), as a key file does."""
    try:
        client = lazy_s3_client(
            endpoint_url=s3.endpoint_url,
            region=s3.region,
            connect_timeout=s3.connect_timeout_s,
            read_timeout=s3.read_timeout_s,
            metrics=metrics,
        )
    except InvalidArgument as exc:
        raise SettingsError(f"[s3] {exc.message}") from None
    storage = S3RemoteStorage(
        client=client,
        bucket=s3.bucket,
        prefix=s3.prefix,
        metrics=metrics,
        object_format=object_format(rsm),
        late_write_window_ms=s3.late_write_window_ms,
        max_attempts=s3.max_attempts,
    )
    return RemoteStorage(storage, RemoteSegmentReader(storage, ChunkCache(rsm.chunk_cache_bytes, metrics=metrics)))
