"""Aiven's expected values, kept as golden files with their source path and commit, and PEM text for key files."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from remote_storage.segment_format import SOURCE_COMMIT, SOURCE_REPOSITORY

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "aiven"
KEY_PAIR_ID = "static-key-id"  # the id Aiven's RsaKeyAwareTest names its key pair with


def load_golden(name: str) -> dict[str, Any]:
    """One golden file; its header must name Aiven's repository, the commit this library follows and a test file."""
    doc: dict[str, Any] = json.loads((GOLDEN / name).read_text(encoding="utf-8"))
    for source in (doc["source"], *([doc["builderSource"]] if "builderSource" in doc else [])):
        assert source["repository"] == SOURCE_REPOSITORY
        assert source["commit"] == SOURCE_COMMIT
        assert source["path"].startswith("core/src/test/java/io/aiven/kafka/tieredstorage/")
    return doc


def pem(label: str, der: bytes) -> bytes:
    """A PEM block with any label: Aiven's key reader takes the first block whatever its label."""
    body = base64.b64encode(der).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""]).encode()
