"""AdminClient: bootstrap parsing, Metadata, and following the active controller across a failover.

Two KafkaServers play nodes 1 (A) and 2 (B) of one cluster. Both answer Metadata with the same node list and the
current controller id; the admin API (DescribeTieredState here) answers NOT_CONTROLLER (41) on the node that is not
the controller. Retries sleep through an injected function, so no test waits on a real backoff.

A node can be *frozen* (``FakeNodes.freeze``): it still accepts connections and reads requests, as the kernel does
for a SIGSTOPped process, but its Metadata and admin handlers never answer. A :class:`SilentListener` is the same
seen from the kernel only: a listening socket nobody accepts on, so not even ApiVersions is answered. Tests with a
frozen node use request timeouts far above the test's own bound (``run``), so a client that waited a full timeout
for the frozen node fails the test instead of passing slowly; only tests of the timeout itself use short ones.
"""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Coroutine
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.errors import (
    BrokerNotAvailable,
    ClusterAuthorizationFailed,
    InvalidArgument,
    NotController,
    RequestTimedOut,
    UnsupportedVersion,
)
from orchestrator.net import AdminClient, KafkaServer, parse_bootstrap
from orchestrator.net.admin import names_active_controller, pinned_addresses, probe_order, should_retry
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request

DESCRIBE = ApiKey.DESCRIBE_TIERED_STATE


METADATA = 3


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))


class FakeNodes:
    """Nodes 1 and 2 on loopback, sharing a view of who the controller is (``controller_id``; -1 for nobody)."""

    def __init__(self) -> None:
        self.controller_id = 2
        self.addresses: dict[int, tuple[str, int]] = {}
        self.admin_requests: dict[int, int] = {1: 0, 2: 0}
        self.metadata_requests: dict[int, int] = {1: 0, 2: 0}
        self.admin_error: dict[int, int] = {}  # node -> an error code its admin API answers regardless
        self.metadata_error: dict[int, tuple[int, str]] = {}  # node -> the error its DescribeCluster answers
        self.stock = False  # every node answers DescribeCluster as a stock Kafka broker does
        self.frozen: set[int] = set()  # nodes whose handlers do not answer until thaw() (SIGSTOP ... SIGCONT)
        self._thawed = asyncio.Event()
        self.servers = {node: self._server(node) for node in (1, 2)}

    def freeze(self, node_id: int) -> None:
        self.frozen.add(node_id)
        self._thawed.clear()

    def thaw(self) -> None:
        self.frozen.clear()
        self._thawed.set()

    async def _hang_if_frozen(self, node_id: int) -> None:
        if node_id in self.frozen:
            await self._thawed.wait()  # or cancelled by KafkaServer.stop()

    def _server(self, node_id: int) -> KafkaServer:
        async def metadata(request: Request) -> dict[str, Any]:  # DescribeCluster for the controllers
            if self.stock:  # Kafka's broker: its brokers' endpoint only (KIP-919), naming a broker that forwards
                if request.body["endpoint_type"] != 1:
                    return {"error_code": 114, "error_message": "wrong endpoint", "brokers": [], "endpoint_type": 1}
            else:
                assert request.body["endpoint_type"] == 2
            self.metadata_requests[node_id] += 1
            await self._hang_if_frozen(node_id)
            if node_id in self.metadata_error:
                code, message = self.metadata_error[node_id]
                return {
                    "error_code": code,
                    "error_message": message,
                    "brokers": [],
                    "cluster_id": "",
                    "endpoint_type": 2,
                }
            return {
                "brokers": [{"broker_id": n, "host": h, "port": p} for n, (h, p) in sorted(self.addresses.items())],
                "cluster_id": "test-cluster",
                "controller_id": self.controller_id,
                "endpoint_type": 2,
            }

        async def describe(request: Request) -> dict[str, Any]:
            self.admin_requests[node_id] += 1
            await self._hang_if_frozen(node_id)
            if node_id in self.admin_error:
                return {"error_code": self.admin_error[node_id], "topics": []}
            if node_id != self.controller_id:
                return {"error_code": NotController.code, "topics": []}
            names = request.body["topics"] or []
            return {"error_code": 0, "topics": [{"name": n, "tiered_epoch": node_id} for n in names]}

        return KafkaServer(
            name=f"node-{node_id}",
            host="127.0.0.1",
            port=0,
            handlers={ApiKey.DESCRIBE_CLUSTER: metadata, DESCRIBE: describe},
        )

    async def __aenter__(self) -> FakeNodes:
        for node, server in self.servers.items():
            self.addresses[node] = await server.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        for server in self.servers.values():
            await server.stop()

    def bootstrap(self, *nodes: int) -> str:
        return ",".join(f"{self.addresses[n][0]}:{self.addresses[n][1]}" for n in nodes)


