"""The ``tieredctl`` console script against a real local cluster, as a user runs it (subprocesses)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.link_proxy import LinkProxy
from orchestrator.local.state import STATE_FILE, LocalClusterState
from tests.support.live_cluster import LiveCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    cluster = LiveCluster(tmp_path_factory.mktemp("cli") / "cluster", brokers=3, controllers=2)
    try:
        yield cluster
    finally:
        cluster.close()


def tieredctl(*args, bootstrap=None, check=None, timeout=120):
    env = {**os.environ}
    if bootstrap:
        env["TIEREDCTL_BOOTSTRAP_SERVER"] = bootstrap
    command = [sys.executable, "-m", "orchestrator.cli", *args]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc


def jsonout(live, *args, check=0):
    return json.loads(tieredctl("--output", "json", *args, bootstrap=live.bootstrap, check=check).stdout)


TIERED_CONFIGS = {"remote.storage.enable": "true", "local.retention.ms": "0", "segment.bytes": "8192"}
TIERED = [arg for key, value in TIERED_CONFIGS.items() for arg in ("--config", f"{key}={value}")]


def create_tiered(live, *names, partitions=1):
    """Tiered topics made as ``tieredctl topic create NAME --partitions N --config ...TIERED`` makes them, by one
    client in the test's process: the set-up of tests about other commands (``topic create`` itself runs as the
    console script in the demo story)."""

    async def create(c):
        for name in names:
            await c.create_topic(name, partitions=partitions, configs=TIERED_CONFIGS)

    live.call(create)


def test_the_demo_story(live):
    for name in ("orders", "payments"):
        created = jsonout(live, "topic", "create", name, "--partitions", "2", *TIERED)
        assert created["topic"] == name and len(created["topic_id"]) == 22
        produced = jsonout(live, "topic", "produce", name, "--records", "2000", "--record-size", "200")
        assert produced["records"] == 2000

    def remote_records() -> int:
        return jsonout(live, "topic", "consume", "payments", "--from-beginning")["remote_records"]

    wait_until("segments tiered and read back remotely", lambda: remote_records() > 0)

    done = jsonout(live, "tiering", "disable", "orders", "--policy", "delete", "--wait", "--timeout", "120")
    assert done["state"] == "DISABLED" and done["tiered_epoch"] == 2 and done["policy"] == "delete"
    assert done["segments_deleted"] > 0
    kept = jsonout(live, "tiering", "disable", "payments", "--policy", "retain", "--wait", "--timeout", "120")
    assert kept["state"] == "DISABLED" and kept["policy"] == "retain"

    statuses = {s["topic"]: s for s in jsonout(live, "tiering", "status")}
    for s in statuses.values():
        assert {"topic", "topic_id", "state", "tiered_epoch", "policy", "pending_brokers"} <= s.keys()
    assert statuses["orders"]["pending_brokers"] == []

    consumed = jsonout(live, "topic", "consume", "payments", "--from-beginning")
    assert consumed["records"] == 2000 and consumed["remote_records"] > 0

    enabled = jsonout(live, "tiering", "enable", "payments", "--wait")
    assert enabled["state"] == "ENABLED" and enabled["tiered_epoch"] == 3
    text = tieredctl("tiering", "status", "payments", bootstrap=live.bootstrap, check=0).stdout
    assert "ENABLED" in text and "payments" in text


def test_errors_name_the_kafka_error_and_change_nothing(live):
    create_tiered(live, "errs")
    before = jsonout(live, "tiering", "status", "errs")[0]

    disable_with_bogus_policy = ["--set", "remote.storage.enable=false", "--set", "remote.log.disable.policy=bogus"]
    bad = tieredctl("configs", "alter", "errs", *disable_with_bogus_policy, bootstrap=live.bootstrap, check=1)
    assert "INVALID_REQUEST (42)" in bad.stderr and "bogus" in bad.stderr

    unknown = tieredctl("tiering", "disable", "nosuch", bootstrap=live.bootstrap, check=1)
    assert "UNKNOWN_TOPIC_OR_PARTITION (3)" in unknown.stderr

    enable_with_policy = ["--set", "remote.storage.enable=true", "--set", "remote.log.disable.policy=delete"]
    reenable_with_policy = tieredctl("configs", "alter", "errs", *enable_with_policy, bootstrap=live.bootstrap)
    assert reenable_with_policy.returncode == 1 and "(42)" in reenable_with_policy.stderr

    illegal = tieredctl("topic", "create", "no/slashes", bootstrap=live.bootstrap, check=1)
    assert "INVALID_TOPIC_EXCEPTION (17)" in illegal.stderr

    usage = tieredctl("tiering", "disable", "errs", "--policy", "maybe", bootstrap=live.bootstrap, check=2)
    assert "maybe" in usage.stderr
    assert jsonout(live, "tiering", "status", "errs")[0] == before  # nothing changed


def test_a_disable_while_disabling_is_refused_and_wait_times_out_naming_the_pending_broker(live):
    create_tiered(live, "slow", partitions=3)
    jsonout(live, "topic", "produce", "slow", "--records", "300")
    live.wait_tiering_settled(live.status("slow").topic_id)
    leader = live.call(lambda c: c.topic("slow"))["partitions"][0]["leader_id"]
    live.signal("broker", leader, signal.SIGSTOP)
    try:
        delete_waiting_3s = ["--policy", "delete", "--wait", "--timeout", "3"]
        timed_out = tieredctl("tiering", "disable", "slow", *delete_waiting_3s, bootstrap=live.bootstrap, check=1)
        assert "REQUEST_TIMED_OUT" in timed_out.stderr and f"broker {leader}" in timed_out.stderr
        again = tieredctl("tiering", "enable", "slow", bootstrap=live.bootstrap, check=1)
        assert "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS (10950)" in again.stderr
        st = wait_until(  # each look is a tieredctl process (about 0.4 s of CPU): every 0.5 s, not every 0.1 s
            "only the paused broker pending",
            lambda: (
                (s := jsonout(live, "tiering", "status", "slow")[0])
                and [p["broker_id"] for p in s["pending_brokers"]] == [leader]
                and s
            ),
            30,
            0.5,
        )
        assert st["state"] == "DISABLING"
        assert {"broker_id", "attempts", "last_error", "fenced"} <= st["pending_brokers"][0].keys()
    finally:
        live.signal("broker", leader, signal.SIGCONT)
    wait_until("DISABLED", lambda: jsonout(live, "tiering", "status", "slow")[0]["state"] == "DISABLED", 60, 0.5)


def test_no_cluster_to_talk_to_is_a_usage_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TIEREDCTL_BOOTSTRAP_SERVER"}
    command = [sys.executable, "-m", "orchestrator.cli", "topic", "list"]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "--bootstrap-server" in proc.stderr


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _listeners(port: int) -> list[str]:
    """The command lines of the processes listening on TCP ``port`` (from /proc: the LISTEN sockets on the port, and
    the processes whose descriptors hold them). A port a stopped cluster used may be listened on again by anything
    else on the machine (it was an ephemeral port, and other tests run beside this one), so the check is who holds
    it, not whether a connection is answered."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    holders = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if any(_link(fd) in inodes for fd in fds):
            holders.append(cmdline)
    return holders


