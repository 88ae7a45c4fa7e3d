"""Where an inventory's files live, a local directory tree or an S3 bucket, and how they are read from there.

A location is named by the manifest's URI: a local ``manifest.json`` or the directory holding it, or
``s3://bucket/.../manifest.json`` (a key ending in ``/`` names the ``manifest.json`` under it). A data file's
``key`` is relative to the destination bucket's root; for a local inventory it is resolved against the manifest's
directory and then each of its ancestors (a local directory mirrors the destination bucket), so both a flat
``dest/{manifest.json,data/...}`` and AWS's ``<prefix>/<bucket>/<config>/<date>/manifest.json`` layout are found.

Invariants:
* A local data file key is relative and never climbs (no ``..``, not absolute); a key found under no ancestor,
  like an ``s3://`` one that is not found, raises :class:`~.manifest.InventoryError` naming the file.
* :meth:`Location.open_verified` and :meth:`Location.download_verified` hand out only a file whose MD5 is the one
  the manifest lists. An ``s3://`` data file is spooled to a temporary file (hashed as it streams), never held in
  memory.
* A failed S3 call raises :class:`~.manifest.InventoryError` naming the object, or
  :class:`~orchestrator.errors.MissingCredentialsError` when there were no credentials to sign it with
  (:func:`s3_failure`).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import botocore.exceptions as bce

from orchestrator.errors import MissingCredentialsError
from remote_storage.inventory.manifest import (
    CHECKSUM_NAME,
    MANIFEST_NAME,
    READ_CHUNK_BYTES,
    DataFile,
    InventoryError,
    check_md5,
    md5_file,
)
from remote_storage.retry import is_missing_credentials, is_not_found

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/key`` -> ``("bucket", "some/key")``."""
    if not uri.startswith("s3://"):
        raise InventoryError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket:
        raise InventoryError(f"{uri!r} names no bucket")
    return bucket, key


def s3_failure(message: str, exc: Exception) -> InventoryError | MissingCredentialsError:
    """The error for an S3 call of the inventory that failed: missing credentials are said as such."""
    if is_missing_credentials(exc):
        return MissingCredentialsError(f"{message}: {exc}")
    return InventoryError(f"{message}: {exc}")


class Location:
    """Where an inventory's files live: a local directory tree or an S3 bucket."""

    def __init__(self, uri: str, s3_client: S3Client | None) -> None:
        self.uri = uri
        self._client = s3_client
        if uri.startswith("s3://"):
            if s3_client is None:
                raise InventoryError(f"reading {uri} needs an S3 client")
            self.bucket, key = split_s3_uri(uri)
            if not key or key.endswith("/"):
                key = f"{key}{MANIFEST_NAME}"
            self.manifest_key = key
            self.local_manifest: Path | None = None
        else:
            path = Path(uri)
            self.local_manifest = path / MANIFEST_NAME if path.is_dir() else path
            self.bucket, self.manifest_key = "", ""

    @property
    def is_s3(self) -> bool:
        return self.local_manifest is None

    @property
    def client(self) -> S3Client:
        assert self._client is not None
        return self._client

    def manifest_name(self) -> str:
        return f"s3://{self.bucket}/{self.manifest_key}" if self.is_s3 else str(self.local_manifest)

    def read_manifest_bytes(self) -> bytes:
        if self.local_manifest is not None:
            try:
                return self.local_manifest.read_bytes()
            except OSError as exc:
                raise InventoryError(f"cannot read inventory manifest {self.local_manifest}: {exc}") from exc
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=self.manifest_key)["Body"].read()
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise s3_failure(f"cannot read inventory manifest {self.manifest_name()}", exc) from exc
        return body

    def read_checksum_bytes(self) -> bytes | None:
        """The ``manifest.checksum`` beside the manifest, or None when there is none."""
        if self.local_manifest is not None:
            path = self.local_manifest.with_name(CHECKSUM_NAME)
            try:
                return path.read_bytes()
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise InventoryError(f"cannot read inventory checksum {path}: {exc}") from exc
        key = f"{self.manifest_key.rpartition('/')[0]}/{CHECKSUM_NAME}".lstrip("/")
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except (bce.ClientError, bce.BotoCoreError) as exc:
            if is_not_found(exc):
                return None
            raise s3_failure(f"cannot read inventory checksum s3://{self.bucket}/{key}", exc) from exc
        return body

    def resolve_local(self, key: str) -> Path:
        assert self.local_manifest is not None
        rel = PurePosixPath(key)
        if rel.is_absolute() or ".." in rel.parts:
            raise InventoryError(f"inventory data file key {key!r} is not a relative key")
        base = self.local_manifest.parent.resolve()
        for d in (base, *base.parents):
            candidate = d.joinpath(*rel.parts)
            if candidate.is_file():
                return candidate
        raise InventoryError(f"inventory data file {key} is missing (looked under {base} and its parents)")

    def stat(self, f: DataFile) -> int:
        """The data file's size; InventoryError naming it when it is missing."""
        if not self.is_s3:
            return self.resolve_local(f.key).stat().st_size
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=f.key)
        except (bce.ClientError, bce.BotoCoreError) as exc:
            if is_not_found(exc):
                raise InventoryError(f"inventory data file s3://{self.bucket}/{f.key} is missing") from exc
            raise s3_failure(f"cannot reach inventory data file s3://{self.bucket}/{f.key}", exc) from exc
        return int(head["ContentLength"])

    def download_verified(self, f: DataFile, path: Path) -> None:
        """Spool an ``s3://`` data file to ``path``, checking its MD5 against the manifest as it streams."""
        digest = hashlib.md5(usedforsecurity=False)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=f.key)["Body"]
            with path.open("wb") as out:
                for chunk in iter(lambda: body.read(READ_CHUNK_BYTES), b""):
                    digest.update(chunk)
                    out.write(chunk)
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise s3_failure(f"cannot read inventory data file s3://{self.bucket}/{f.key}", exc) from exc
        check_md5(f, digest.hexdigest(), f"s3://{self.bucket}/{f.key}")

    @contextmanager
    def open_verified(self, f: DataFile) -> Iterator[Path]:
        """A local path of the data file whose MD5 was just checked against the manifest."""
        if not self.is_s3:
            path = self.resolve_local(f.key)
            check_md5(f, md5_file(path), str(path))
            yield path
            return
        with tempfile.TemporaryDirectory(prefix="inventory-") as tmp:
            path = Path(tmp) / "data"
            self.download_verified(f, path)
            yield path

    def md5(self, f: DataFile) -> str:
        if not self.is_s3:
            return md5_file(self.resolve_local(f.key))
        digest = hashlib.md5(usedforsecurity=False)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=f.key)["Body"]
            for chunk in iter(lambda: body.read(READ_CHUNK_BYTES), b""):
                digest.update(chunk)
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise s3_failure(f"cannot read inventory data file s3://{self.bucket}/{f.key}", exc) from exc
        return digest.hexdigest()

    def display(self, f: DataFile) -> str:
        return f"s3://{self.bucket}/{f.key}" if self.is_s3 else f.key
