"""KIP-516 identifiers and Kafka's topic-name rules.

A :class:`Uuid` is 16 bytes; its string form is URL-safe base64 without padding (22 characters), the form
Kafka prints and the form used in object keys. Two values are reserved and never handed out as topic ids:
:data:`ZERO_UUID` (the null id, "no topic id") and :data:`METADATA_TOPIC_ID` (the sentinel id of the
cluster metadata topic, Kafka's ``Uuid.ONE_UUID``). Like Kafka, :meth:`Uuid.random` also never returns an id
whose string form starts with ``-``, so an id can always be passed as a command-line argument.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.errors import InvalidRequest, InvalidTopic

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


@dataclass(frozen=True, slots=True, order=True)
class Uuid:
    """A KIP-516 id: 16 raw bytes. Build with :meth:`random`, :meth:`from_string` or :meth:`from_bytes`."""

    raw: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.raw, bytes) or len(self.raw) != 16:
            raise InvalidRequest(f"a uuid is 16 bytes, got {self.raw!r}")

    @classmethod
    def random(cls, randbytes: Callable[[int], bytes] = os.urandom) -> Uuid:
        """A version-4 UUID that is neither reserved nor printed with a leading '-'."""
        while True:
            raw = bytearray(randbytes(16))
            raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
            raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
            candidate = cls(bytes(raw))
            if not candidate.is_reserved and not str(candidate).startswith("-"):
                return candidate

    @classmethod
    def from_bytes(cls, raw: bytes) -> Uuid:
        return cls(bytes(raw))

    @classmethod
    def from_string(cls, text: str) -> Uuid:
        """Parse the 22-character URL-safe base64 form; raise :class:`InvalidRequest` naming the input."""
        if not isinstance(text, str) or len(text) != 22 or not re.fullmatch(r"[A-Za-z0-9_-]{22}", text):
            raise InvalidRequest(
                f"'{text}' is not a topic id: expected 22 characters of URL-safe base64 (e.g. 'xX9kP3q1T0uC5cZx2o8y1w')"
            )
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (
            binascii.Error,
            ValueError,
        ) as exc:  # pragma: no cover - the regex admits only valid alphabets
            raise InvalidRequest(f"'{text}' is not valid base64: {exc}") from exc
        if base64.urlsafe_b64encode(raw).decode().rstrip("=") != text:
            # The last character carries 4 unused bits; a non-canonical string would alias another id.
            raise InvalidRequest(f"'{text}' is not a canonical topic id (its trailing bits are not zero)")
        return cls(raw)

    @classmethod
    def from_uuid(cls, value: uuid.UUID) -> Uuid:
        return cls(value.bytes)

    def to_uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.raw)

    @property
    def is_zero(self) -> bool:
        return self.raw == bytes(16)

    @property
    def is_reserved(self) -> bool:
        return self in (ZERO_UUID, METADATA_TOPIC_ID)

    def __hash__(self) -> int:  # hot: ids key every map of the image and the queue
        return hash(self.raw)

    def __str__(self) -> str:
        return base64.urlsafe_b64encode(self.raw).decode().rstrip("=")

    def __repr__(self) -> str:
        return f"Uuid('{self}')"


ZERO_UUID = Uuid(bytes(16))
METADATA_TOPIC_ID = Uuid(bytes(15) + b"\x01")

TopicId = Uuid


def validate_topic_name(name: str) -> str:
    """Return ``name`` if Kafka accepts it as a topic name, else raise :class:`InvalidTopic` saying why."""
    if not isinstance(name, str) or not name:
        raise InvalidTopic("the topic name is empty")
    if name in (".", ".."):
        raise InvalidTopic(f"the topic name cannot be '{name}'")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopic(f"the topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL_TOPIC.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL_TOPIC.fullmatch(c)})
        raise InvalidTopic(f"the topic name '{name}' contains illegal characters {bad!r}")
    return name


def topic_names_collide(a: str, b: str) -> bool:
    """Kafka refuses two topics whose names differ only by '.' versus '_' (metric names would collide)."""
    return a != b and a.replace(".", "_") == b.replace(".", "_")