def _link(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:  # closed meanwhile (the listing's own descriptor, say)
        return ""


def test_cluster_up_status_and_down_leave_no_process_and_no_port_behind(tmp_path, cluster_dir):
    d = str(cluster_dir)
    cluster_size = ["--brokers", "2", "--controllers", "2"]
    up = json.loads(tieredctl("--output", "json", "cluster", "up", "--dir", d, *cluster_size, check=0).stdout)
    assert {"bootstrap_server", "s3_endpoint", "bucket"} <= up.keys()
    st = json.loads(tieredctl("--output", "json", "cluster", "status", "--dir", d, check=0).stdout)
    assert {"bootstrap_server", "s3_endpoint", "bucket", "processes"} <= st.keys()
    procs = st["processes"]
    assert sorted(p["role"] for p in procs) == ["broker", "broker", "controller", "controller", "s3"]
    assert all({"role", "id", "pid", "alive"} <= p.keys() and p["alive"] for p in procs)
    assert sum(1 for p in procs if p["role"] == "controller" and p["active"]) == 1
    again = tieredctl("cluster", "up", "--dir", d, check=1)
    assert "already running" in again.stderr
    # Some processes killed: up starts just those again, on their addresses, and leaves the others be.
    standby = next(p for p in procs if p["role"] == "controller" and not p["active"])
    broker = next(p for p in procs if p["role"] == "broker")
    for victim in (standby, broker):
        os.kill(victim["pid"], signal.SIGKILL)
    wait_until("the killed processes to be gone", lambda: not any(_running(v["pid"]) for v in (standby, broker)), 30)
    healed = tieredctl("cluster", "up", "--dir", d, check=0)
    assert f"controller {standby['id']}" in healed.stderr + healed.stdout
    after = json.loads(tieredctl("--output", "json", "cluster", "status", "--dir", d, check=0).stdout)["processes"]
    assert all(p["alive"] for p in after)
    pids = {(p["role"], p["id"]): (p["pid"], p["port"]) for p in after}
    for p in procs:
        same_pid = pids[(p["role"], p["id"])][0] == p["pid"]
        assert same_pid == (p not in (standby, broker)), f"{p['role']} {p['id']}"
        port = pids[(p["role"], p["id"])][1]
        if port != p["port"]:  # only a broker moves, when another process took its port while it was down, and says so
            moved = f"broker {p['id']} started again on port {port}: its port {p['port']} was taken while it was down"
            assert p is broker and moved in healed.stderr + healed.stdout, f"not started again on its address: {healed}"
    procs = after
    down = tieredctl("cluster", "down", "--dir", d, check=0)
    assert "data kept in" in down.stdout and "resumes the cluster" in down.stdout
    for p in procs:
        assert not _running(p["pid"]), f"{p['role']} {p['id']} (pid {p['pid']}) is still running"
        left = [line for line in _listeners(p["port"]) if d in line]
        assert not left, f"{p['role']} {p['id']} left port {p['port']} open: {left}"
    assert (tmp_path / "c" / STATE_FILE).exists()  # kept: 'cluster up' resumes it
    purged = json.loads(tieredctl("--output", "json", "cluster", "down", "--dir", d, "--purge", check=0).stdout)
    assert purged["purged"] and purged["stopped"] == [] and str(tmp_path / "c" / STATE_FILE) in purged["deleted"]
    assert sorted(x.name for x in (tmp_path / "c").iterdir()) == []


def test_tiering_disable_takes_many_topics_by_name_or_pattern_each_answered_on_its_own(live):
    create_tiered(live, "bulk-a", "bulk-b", "bulk-c", "bulk-d", "other-e")

    def states(*names):
        return {s["topic"]: s["state"] for s in jsonout(live, "tiering", "status") if s["topic"] in names}

    mixed = tieredctl(
        "--output",
        "json",
        "tiering",
        "disable",
        "bulk-a",
        "nosuch",
        "bulk-b",
        "--wait",
        "--timeout",
        "120",
        bootstrap=live.bootstrap,
        check=1,
    )
    answer = json.loads(mixed.stdout)
    assert [(t["topic"], t["error"]) for t in answer["topics"]] == [
        ("bulk-a", None),
        ("nosuch", "UNKNOWN_TOPIC_OR_PARTITION"),
        ("bulk-b", None),
    ]
    assert answer["accepted"] == 2 and answer["failed"] == 1
    assert [t.get("state") for t in answer["topics"]] == ["DISABLED", None, "DISABLED"], "--wait: all of them"
    assert "1 of 3 topic(s) were not disabled" in mixed.stderr and "nosuch" in mixed.stderr

    refused = tieredctl("tiering", "disable", "--all-tiered", "--policy", "delete", bootstrap=live.bootstrap, check=2)
    assert "--yes" in refused.stderr and "bulk-c" in refused.stderr and "bulk-a" not in refused.stderr
    assert states("bulk-c", "bulk-d", "other-e") == dict.fromkeys(("bulk-c", "bulk-d", "other-e"), "ENABLED")

    none = tieredctl("tiering", "disable", "--regex", "bulk-[ab]", bootstrap=live.bootstrap, check=2)
    assert "no ENABLED topic matches" in none.stderr, "already DISABLED: nothing matched, nothing sent"
    bad = tieredctl("tiering", "disable", "--regex", "bulk-(", bootstrap=live.bootstrap, check=2)
    assert "not a regular expression" in bad.stderr
    both = tieredctl("tiering", "disable", "bulk-c", "--regex", "x", bootstrap=live.bootstrap, check=2)
    assert "one way" in both.stderr

    text = tieredctl("tiering", "disable", "--regex", "bulk-.", "--wait", bootstrap=live.bootstrap, check=0).stdout
    assert "2 of 2 topic(s) accepted" in text and "bulk-c" in text and "bulk-d" in text
    assert states("bulk-c", "bulk-d", "other-e") == {"bulk-c": "DISABLED", "bulk-d": "DISABLED", "other-e": "ENABLED"}


def test_one_command_of_many_steps_connects_once_to_each_controller(live):
    """``tiering disable --regex P --wait`` lists the topics, disables those that match and polls until they are
    DISABLED: three steps, many polls, one client session. Reached through a proxy in front of each controller
    (``id@host:port`` pins a node to the address given), the command connects to each at most once."""
    create_tiered(live, "session-a", "session-b")
    controllers = [p for p in LocalClusterState.load(live.dir).processes if p.role == "controller"]
    proxies = {p.id: LinkProxy("127.0.0.1", p.port, name=f"controller-{p.id}") for p in controllers}
    try:
        bootstrap = ",".join(f"{node}@127.0.0.1:{proxy.port}" for node, proxy in proxies.items())
        args = ["--output", "json", "tiering", "disable", "--regex", "session-.", "--wait", "--timeout", "120"]
        answer = json.loads(tieredctl(*args, bootstrap=bootstrap, check=0).stdout)
        connections = {node: proxy.connections for node, proxy in proxies.items()}
    finally:
        for proxy in proxies.values():
            proxy.close()
    assert [(t["topic"], t["state"]) for t in answer["topics"]] == [(n, "DISABLED") for n in ("session-a", "session-b")]
    assert sum(connections.values()) >= 1 and all(n <= 1 for n in connections.values()), connections