class SilentListener:
    """A listening socket on loopback that never accepts: the kernel completes connections into its backlog and
    takes the bytes sent, and nothing ever answers (a SIGSTOPped process)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address: tuple[str, int] = self.sock.getsockname()

    @property
    def entry(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def close(self) -> None:
        self.sock.close()


class RecordingSleep:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


async def describe_on_controller(client: AdminClient, name: str) -> dict[str, Any]:
    return await client.send_to_controller(DESCRIBE, (0, 0), {"topics": [name]})


@pytest.mark.integration
def test_send_to_controller_ends_up_at_the_controller_then_follows_a_failover():
    async def main() -> None:
        sleep = RecordingSleep()
        async with FakeNodes() as cluster, AdminClient(cluster.bootstrap(1), sleep=sleep, timeout_s=5) as client:
            await client.refresh_metadata()
            assert client.controller_id == 2
            assert client.brokers == cluster.addresses

            body = await describe_on_controller(client, "t1")
            assert body["error_code"] == 0 and body["topics"][0]["tiered_epoch"] == 2  # answered by B
            assert cluster.admin_requests == {1: 0, 2: 1}

            cluster.controller_id = 1  # failover: B steps down, A takes over
            with capture_logs() as logs:
                body = await describe_on_controller(client, "t2")
            assert body["error_code"] == 0 and body["topics"][0]["tiered_epoch"] == 1  # answered by A
            assert cluster.admin_requests == {1: 1, 2: 2}  # B said NOT_CONTROLLER once
            assert client.controller_id == 1
            assert len(sleep.calls) == 1 and 0 < sleep.calls[0] <= 1.0
            events = [e["event"] for e in logs]
            assert "admin.not_controller" in events and "admin.retry" in events

            cluster.controller_id = 2  # and back
            body = await describe_on_controller(client, "t3")
            assert body["topics"][0]["tiered_epoch"] == 2

    run(main())


@pytest.mark.integration
def test_a_stale_controller_id_from_metadata_is_retried_until_the_cluster_settles():
    async def main() -> None:
        sleep = RecordingSleep()
        async with FakeNodes() as cluster:
            cluster.controller_id = -1  # an election in progress: nobody is controller yet

            async def settle_after_two_sleeps(seconds: float) -> None:
                await sleep(seconds)
                if len(sleep.calls) == 2:
                    cluster.controller_id = 1

            bootstrap = cluster.bootstrap(2, 1)
            rng = random.Random(11)
            async with AdminClient(bootstrap, sleep=settle_after_two_sleeps, timeout_s=5, rng=rng) as client:
                body = await describe_on_controller(client, "t")
                assert body["topics"][0]["tiered_epoch"] == 1
            # Full jitter in a window that doubles from backoff_initial_s (0.05 s), drawn from the client's rng.
            expected = random.Random(11)
            assert sleep.calls == [expected.uniform(0, 0.05), expected.uniform(0, 0.1)]

    run(main())


@pytest.mark.integration
def test_retries_are_bounded_and_the_last_not_controller_is_raised():
    async def main() -> None:
        sleep = RecordingSleep()
        async with FakeNodes() as cluster:
            # Node 2 is named controller by Metadata but refuses admin requests: a wedged controller.
            cluster.admin_error[2] = NotController.code
            async with AdminClient(cluster.bootstrap(1), sleep=sleep, max_attempts=4, timeout_s=5) as client:
                with pytest.raises(NotController, match="is not the active controller"):
                    await describe_on_controller(client, "t")
            assert len(sleep.calls) == 3
            assert cluster.admin_requests == {1: 0, 2: 4}

    run(main())


@pytest.mark.integration
def test_the_client_survives_losing_its_bootstrap_node_by_asking_the_nodes_it_learned():
    async def main() -> None:
        sleep = RecordingSleep()
        async with FakeNodes() as cluster, AdminClient(cluster.bootstrap(1), sleep=sleep, timeout_s=5) as client:
            cluster.controller_id = 1
            assert (await describe_on_controller(client, "t"))["topics"][0]["tiered_epoch"] == 1
            await cluster.servers[1].stop()  # A dies; B becomes controller
            cluster.controller_id = 2
            body = await describe_on_controller(client, "t")
            assert body["topics"][0]["tiered_epoch"] == 2
            assert client.controller_id == 2
            assert 1 <= len(sleep.calls) <= 3

    run(main())


@pytest.mark.integration
def test_no_reachable_bootstrap_server_gives_broker_not_available_after_bounded_attempts():
    async def main() -> None:
        sleep = RecordingSleep()
        server = KafkaServer(name="gone", host="127.0.0.1", port=0, handlers={})
        host, port = await server.start()
        await server.stop()
        async with AdminClient(f"{host}:{port}", sleep=sleep, max_attempts=3, connect_timeout_s=2) as client:
            with pytest.raises(BrokerNotAvailable, match=f"no bootstrap server answered Metadata.*{port}"):
                await describe_on_controller(client, "t")
        assert len(sleep.calls) == 2

    run(main())


@pytest.mark.integration
def test_a_caller_the_cluster_refuses_hears_why_at_once_not_that_no_server_answered():
    async def main() -> None:
        sleep = RecordingSleep()
        async with FakeNodes() as cluster:
            refusal = (
                "User:bob may not DescribeCluster on this cluster; an operator can grant it with `tieredctl acls add`"
            )
            cluster.metadata_error = dict.fromkeys((1, 2), (ClusterAuthorizationFailed.code, refusal))
            async with AdminClient(cluster.bootstrap(1, 2), sleep=sleep, max_attempts=3) as client:
                with pytest.raises(ClusterAuthorizationFailed) as caught:
                    await describe_on_controller(client, "t")
            assert caught.value.message == refusal
            assert sleep.calls == [] and cluster.admin_requests[2] == 0, "not retried, nothing sent"

    run(main())


@pytest.mark.integration
def test_a_stock_kafka_broker_that_serves_only_the_brokers_endpoint_is_asked_for_its_brokers_and_the_one_named_serves():
    """A stock Kafka cluster's clients never reach its controllers: a broker answers DescribeCluster for the
    controllers' endpoint MISMATCHED_ENDPOINT_TYPE and names, for the brokers', a broker that forwards admin
    writes (KRaft). The client asks again for the brokers and sends its requests to the one named."""

    async def main() -> None:
        async with FakeNodes() as cluster:
            cluster.stock = True
            async with AdminClient(cluster.bootstrap(1), timeout_s=5) as client:
                answer = await describe_on_controller(client, "t")
                assert client.controller_id == 2 and answer["topics"][0]["tiered_epoch"] == 2

    run(main())


@pytest.mark.integration
def test_an_admin_api_the_controller_does_not_speak_is_a_clear_unsupported_version():
    async def main() -> None:
        async with FakeNodes() as cluster, AdminClient(cluster.bootstrap(1), timeout_s=5) as client:
            with pytest.raises(UnsupportedVersion, match="does not serve"):
                await client.send_to_controller(19, (2, 7), {"topics": []})  # CreateTopics: no handler here

    run(main())


@pytest.mark.integration
def test_other_error_codes_are_returned_to_the_caller_as_they_are():
    async def main() -> None:
        async with FakeNodes() as cluster:
            cluster.admin_error[2] = 3  # UNKNOWN_TOPIC_OR_PARTITION, retriable, but the caller's to interpret
            async with AdminClient(cluster.bootstrap(1), timeout_s=5) as client:
                assert (await describe_on_controller(client, "t"))["error_code"] == 3
            assert cluster.admin_requests == {1: 0, 2: 1}

    run(main())


# --- a node that stops answering (a SIGSTOPped controller)

NEVER = 60.0  # a request timeout no test waits for: run() gives up after 20 s


@pytest.mark.integration
def test_a_silent_first_bootstrap_entry_costs_a_probe_stagger_not_a_request_timeout():
    async def main() -> None:
        silent = SilentListener()
        try:
            async with FakeNodes() as cluster:
                bootstrap = f"{silent.entry},{cluster.bootstrap(1)}"
                async with AdminClient(bootstrap, timeout_s=NEVER, connect_timeout_s=NEVER) as client:
                    await client.refresh_metadata()  # bounded by run(): far less than one request timeout
                    assert client.controller_id == 2
                    assert client.unresponsive == {silent.address}
                    body = await describe_on_controller(client, "t")
                    assert body["topics"][0]["tiered_epoch"] == 2
        finally:
            silent.close()

    run(main())


@pytest.mark.integration
def test_a_frozen_node_is_asked_last_until_it_answers_again():
    async def main() -> None:
        async with FakeNodes() as cluster:
            cluster.freeze(1)
            # A stagger far above a loopback round trip: node 2, asked first once 1 is known to be silent, answers
            # before anyone else is asked.
            async with AdminClient(cluster.bootstrap(1, 2), timeout_s=NEVER, probe_stagger_s=2.0) as client:
                await client.refresh_metadata()
                assert client.controller_id == 2
                assert cluster.metadata_requests == {1: 1, 2: 1}
                assert client.unresponsive == {cluster.addresses[1]}  # overtaken by node 2
                for _ in range(3):
                    await client.refresh_metadata()
                assert cluster.metadata_requests == {1: 1, 2: 4}  # the frozen node was not asked again

                await cluster.servers[2].stop()  # now only node 1 can answer: it thawed meanwhile
                cluster.thaw()
                await client.refresh_metadata()
                assert client.unresponsive == {cluster.addresses[2]}
                assert cluster.metadata_requests[1] >= 2

    run(main())


@pytest.mark.integration
def test_an_answer_naming_no_controller_does_not_wait_for_a_silent_node():
    async def main() -> None:
        sleep = RecordingSleep()
        silent = SilentListener()
        try:
            async with FakeNodes() as cluster:
                cluster.controller_id = -1  # the lease expired and the standby has not taken it yet

                async def standby_takes_over(seconds: float) -> None:
                    await sleep(seconds)
                    cluster.controller_id = 1

                bootstrap = f"{silent.entry},{cluster.bootstrap(1)}"
                async with AdminClient(bootstrap, timeout_s=NEVER, sleep=standby_takes_over) as client:
                    await client.refresh_metadata()
                    assert client.controller_id == -1
                    body = await describe_on_controller(client, "t")
                    assert body["topics"][0]["tiered_epoch"] == 1
            assert len(sleep.calls) == 1
        finally:
            silent.close()

    run(main())


@pytest.mark.integration
def test_a_controller_that_stops_answering_is_forgotten_and_the_next_call_finds_the_new_one():
    async def main() -> None:
        sleep = RecordingSleep()
        async with FakeNodes() as cluster, AdminClient(cluster.bootstrap(2, 1), timeout_s=0.5, sleep=sleep) as client:
            assert (await describe_on_controller(client, "t"))["topics"][0]["tiered_epoch"] == 2
            cluster.freeze(2)  # SIGSTOP: the connection stays up, nothing answers
            with capture_logs() as logs, pytest.raises(RequestTimedOut):
                await describe_on_controller(client, "t")  # not idempotent: not sent again
            assert cluster.admin_requests == {1: 0, 2: 2}
            assert sleep.calls == []
            assert client.controller_id is None
            assert client.unresponsive == {cluster.addresses[2]}
            assert "admin.controller_unreachable" in [e["event"] for e in logs]

            cluster.controller_id = 1  # the standby took the lease
            body = await describe_on_controller(client, "t")
            assert body["topics"][0]["tiered_epoch"] == 1
            assert cluster.admin_requests == {1: 1, 2: 2}
            assert cluster.metadata_requests[2] == 1  # asked once, at the start; never while frozen
            assert sleep.calls == []

    run(main())


@pytest.mark.integration
def test_an_idempotent_request_that_times_out_is_sent_again_to_the_controller_metadata_then_names():
    async def main() -> None:
        sleep = RecordingSleep()
        async with FakeNodes() as cluster:

            async def standby_takes_over(seconds: float) -> None:
                await sleep(seconds)
                cluster.controller_id = 1

            async with AdminClient(cluster.bootstrap(2, 1), timeout_s=0.5, sleep=standby_takes_over) as client:
                assert (await describe_on_controller(client, "t"))["topics"][0]["tiered_epoch"] == 2
                cluster.freeze(2)
                with capture_logs() as logs:
                    body = await client.send_to_controller(DESCRIBE, (0, 0), {"topics": ["t"]}, idempotent=True)
                assert body["topics"][0]["tiered_epoch"] == 1
                assert cluster.admin_requests == {1: 1, 2: 2}
                assert client.controller_id == 1
                assert len(sleep.calls) == 1 and 0 < sleep.calls[0] <= 0.05 + 0.05
                events = [e["event"] for e in logs]
                assert events.index("admin.controller_unreachable") < events.index("admin.retry")
                assert "admin.controller_changed" in events

    run(main())


@pytest.mark.integration
def test_idempotent_retries_after_timeouts_are_bounded_and_follow_the_backoff_schedule():
    async def main() -> None:
        sleep = RecordingSleep()
        async with FakeNodes() as cluster:
            cluster.freeze(2)  # Metadata from node 1 keeps naming the frozen node 2
            async with AdminClient(
                cluster.bootstrap(1),
                timeout_s=0.3,
                sleep=sleep,
                max_attempts=3,
                backoff_max_s=0.08,
                rng=random.Random(4),
            ) as client:
                with capture_logs() as logs, pytest.raises(RequestTimedOut, match="no response within"):
                    await client.send_to_controller(DESCRIBE, (0, 0), {"topics": ["t"]}, idempotent=True)
            sent = [e for e in logs if e["event"] == "admin.controller_unreachable"]
            assert len(sent) == 3 and {e["node_id"] for e in sent} == {2}
            # Node 2 read only the first: a Kafka server reads a connection's next request after answering.
            assert cluster.admin_requests == {1: 0, 2: 1}
            expected = random.Random(4)  # full jitter: 0.05 s, then 0.1 s capped at backoff_max_s
            assert sleep.calls == [expected.uniform(0, 0.05), expected.uniform(0, 0.08)]

    run(main())


@pytest.mark.integration
def test_retries_within_a_bound_stop_once_it_has_passed_whatever_attempts_are_left():
    async def main() -> None:
        sleep = RecordingSleep()
        async with FakeNodes() as cluster:
            cluster.freeze(2)  # Metadata from node 1 keeps naming the frozen node 2
            async with AdminClient(
                cluster.bootstrap(1), timeout_s=0.3, sleep=sleep, max_attempts=10, retry_within_s=0.3
            ) as client:
                with capture_logs() as logs, pytest.raises(RequestTimedOut, match="no response within"):
                    await client.send_to_controller(DESCRIBE, (0, 0), {"topics": ["t"]}, idempotent=True)
            sent = [e for e in logs if e["event"] == "admin.controller_unreachable"]
            assert len(sent) == 1, "the first attempt's timeout used the whole bound: not sent again"
            assert sleep.calls == []

    run(main())


@pytest.mark.integration
def test_a_controller_that_does_not_answer_api_versions_never_got_the_request_so_it_is_retried():
    async def main() -> None:
        sleep = RecordingSleep()
        silent = SilentListener()
        try:
            async with FakeNodes() as cluster:
                cluster.addresses[3] = silent.address  # Metadata names node 3, a silent listener, as controller
                cluster.controller_id = 3

                async def standby_takes_over(seconds: float) -> None:
                    await sleep(seconds)
                    cluster.controller_id = 1

                async with AdminClient(cluster.bootstrap(1), timeout_s=0.3, sleep=standby_takes_over) as client:
                    body = await describe_on_controller(client, "t")  # not idempotent, yet safe to send again
                    assert body["topics"][0]["tiered_epoch"] == 1
            assert len(sleep.calls) == 1
        finally:
            silent.close()

    run(main())


@pytest.mark.integration
def test_a_node_that_does_not_serve_describe_cluster_is_skipped_and_if_none_does_the_mismatch_is_reported():
    async def main() -> None:
        broker = KafkaServer(name="broker", host="127.0.0.1", port=0, handlers={})  # a node of another kind
        host, port = await broker.start()
        try:
            async with FakeNodes() as cluster, AdminClient(f"{host}:{port},{cluster.bootstrap(1)}") as client:
                await client.refresh_metadata()
                assert client.controller_id == 2 and (host, port) in client.unresponsive
            async with AdminClient(f"{host}:{port}", max_attempts=1) as client:
                with pytest.raises(UnsupportedVersion, match="no bootstrap server serves DescribeCluster"):
                    await client.refresh_metadata()
        finally:
            await broker.stop()

    run(main())


@pytest.mark.unit
def test_probe_order_keeps_the_bootstrap_order_and_puts_unresponsive_addresses_last():
    a, b, c, d = ("a", 1), ("b", 1), ("c", 1), ("d", 1)
    assert probe_order([a, b], [c, a, d], set()) == [a, b, c, d]
    assert probe_order([a, b], [c, a, d], {a}) == [b, c, d, a]
    assert probe_order([a, b], [c, a, d], {c, a}) == [b, d, a, c]
    assert probe_order([a], [], {a}) == [a]


@pytest.mark.unit
def test_only_an_idempotent_request_is_retried_after_a_timeout():
    assert should_retry(NotController("x"), idempotent=False)
    assert should_retry(BrokerNotAvailable("x"), idempotent=False)
    assert not should_retry(RequestTimedOut("x"), idempotent=False)
    assert should_retry(RequestTimedOut("x"), idempotent=True)
    assert not should_retry(UnsupportedVersion("x"), idempotent=True)


@pytest.mark.unit
def test_an_answer_names_an_active_controller_only_if_it_lists_that_node():
    node = {"broker_id": 7, "host": "h", "port": 1}
    assert names_active_controller({"brokers": [node], "controller_id": 7})
    assert not names_active_controller({"brokers": [node], "controller_id": -1})
    assert not names_active_controller({"brokers": [node], "controller_id": 8})


# --- bootstrap parsing


@pytest.mark.unit
def test_bootstrap_lists_are_parsed_the_kafka_way():
    assert parse_bootstrap("a:9092") == [("a", 9092)]
    assert parse_bootstrap("a:9092, b.example.com:19092") == [("a", 9092), ("b.example.com", 19092)]
    assert parse_bootstrap("[::1]:9093,127.0.0.1:1") == [("::1", 9093), ("127.0.0.1", 1)]
    assert parse_bootstrap([("h", 1), ("g", 65535)]) == [("h", 1), ("g", 65535)]


@pytest.mark.integration
def test_an_entry_may_name_its_node_which_is_then_reached_there_whatever_it_advertises():
    assert parse_bootstrap("3000@a:9093, b:9094") == [("a", 9093), ("b", 9094)]
    assert pinned_addresses("3000@a:9093, b:9094,3001@[::1]:1") == {3000: ("a", 9093), 3001: ("::1", 1)}
    assert pinned_addresses([("a", 1)]) == {}

    async def main() -> None:
        async with FakeNodes() as cluster:
            reachable = dict(cluster.addresses)
            with socket.socket() as closed:  # node 2 advertises an address that does not work from here
                closed.bind(("127.0.0.1", 0))
                cluster.addresses[2] = closed.getsockname()
            bootstrap = ",".join(f"{n}@{h}:{p}" for n, (h, p) in sorted(reachable.items()))
            async with AdminClient(bootstrap, sleep=RecordingSleep(), timeout_s=5) as client:
                body = await describe_on_controller(client, "t")
                assert body["topics"][0]["tiered_epoch"] == 2  # answered by node 2, at the address pinned
                assert client.brokers == reachable

    run(main())


@pytest.mark.parametrize(
    "bad,message",
    [
        ("", "expected 'host:port"),
        ("   ", "expected 'host:port"),
        ("a:9092,", "expected 'host:port"),
        ("a:9092,,b:9092", "expected 'host:port"),
        ("localhost", "no port"),
        ("localhost:", "is not a number"),
        ("localhost:http", "is not a number"),
        ("localhost:-1", "is not a number"),
        (":9092", "empty or malformed host"),
        ("local host:9092", "empty or malformed host"),
        ("localhost:0", "port must be 1-65535"),
        ("localhost:65536", "port must be 1-65535"),
        ("::1:9092", r"IPv6 address as '\[addr\]:port'"),
        ("[::1]9092", r"expected '\[ipv6\]:port'"),
        ("x@a:9092", "node id 'x' is not a number"),
        ("@a:9092", "node id '' is not a number"),
        ([], "the list is empty"),
        ([("h", 0)], "port must be 1-65535"),
        ([("h", "9092")], "port must be 1-65535"),
        (["h:9092"], r"expected a \(host, port\) pair"),
    ],
)
@pytest.mark.unit
def test_bad_bootstrap_lists_are_refused_with_a_clear_error(bad, message):
    with pytest.raises(InvalidArgument, match=message):
        parse_bootstrap(bad)
    with pytest.raises(InvalidArgument, match=message):
        AdminClient(bad)


@pytest.mark.unit
def test_per_resource_not_controller_answers_are_recognised():
    from orchestrator.net.admin import carries_not_controller

    assert carries_not_controller({"topics": [{"name": "a", "error_code": 41}, {"name": "b", "error_code": 41}]})
    assert not carries_not_controller({"topics": [{"name": "a", "error_code": 41}, {"name": "b", "error_code": 0}]})
    assert not carries_not_controller({"topics": []}) and carries_not_controller({"error_code": 41})
