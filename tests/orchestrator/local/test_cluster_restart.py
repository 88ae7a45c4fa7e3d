"""``cluster down`` then ``cluster up`` on the same directory resumes the cluster: same topics, every record readable,
tiered data served from S3 — on an external S3 endpoint and on the embedded one. Nothing is deleted unless asked
(``down --purge``), and a cluster whose embedded S3 died with its objects is not brought back half empty."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import pytest

from orchestrator.client import TieredClient
from orchestrator.errors import LocalClusterError
from orchestrator.local import cluster as lc
from orchestrator.local.s3_snapshot import SNAPSHOT_DIR
from orchestrator.local.state import STATE_FILE, STORE_FILE, LocalClusterState
from tests.support.live_cluster import fast_up, run, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0", "segment.bytes": "4096"}


def _up(directory, **kwargs):
    return fast_up(directory, brokers=2, controllers=2, **kwargs)


def _call(state: LocalClusterState, fn):
    async def go():
        async with TieredClient(state.bootstrap_server, timeout_s=10) as c:
            return await fn(c)

    return run(go())


def _produce(state, name, partitions, per_partition):
    async def go(c):
        for p in range(partitions):
            for start in range(0, per_partition, 500):
                n = min(500, per_partition - start)
                await c.produce(
                    name, [f"{name}-{p}-{start + i}".encode().ljust(100, b".") for i in range(n)], partition=p
                )

    _call(state, go)


def _read_all(state, name):
    """Every record of every partition from the log start: (values, how many came from remote storage)."""

    async def go(c):
        values, remote = [], 0
        for p in range(len((await c.topic(name))["partitions"])):
            async for rec in c.consume(name, p, from_beginning=True):
                values.append(rec.value)
                remote += rec.remote
        return values, remote

    return _call(state, go)


def _remote_segments(state, name) -> int:
    s3 = lc.s3_client(state)
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=state.bucket)
        for o in page.get("Contents", [])
    ]
    return sum(1 for k in keys if f"/{name}-" in f"/{k.removeprefix(state.prefix)}" and k.endswith(".log"))


def _two_topics(state, *, scale: int = 1):
    """A plain and a tiered topic of two partitions; at ``scale`` 1 most of the tiered topic is only in S3 (20
    segments or more), which the resume tests read back; a larger ``scale`` writes that many times fewer records
    and waits for that many times fewer segments, for a test that only needs some of the topic in S3."""
    _call(state, lambda c: c.create_topic("plain", partitions=2))
    _call(state, lambda c: c.create_topic("tiered", partitions=2, configs=TIERED))
    _produce(state, "plain", 2, 1000 // scale)
    _produce(state, "tiered", 2, 2000 // scale)
    # every closed segment copied and the local copies trimmed
    wait_until("segments of 'tiered' in S3", lambda: _remote_segments(state, "tiered") >= 20 // scale, 60)


def _check_everything_readable(state):
    topics = _call(state, lambda c: c.metadata())
    assert sorted(t["name"] for t in topics["topics"] if not t["is_internal"]) == ["plain", "tiered"]
    plain, plain_remote = _read_all(state, "plain")
    assert len(plain) == 2000 and len(set(plain)) == 2000 and plain_remote == 0
    tiered, tiered_remote = _read_all(state, "tiered")
    assert len(tiered) == 4000 and len(set(tiered)) == 4000
    assert tiered_remote > 0, "the tiered topic's early records are served from S3"


@pytest.fixture
def cleanup():
    dirs = []
    yield dirs
    for d in dirs:
        if (d / STATE_FILE).exists():
            lc.down(d, purge=True, timeout_s=10)


def test_down_then_up_on_an_external_s3_resumes_every_topic_with_every_record(
    tmp_path, moto_endpoint, s3_client, cleanup
):
    bucket = "restart-external"
    s3_client.create_bucket(Bucket=bucket)
    d = tmp_path / "c"
    cleanup.append(d)
    state = _up(d, s3_endpoint=moto_endpoint, bucket=bucket)
    _two_topics(state)
    objects_before = _remote_segments(state, "tiered")

    stopped = lc.down(d)
    assert not stopped.purged and stopped.resumable and {p.role for p in stopped.processes} == {"broker", "controller"}
    assert any("objects stay in" in w for w in stopped.warnings)
    assert (d / STORE_FILE).exists() and (d / "data" / "broker-1").is_dir()

    resumed = _up(d)  # no endpoint given: the cluster's own
    assert resumed.s3_endpoint == moto_endpoint and resumed.bucket == bucket
    _check_everything_readable(resumed)
    assert _remote_segments(resumed, "tiered") >= objects_before


def test_down_then_up_on_the_embedded_s3_keeps_its_objects_and_resumes_the_cluster(tmp_path, cleanup):
    d = tmp_path / "c"
    cleanup.append(d)
    state = _up(d)
    _two_topics(state)
    s3 = lc.s3_client(state)
    keys_before = {o["Key"] for o in s3.list_objects_v2(Bucket=state.bucket)["Contents"]}
    some_log = next(k for k in sorted(keys_before) if k.endswith(".log"))
    tags_before = s3.get_object_tagging(Bucket=state.bucket, Key=some_log)["TagSet"]
    head_before = s3.head_object(Bucket=state.bucket, Key=some_log)

    stopped = lc.down(d)
    assert stopped.resumable and stopped.s3_objects is not None and stopped.s3_objects >= len(keys_before)
    snapshot_state = json.loads((d / SNAPSHOT_DIR / "state.json").read_text())
    assert snapshot_state["status"] == "stopped"

    resumed = _up(d)
    assert resumed.s3_endpoint != state.s3_endpoint  # a new server process, on a port it bound itself
    s3 = lc.s3_client(resumed)
    keys_after = {
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=resumed.bucket)
        for o in page.get("Contents", [])
    }
    assert keys_before <= keys_after
    assert s3.get_object_tagging(Bucket=resumed.bucket, Key=some_log)["TagSet"] == tags_before
    head_after = s3.head_object(Bucket=resumed.bucket, Key=some_log)
    # the same bytes and the same time: a scan made before the restart still matches what reclaim finds after
    assert head_after["ETag"] == head_before["ETag"] and head_after["LastModified"] == head_before["LastModified"]
    _check_everything_readable(resumed)
    # and the resumed cluster keeps working: new records, new segments tiered
    _produce(resumed, "tiered", 1, 500)
    tiered, _ = _read_all(resumed, "tiered")
    assert len(tiered) == 4500


def test_a_cluster_whose_embedded_s3_died_is_not_resumed_and_purge_deletes_it(tmp_path, cleanup):
    d = tmp_path / "c"
    cleanup.append(d)
    state = _up(d)
    _two_topics(state, scale=10)  # what the dead S3 held is never read: some tiered segments in it are enough
    s3 = next(p for p in state.processes if p.role == "s3")
    os.kill(s3.pid, signal.SIGKILL)  # its objects were in memory only
    wait_until("the embedded S3 to die", lambda: not lc.is_ours(s3), 10)

    stopped = lc.down(d)
    assert not stopped.resumable and stopped.s3_objects is None
    assert any("objects are gone" in w for w in stopped.warnings)
    with pytest.raises(LocalClusterError, match=r"did not stop cleanly.*--purge"):
        _up(d)
    assert (d / "data" / "broker-1").is_dir(), "a refused resume deletes nothing"
    assert all(not lc.is_ours(p) for p in LocalClusterState.load(d).processes), "and leaves no process behind"

    purged = lc.down(d, purge=True)
    assert purged.purged and str(d / "data") in purged.deleted and str(d / STORE_FILE) in purged.deleted
    assert list(d.iterdir()) == []
    fresh = _up(d)
    assert [t["name"] for t in _call(fresh, lambda c: c.metadata())["topics"] if not t["is_internal"]] == []


def test_resuming_refuses_another_shape_or_endpoint_and_leftovers_without_a_record(tmp_path, moto_endpoint, cleanup):
    d = tmp_path / "c"
    cleanup.append(d)
    _up(d)
    lc.down(d)
    with pytest.raises(LocalClusterError, match="has 2 broker"):
        lc.up(d, brokers=3)
    with pytest.raises(LocalClusterError, match="keeps its objects in the embedded S3"):
        lc.up(d, s3_endpoint=moto_endpoint)
    (d / STATE_FILE).unlink()
    with pytest.raises(LocalClusterError, match=r"no cluster\.json.*--purge"):
        _up(d)
    assert (d / STORE_FILE).exists()
    lc.down(d, purge=True)
    assert list(d.iterdir()) == []


@pytest.mark.parametrize("content", ["", "{not json", '{"dir": "x"}', "[]"])
def test_an_unreadable_cluster_record_is_a_local_cluster_error_and_purge_still_works(tmp_path, content):
    d = tmp_path / "c"
    d.mkdir()
    (d / STATE_FILE).write_text(content)
    with pytest.raises(LocalClusterError, match=r"cannot be read as a local cluster's record.*--purge"):
        LocalClusterState.load(d)
    with pytest.raises(LocalClusterError, match="cannot be read"):
        lc.status(d)
    purged = lc.down(d, purge=True)
    assert purged.deleted == [str(d / STATE_FILE)] and list(d.iterdir()) == []


def _broker_1_killed(tmp_path, moto_endpoint, bucket, cleanup):
    """A cluster with 100 records in two partitions, broker 1 SIGKILLed: (its state, broker 1 as it was)."""
    cleanup.append(tmp_path)
    state = _up(tmp_path, s3_endpoint=moto_endpoint, bucket=bucket)
    _call(state, lambda c: c.create_topic("orders", partitions=2))
    _produce(state, "orders", 2, 50)
    broker = state.find("broker", 1)
    lc.kill_process(broker)
    return state, broker


def _wait_registered_at(state, broker_id: int, port: int) -> None:
    """Until the cluster's metadata lists ``broker_id`` at ``port`` (what clients follow)."""

    def registered() -> bool:
        md = _call(state, lambda c: c.metadata())
        return any(b["node_id"] == broker_id and b["port"] == port for b in md["brokers"])

    wait_until(f"broker {broker_id} to register port {port}", registered, 30)


