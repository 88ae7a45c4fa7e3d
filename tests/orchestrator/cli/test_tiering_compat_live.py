"""``tiering disable|enable|status --compat kafka`` on our own cluster (real processes; moto's S3 behind the fault
proxy): the commands send only Kafka's configs and follow progress in ``__remote_log_metadata``, as they would on a
stock Kafka cluster; our controller takes those configs as the aliases of its own disablement.

The S3 run: deletes of one partition's objects fail (the proxy answers InternalError to any DeleteObject or
DeleteObjects naming one, until told otherwise), so that
partition's segments stay DELETE_SEGMENT_STARTED while the other's finish; ``--wait`` says the deletion stopped
moving, lists what remains per partition, names the scan and reclaim, and exits 4. Once S3 answers again our
brokers (unlike Kafka's) retry, and a second ``--wait`` sees the topic DISABLED."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from chaos.s3_proxy import S3FaultProxy, error_body
from orchestrator.client.kafka_tiering import speaks_tiered_apis
from remote_storage.s3 import make_s3_client
from tests.support.live_cluster import S3_OUTAGE_TIMINGS, LiveCluster
from tests.test_docs import README

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

BUCKET = "compat-live"
TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0", "segment.bytes": "4096"}


class DeleteFailingProxy(S3FaultProxy):
    """The fault proxy, also failing every delete whose path or body names ``failing`` (a key part), with S3's
    InternalError: a DeleteObjects carries its keys in its body, where the proxy's rules do not look."""

    failing: bytes | None = None

    def _forward(self, method: str, path: str, headers: Any, body: bytes) -> Any:
        marker = self.failing
        if marker is not None and method in ("DELETE", "POST") and (marker in body or marker in path.encode()):
            return (
                500,
                "Internal Server Error",
                [("Content-Type", "application/xml")],
                error_body("InternalError", "We encountered an internal error. Please try again.", "COMPAT0TEST"),
            )
        return super()._forward(method, path, headers, body)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: str) -> Iterator[tuple[LiveCluster, Any]]:
    make_s3_client(endpoint_url=moto_endpoint).create_bucket(Bucket=BUCKET)
    proxy = DeleteFailingProxy(moto_endpoint, seed=3)
    live = LiveCluster(
        tmp_path_factory.mktemp("compat") / "cluster",
        brokers=2,
        controllers=1,
        s3_endpoint=proxy.url,
        bucket=BUCKET,
        broker_overrides=S3_OUTAGE_TIMINGS,
    )
    try:
        yield live, proxy
    finally:
        live.close()
        proxy.close()


