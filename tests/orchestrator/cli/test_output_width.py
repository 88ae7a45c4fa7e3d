"""Text output off a terminal (a pipe, a file, ``make demo | tee``) is not wrapped at rich's assumed 80 columns: a
path, a command line or a topic id printed for people stays on one line, whole."""

import pytest

from orchestrator.cli.output import Output
from orchestrator.cli.views import ReclaimOutcome, TopicList
from orchestrator.client import TieringStatus
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, TieredState
from policies.reclaim_executor import ReclaimResult

pytestmark = pytest.mark.unit

LONG_PATH = "/var/lib/tieredctl/clusters/production-eu-west-1/" + "very-long-directory-name/" * 4 + "metadata.db"


def _lines(capsys) -> list[str]:
    captured = capsys.readouterr()
    return captured.out.splitlines()


def test_a_path_in_the_reclaim_result_is_never_broken(capsys):
    result = ReclaimResult(
        executed=False,
        bucket="tiered-storage",
        older_than_ms=0,
        metadata_source=f"store {LONG_PATH}",
        planned_objects=0,
        planned_bytes=0,
        planned_by_category={},
        planned_by_topic={},
    )
    Output("text").show(ReclaimOutcome(result))
    lines = _lines(capsys)
    assert any(LONG_PATH in line for line in lines), lines
    assert all(len(line) == len(line.rstrip()) for line in lines)  # and nothing padded to a huge width


def test_a_table_wider_than_80_columns_keeps_its_cells_whole(capsys):
    name = "payments.eu-west-1.settlement-events.v2-compacted-with-a-long-name"
    topic_id = Uuid.random()
    status = TieringStatus(
        topic=name,
        topic_id=topic_id,
        state=TieredState.ENABLED,
        tiered_epoch=1,
        policy=DisablePolicy.NONE,
        partition_count=6,
        pending_brokers=(),
    )
    Output("text").show(TopicList([status]))
    row = [line for line in _lines(capsys) if name in line]
    assert len(row) == 1 and str(topic_id) in row[0] and "ENABLED" in row[0]