def test_a_broker_whose_port_was_taken_while_it_was_down_restarts_on_another_and_a_controller_is_refused(
    tmp_path, moto_endpoint, bucket, cleanup
):
    """A port a process bound with port 0 is an ephemeral port: while the process is down, any outgoing connection
    may get it as its source port (the fault suite found this: seed 130 of ``make chaos``). The broker comes back on
    a new port and clients find it there; a controller, whose address is in every bootstrap list, gets a clear
    error and nothing is started."""
    state, broker = _broker_1_killed(tmp_path, moto_endpoint, bucket, cleanup)
    said: list[str] = []
    with socket.create_server(("127.0.0.1", broker.port)) as squatter:
        lc.up(tmp_path, progress=said.append)  # 'cluster up' on a cluster with a dead process: just that one again
        moved = LocalClusterState.load(tmp_path).find("broker", 1)
        assert moved.port != broker.port and lc.is_ours(moved)
        taken = f"broker 1 started again on port {moved.port}: its port {broker.port} was taken while it was down"
        assert taken in said, said
        assert f"port = {moved.port}" in Path(moved.config).read_text()
        _wait_registered_at(state, 1, moved.port)
        values, _ = _read_all(state, "orders")
        assert len(values) == 100, "every record, the moved broker's partition too"

        controller = next(p for p in LocalClusterState.load(tmp_path).processes if p.role == "controller")
        lc.kill_process(controller)
        squatter.close()
        with socket.create_server(("127.0.0.1", controller.port)):
            with pytest.raises(LocalClusterError, match=r"taken by another process while it was down"):
                lc.restart(tmp_path, "controller", controller.id)
            assert not lc.is_ours(LocalClusterState.load(tmp_path).find("controller", controller.id))
        assert lc.is_ours(lc.restart(tmp_path, "controller", controller.id)), "once the port is free it restarts"