def tieredctl(live: LiveCluster, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIEREDCTL_BOOTSTRAP_SERVER": live.bootstrap}
    command = [sys.executable, "-m", "orchestrator.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


def jsonout(live: LiveCluster, *args: str, check: int = 0) -> Any:
    proc = tieredctl(live, "--output", "json", *args)
    assert proc.returncode == check, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return json.loads(proc.stdout)


def tiered_topic(live: LiveCluster, name: str, *, partitions: int = 1, segments: int = 3) -> Any:
    """A tiered topic with at least ``segments`` segments copied (every partition's settled) and published to
    ``__remote_log_metadata``, which ``--compat kafka`` reads; its id."""
    return tiered_topics(live, name, partitions=partitions, segments=segments)[0]


def tiered_topics(live: LiveCluster, *names: str, partitions: int = 1, segments: int = 3) -> list[Any]:
    """:func:`tiered_topic` of each of ``names``, all written before the waits (their copies go on side by side);
    their ids."""

    async def write(c: Any) -> None:
        for name in names:
            await c.create_topic(name, partitions=partitions, configs=TIERED)
            for p in range(partitions):
                await c.produce(name, [f"{p}:{i}:".encode() + b"x" * 200 for i in range(120)], partition=p)

    live.call(write)
    tids = [live.status(name).topic_id for name in names]
    for tid in tids:
        live.wait_tiering_settled(tid, segments)
    live.wait_rlmm_published()
    return tids


def object_count(proxy: S3FaultProxy, tid: Any) -> int:
    s3 = make_s3_client(endpoint_url=proxy.url)
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        for o in page.get("Contents", [])
    ]
    return sum(1 for k in keys if str(tid) in k)


def test_our_cluster_is_told_ours_by_its_api_versions(world):
    live, _proxy = world
    assert live.call(speaks_tiered_apis) is True


def test_disable_with_retain_sends_kafkas_read_only_configs_and_enable_reverses_them(world):
    live, _proxy = world
    tiered_topic(live, "compat-retain")
    out = jsonout(live, "tiering", "disable", "compat-retain", "--policy", "retain", "--compat", "kafka", "--wait")
    assert out["sent"]["set"] == {
        "remote.log.copy.disable": "true",
        "local.retention.ms": "-2",
        "local.retention.bytes": "-2",
    }
    assert out["sent"]["replaced"] == {"local.retention.ms": "0"}
    assert (out["state"], out["policy"], out["pending_brokers"], out["tiered_epoch"]) == (
        "DISABLED",
        "retain",
        [],
        None,
    )
    assert out["segments"]["copying"] == 0 and out["segments"]["copied"] >= 3
    assert "remote.log.disable.policy" not in out["sent"]["set"]
    ours = live.status("compat-retain")  # our own controller took the alias for its own retain disablement
    assert (ours.state.name, ours.policy.name) == ("DISABLED", "RETAIN")

    status = jsonout(live, "tiering", "status", "compat-retain", "--compat", "kafka")
    assert [(s["topic"], s["state"], s["policy"]) for s in status] == [("compat-retain", "DISABLED", "retain")]

    enabled = jsonout(live, "tiering", "enable", "compat-retain", "--compat", "kafka", "--wait")
    assert enabled["sent"] == {
        "set": {},
        "delete": ["remote.log.copy.disable", "local.retention.ms", "local.retention.bytes"],
        "replaced": {},
    }
    assert enabled["state"] == "ENABLED"
    assert live.status("compat-retain").state.name == "ENABLED"
    again = jsonout(live, "tiering", "enable", "compat-retain", "--compat", "kafka")
    assert again["sent"] is None  # already so: nothing sent


def test_disable_with_delete_waits_until_every_segment_is_delete_finished(world):
    live, proxy = world
    tid = tiered_topic(live, "compat-delete", partitions=2, segments=4)
    assert object_count(proxy, tid) > 0
    out = jsonout(live, "tiering", "disable", "compat-delete", "--policy", "delete", "--compat", "kafka", "--wait")
    assert out["sent"]["set"] == {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
    assert (out["state"], out["policy"]) == ("DISABLED", "delete")
    assert out["segments"]["deleted"] >= 4
    assert all(p["segments_remaining"] == 0 for p in out["partitions"])
    assert [p["partition"] for p in out["partitions"]] == [0, 1]
    assert object_count(proxy, tid) == 0
    assert live.status("compat-delete").state.name == "DISABLED"

    enabled = jsonout(live, "tiering", "enable", "compat-delete", "--compat", "kafka", "--wait")
    assert enabled["sent"] == {
        "set": {"remote.storage.enable": "true"},
        "delete": ["remote.log.delete.on.disable"],
        "replaced": {},
    }
    assert enabled["state"] == "ENABLED" and live.status("compat-delete").state.name == "ENABLED"


def test_a_delete_whose_s3_calls_fail_half_way_is_reported_as_stopped_then_finishes_once_s3_answers(world):
    live, proxy = world
    tid = tiered_topic(live, "compat-stall", partitions=2, segments=4)
    proxy.failing = f"{tid}/1/".encode()  # every delete of partition 1's objects fails; partition 0's go through
    try:
        args = ("tiering", "disable", "compat-stall", "--policy", "delete", "--compat", "kafka")
        proc = tieredctl(live, "--output", "json", *args, "--wait", "--stall-timeout", "10", "--timeout", "120")
        assert proc.returncode == 4, f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
        report = json.loads(proc.stdout)
        assert report["stalled"] is True and report["state"] == "DISABLING"
        remaining = {p["partition"]: p["segments_remaining"] for p in report["partitions"]}
        assert remaining[0] == 0 and remaining[1] > 0
        assert "stopped moving" in proc.stderr and "partition 1:" in proc.stderr
        assert "scan run --source kafka" in proc.stderr and "reclaim" in proc.stderr
    finally:
        proxy.failing = None
    done = jsonout(live, *args, "--wait", "--timeout", "120")
    assert done["sent"] is None  # the configs were already in place: only waited
    assert (done["state"], done["segments"]["deleting"], done["segments"]["copied"]) == ("DISABLED", 0, 0)
    assert object_count(proxy, tid) == 0


def test_many_topics_by_pattern_are_disabled_one_after_another_with_one_document_of_all(world):
    live, _proxy = world
    tiered_topics(live, "compat-many-a", "compat-many-b", segments=2)
    args = ("tiering", "disable", "--regex", "compat-many-.", "--policy", "delete", "--compat", "kafka", "--wait")
    refused = tieredctl(live, *args)
    assert refused.returncode == 2 and "Add --yes" in refused.stderr  # a pattern's delete needs --yes, as ours
    out = jsonout(live, *args, "--yes")
    assert [(t["topic"], t["state"], t["policy"]) for t in out] == [
        ("compat-many-a", "DISABLED", "delete"),
        ("compat-many-b", "DISABLED", "delete"),
    ]
    names = ("compat-many-a", "no-such-topic", "compat-many-b")
    again = tieredctl(live, "--output", "json", "tiering", "disable", *names, "--policy", "delete", "--compat", "kafka")
    assert again.returncode == 1, again.stderr
    answers = json.loads(again.stdout)
    assert [(a["topic"], a.get("sent", "-"), a.get("error")) for a in answers] == [
        ("compat-many-a", None, None),  # already so: nothing sent
        ("compat-many-b", None, None),
        ("no-such-topic", "-", "UNKNOWN_TOPIC_OR_PARTITION"),
    ]
    assert "1 of 3 topic(s) were not disabled (no-such-topic:" in again.stderr
    retain = tieredctl(live, "tiering", "disable", "compat-many-a", "--policy", "retain", "--compat", "kafka")
    assert retain.returncode == 1 and "cannot be kept" in retain.stderr


def readme_commands() -> list[str]:
    """The command lines of the README's "Tiering with Kafka's own configs" (its first ``sh`` block)."""
    text = README.read_text(encoding="utf-8")
    section = text.split("### Tiering with Kafka's own configs", 1)[1].split("\n#", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the section has no sh block"
    return [line for line in block.group(1).splitlines() if line.startswith("tieredctl ")]


def test_the_readme_commands_of_tiering_with_kafkas_configs_run_as_shown(world):
    live, _proxy = world
    tiered_topic(live, "orders", partitions=2, segments=4)
    commands = readme_commands()
    assert len(commands) == 5
    for line in commands:
        args = [live.bootstrap if a == "BS" else a for a in shlex.split(line)[1:]]
        proc = tieredctl(live, *args)
        assert proc.returncode == 0, f"{line}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    final = json.loads(proc.stdout)
    assert [(s["topic"], s["state"], s["policy"]) for s in final if s["topic"] == "orders"] == [
        ("orders", "DISABLED", "delete")
    ]
