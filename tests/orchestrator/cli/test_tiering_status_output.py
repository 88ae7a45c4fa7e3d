"""``tiering status`` in text: a table of the topics, "no topics" when there is none at all, and a deleted topic
whose remote data is still being removed as its own line even when no topic is left."""

from __future__ import annotations

import pytest

from orchestrator.cli.output import Output
from orchestrator.cli.views import TieringReport
from orchestrator.client import RemoteDeletionStatus
from orchestrator.ids import Uuid

pytestmark = pytest.mark.unit


def test_no_topic_and_nothing_being_deleted_says_no_topics(capsys):
    Output("text").show(TieringReport([], [], now_ms=0))
    assert capsys.readouterr().out.strip() == "no topics"


def test_a_deleted_topic_still_being_removed_is_shown_when_no_topic_is_left(capsys):
    deletion = RemoteDeletionStatus("clicks", Uuid.random(), (0, 2), 5, 1234, ())
    Output("text").show(TieringReport([], [deletion], now_ms=0))
    out = capsys.readouterr().out
    assert "no topics" not in out
    assert "clicks" in out and "DELETED, remote data still being deleted: 5 remote segments (1234 bytes)" in out
    assert "no live broker to delete it" in out
