"""moto's S3 server as a separate OS process for benches (no GIL shared with the measured code)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from orchestrator.local.cluster import start_embedded_s3, stop_process


@contextlib.contextmanager
def moto_server_process(timeout_s: float = 30.0) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="tieredctl-bench-s3-") as tmp:
        s3 = start_embedded_s3(Path(tmp) / "s3.log", timeout_s=timeout_s)
        try:
            yield f"http://127.0.0.1:{s3.port}"
        finally:
            stop_process(s3, timeout_s=10)
