"""Every view a command can compute is rendered by both formats, and rendering is a pure function of the view: the
time a pending broker is asked next is told from the ``now_ms`` the view was computed at, not from the clock."""

from __future__ import annotations

import json

import pytest

from orchestrator.cli.output import Output
from orchestrator.cli.render_json import JSON
from orchestrator.cli.render_text import TEXT, Echo, Rich
from orchestrator.cli.views import VIEWS, Message, TieringReport, TieringTimedOut
from orchestrator.client import BrokerProgressView, TieringStatus
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, TieredState

pytestmark = pytest.mark.unit

NOW_MS = 1_700_000_000_000


def _disabling(*pending: BrokerProgressView) -> TieringStatus:
    return TieringStatus(
        topic="orders",
        topic_id=Uuid.random(),
        state=TieredState.DISABLING,
        tiered_epoch=2,
        policy=DisablePolicy.DELETE,
        partition_count=3,
        pending_brokers=pending,
        acknowledged_brokers=1,
    )


def _pending(broker_id: int, *, next_attempt_ms: int, fenced: bool = False) -> BrokerProgressView:
    return BrokerProgressView(
        broker_id=broker_id,
        attempts=3,
        last_error="KAFKA_STORAGE_ERROR: s3 unreachable",
        last_attempt_ms=NOW_MS - 1000,
        fenced=fenced,
        stalled=False,
        next_attempt_ms=next_attempt_ms,
        attempts_without_progress=2,
    )


def test_both_formats_render_every_kind_of_view_and_nothing_else():
    assert TEXT.view_types == JSON.view_types == frozenset(VIEWS)


def test_a_view_of_a_type_no_format_knows_is_refused_by_name():
    class Unknown:
        pass

    with pytest.raises(TypeError, match="no text rendering of Unknown"):
        TEXT.render(Unknown())  # type: ignore[arg-type]


def test_a_pending_brokers_next_attempt_is_told_from_the_time_the_view_was_computed():
    status = _disabling(
        _pending(2, next_attempt_ms=NOW_MS + 2500),
        _pending(3, next_attempt_ms=NOW_MS - 10),
        _pending(4, next_attempt_ms=-1),
        _pending(5, next_attempt_ms=-1, fenced=True),
    )
    lines = [p.text for p in TEXT.render(TieringReport([status], [], now_ms=NOW_MS)) if isinstance(p, Echo)]
    tried = "3 attempts (2 in a row without progress)"
    error = "; last error: KAFKA_STORAGE_ERROR: s3 unreachable"
    assert lines == [
        f"orders: broker 2 pending: {tried}, next attempt in 2.5s{error}",
        f"orders: broker 3 pending: {tried}, next attempt due now{error}",
        f"orders: broker 4 pending: {tried}, a request is in flight{error}",
        f"orders: broker 5 pending: {tried}, fenced: asked again once unfenced{error}",
    ]


def test_a_wait_that_timed_out_shows_where_the_topic_stands_on_stderr_in_text_and_on_stdout_in_json(capsys):
    view = TieringTimedOut(_disabling(_pending(2, next_attempt_ms=NOW_MS + 1000)), now_ms=NOW_MS)
    assert all(isinstance(p, Echo | Rich) and p.err for p in TEXT.render(view))
    Output("text").show(view)
    text = capsys.readouterr()
    assert text.out == "" and "orders: broker 2 pending: 3 attempts" in text.err
    Output("json").show(view)
    as_json = capsys.readouterr()
    assert as_json.err == "" and json.loads(as_json.out)["pending_brokers"][0]["broker_id"] == 2


def test_json_is_one_document_never_wrapped_whatever_its_width(capsys):
    long_value = "x" * 500
    Output("json").show(Message({"key": long_value}, "ignored in json"))
    out = capsys.readouterr().out
    assert json.loads(out) == {"key": long_value} and f'"key": "{long_value}"' in out


def test_an_unknown_output_format_is_refused():
    with pytest.raises(ValueError, match="no output format 'yaml'"):
        Output("yaml")
