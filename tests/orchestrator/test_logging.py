import io
import json

import pytest
import structlog

from orchestrator.logging import configure_logging

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _reset():
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def test_services_log_json_lines_with_request_context_bound():
    out = io.StringIO()
    configure_logging("service", stream=out)
    log = structlog.get_logger("t")
    with structlog.contextvars.bound_contextvars(topic_id="abc", tiered_epoch=4, broker_id=2):
        log.info("disable.ack", attempts=1)
    log.info("outside")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["event"] == "disable.ack" and first["topic_id"] == "abc" and first["tiered_epoch"] == 4
    assert first["broker_id"] == 2 and first["level"] == "info" and "timestamp" in first
    assert "topic_id" not in second


def test_credentials_never_reach_a_log_line():
    out = io.StringIO()
    configure_logging("service", stream=out)
    structlog.get_logger().info("s3.client", aws_secret_access_key="SECRET1", session_token="SECRET2", endpoint="x")
    line = out.getvalue()
    assert "SECRET1" not in line and "SECRET2" not in line and '"endpoint": "x"' in line


def test_the_cli_logs_readable_lines():
    out = io.StringIO()
    configure_logging("cli", stream=out)
    structlog.get_logger().warning("scan.slow", rows=5)
    text = out.getvalue()
    assert "scan.slow" in text and "rows=5" in text and not text.startswith("{")


def test_the_cli_renders_an_exception_as_a_plain_traceback_whatever_is_installed():
    out = io.StringIO()
    configure_logging("cli", stream=out)
    try:
        raise ValueError("bad offset 7")
    except ValueError:
        structlog.get_logger().exception("scan.failed")
    text = out.getvalue()
    assert "Traceback (most recent call last):" in text and "ValueError: bad offset 7" in text
    assert "╭" not in text  # rich's boxed traceback