def test_a_broker_whose_port_is_taken_between_the_check_and_its_bind_is_started_again_on_another(
    tmp_path, moto_endpoint, bucket, cleanup, monkeypatch
):
    """The port is free when restart looks, and taken by the time the new process binds (the second it takes to
    start is enough for an outgoing connection to get it: CI saw it as a broker that died with "address already in
    use"). The broker is started again on a new port, and clients find it there."""
    from orchestrator.local import restart as restart_module

    state, broker = _broker_1_killed(tmp_path, moto_endpoint, bucket, cleanup)
    squatters: list[socket.socket] = []
    checked = restart_module._move_if_port_taken

    def check_then_lose_the_port(st, p):  # the check finds it free; then another process takes it
        found = checked(st, p)
        squatters.append(socket.create_server(("127.0.0.1", p.port)))
        return found

    monkeypatch.setattr(restart_module, "_move_if_port_taken", check_then_lose_the_port)
    try:
        moved = lc.restart(tmp_path, "broker", 1)
        assert moved.port != broker.port and lc.is_ours(moved)
        assert "[Errno 98]" in Path(moved.log).read_text(), "the first attempt did lose the race"
        assert LocalClusterState.load(tmp_path).find("broker", 1).port == moved.port
        _wait_registered_at(state, 1, moved.port)
        values, _ = _read_all(state, "orders")
        assert len(values) == 100
    finally:
        for s in squatters:
            s.close()


