"""The id of a broker's log directory (Kafka's ``directory.id`` in ``meta.properties``, KIP-858), so that the
controller can tell a disk replaced by an empty one from the disk the broker registered with before.

:func:`load_or_create` reads ``<data_dir>/meta.properties`` and returns its ``directory.id``; a data directory
without the file (a new disk, or one written before the file existed) gets a new random id, written atomically
(a temporary file, synced, renamed). The broker sends the id in its registration (BrokerRegistration's
``LogDirs``), and the controller, finding it differs from the broker's previous registration, knows that the broker
holds none of what it held (:mod:`orchestrator.controller.membership`).

Invariants: an existing file is never rewritten; one that is unreadable or lacks a valid id refuses the start with
KAFKA_STORAGE_ERROR naming the file (guessing a new id would tell the controller that a disk holding data is empty);
a device failure reading or writing it (EIO, EROFS, ENOSPC: ``log_dir_failure.is_device_failure``) is raised as the
OSError it is, for the broker to halt as for any failed log directory.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.broker.durable_files import replace_durably
from orchestrator.broker.log_dir_failure import is_device_failure
from orchestrator.errors import InvalidRequest, KafkaStorageError
from orchestrator.ids import Uuid

META_PROPERTIES = "meta.properties"
DIRECTORY_ID = "directory.id"


def load_or_create(data_dir: Path, *, broker_id: int, cluster_id: str) -> tuple[Uuid, bool]:
    """The directory's id and whether it was created now (the directory had no ``meta.properties``)."""
    path = data_dir / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _create(path, broker_id=broker_id, cluster_id=cluster_id), True
    except OSError as exc:
        if is_device_failure(exc):
            raise  # the disk, not the file: the caller halts the broker as for any failed log directory
        raise KafkaStorageError(f"{path}: cannot be read ({exc}); restore it or move the directory aside") from exc
    except UnicodeDecodeError as exc:
        raise KafkaStorageError(f"{path}: cannot be read ({exc}); restore it or move the directory aside") from exc
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.lstrip().startswith("#"))
    value = props.get(DIRECTORY_ID, "").strip()
    try:
        return Uuid.from_string(value), False
    except (ValueError, InvalidRequest) as exc:
        raise KafkaStorageError(
            f"{path}: {DIRECTORY_ID} is {value!r}, not a Kafka UUID; restore the file or move the directory aside"
        ) from exc


def _create(path: Path, *, broker_id: int, cluster_id: str) -> Uuid:
    directory_id = Uuid.random()
    text = f"version=1\nnode.id={broker_id}\ncluster.id={cluster_id}\n{DIRECTORY_ID}={directory_id}\n"
    try:
        replace_durably(path, text.encode())
    except OSError as exc:
        if is_device_failure(exc):
            raise
        raise KafkaStorageError(f"{path}: cannot be written ({exc})") from exc
    return directory_id