def test_a_controller_whose_metrics_port_was_taken_comes_back_on_its_own_port_with_another_metrics_port(
    tmp_path, moto_endpoint, bucket, cleanup, monkeypatch
):
    """Only scrapers dial a controller's metrics port, so it may move where its own port may not: taken while the
    controller was down, and taken between restart's check and the controller's bind (the fault suite's soak saw a
    restarted controller die at its metrics bind with "address already in use", again and again)."""
    from orchestrator.local import restart as restart_module

    state, _ = _broker_1_killed(tmp_path, moto_endpoint, bucket, cleanup)
    lc.restart(tmp_path, "broker", 1)
    controller = next(p for p in LocalClusterState.load(tmp_path).processes if p.role == "controller")
    assert controller.metrics_port, "the local cluster's controllers serve /metrics"
    lc.kill_process(controller)
    with socket.create_server(("127.0.0.1", controller.metrics_port)):
        back = lc.restart(tmp_path, "controller", controller.id)
    assert lc.is_ours(back) and back.port == controller.port and back.metrics_port not in (0, controller.metrics_port)
    assert LocalClusterState.load(tmp_path).find("controller", controller.id).metrics_port == back.metrics_port
    assert f"port = {back.metrics_port}" in Path(back.config).read_text()

    lc.kill_process(back)
    squatters: list[socket.socket] = []
    checked = restart_module._move_if_port_taken

    def check_then_lose_the_metrics_port(st, p):
        found = checked(st, p)
        squatters.append(socket.create_server(("127.0.0.1", p.metrics_port)))
        return found

    monkeypatch.setattr(restart_module, "_move_if_port_taken", check_then_lose_the_metrics_port)
    try:
        again = lc.restart(tmp_path, "controller", controller.id)
        assert lc.is_ours(again) and again.port == controller.port and again.metrics_port != back.metrics_port
        assert "[Errno 98]" in Path(again.log).read_text(), "the first attempt did lose the race"
    finally:
        for s in squatters:
            s.close()
    values, _ = _read_all(state, "orders")
    assert len(values) == 100, "the cluster serves through its restarted controller"


def test_controllers_serve_below_the_ephemeral_range_and_a_port_taken_before_the_first_bind_is_replaced(
    tmp_path, moto_endpoint, cleanup, monkeypatch
):
    """A controller's address must survive its restarts, so its port comes from below the kernel's ephemeral range,
    where no outgoing connection's source port can land while it is down (the fault suite's soak met a controller
    that could not come back: a connection had been given its port). The choice can still lose a race with another
    program's bind before the controller binds: the controller is started again on another port."""
    from orchestrator.local import startup
    from orchestrator.local.ports import ephemeral_low, stable_port

    squatted = stable_port()
    chosen: list[int] = []

    def first_one_taken() -> int:
        chosen.append(squatted if not chosen else stable_port())
        return chosen[-1]

    monkeypatch.setattr(startup, "stable_port", first_one_taken)
    cleanup.append(tmp_path)
    with socket.create_server(("127.0.0.1", squatted)):
        state = _up(tmp_path, s3_endpoint=moto_endpoint)
    controllers = [p for p in state.processes if p.role == "controller"]
    assert [p.port for p in controllers] == chosen[1:], "the taken port was replaced, each later choice kept"
    assert all(p.port < ephemeral_low() and lc.is_ours(p) for p in controllers)
    assert "[Errno 98]" in Path(controllers[0].log).read_text(), "the first attempt did lose the race"
    assert state.bootstrap_server == ",".join(f"127.0.0.1:{p.port}" for p in controllers)
    lc.kill_process(controllers[1])
    assert lc.restart(tmp_path, "controller", controllers[1].id).port == controllers[1].port
