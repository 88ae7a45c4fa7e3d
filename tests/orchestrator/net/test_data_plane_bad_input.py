"""Bad input on a broker's data plane over a real socket costs the request (a Kafka error in its response) or, for a
frame that does not decode, its connection, never the server.

A real BrokerAgent (not started: no loops) serves its own Produce, Fetch and ListOffsets handlers through an
in-process KafkaServer on 127.0.0.1, in an event loop on a thread of its own; the test sends raw bytes from blocking
sockets. Every bad request is followed on the same connection by an ApiVersions request (the sentinel): its answer
says the connection stayed open, end of stream says the server closed it. After each case a good Produce and Fetch
on a fresh connection are served, and no handler ever raised (``handler_failures`` stays 0: a handler that raises
is a bug, its connection lost). All randomness is seeded; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from orchestrator.broker.agent import BrokerAgent
from orchestrator.errors import ProtocolError
from orchestrator.net import KafkaServer
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import decode_request, decode_response, encode_request
from orchestrator.protocol.record_batch import build_batch, encode_batch, records_at_or_after
from tests.support.broker_harness import ControllerWriter, in_process_broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MAX_FRAME_BYTES = 1 << 20
SOCKET_TIMEOUT_S = 10.0
SENTINEL_ID = 999_999
PRODUCE, FETCH, LIST_OFFSETS = ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS
VERSIONS = {PRODUCE: (3, 9), FETCH: (4, 12), LIST_OFFSETS: (1, 9)}
# What a partition may answer to bad values; never UNKNOWN_SERVER_ERROR (-1): that is a bug showing through.
PRODUCE_REFUSALS = {2, 10, 21, 32, 43, 76, 87}  # corrupt, too large, acks, timestamp, format, compression, record
FETCH_CODES = {0, 1, 3, 6, 74, 75}
LIST_OFFSETS_CODES = {0, 3, 6, 35, 42, 74, 75}
PROPERTY = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def batch(*values: bytes) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch(build_batch(0, [(None, v, now, ()) for v in values]))


def produce_body(records: bytes | None, *, topic: str = "t", partition: int = 0, acks: int = -1) -> dict[str, Any]:
    data = [{"index": partition, "records": records}]
    return {"acks": acks, "timeout_ms": 1000, "topic_data": [{"name": topic, "partition_data": data}]}


def fetch_body(
    offset: int = 0,
    *,
    topic: str = "t",
    partition: int = 0,
    partition_max_bytes: int = 1 << 20,
    max_bytes: int = 1 << 20,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    current_leader_epoch: int = -1,
) -> dict[str, Any]:
    p = {
        "partition": partition,
        "fetch_offset": offset,
        "partition_max_bytes": partition_max_bytes,
        "current_leader_epoch": current_leader_epoch,
        "log_start_offset": -1,
        "last_fetched_epoch": -1,
    }
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [p]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def list_offsets_body(timestamp: int, *, topic: str = "t", partition: int = 0, epoch: int = -1) -> dict[str, Any]:
    p = {"partition_index": partition, "timestamp": timestamp, "current_leader_epoch": epoch}
    return {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [p]}]}


@dataclass
class Outcome:
    answer: dict[str, Any] | None  # the bad request's response, if it had one
    stayed_open: bool  # the sentinel after it was answered


class ServedBroker:
    """A broker agent's data plane behind a KafkaServer on 127.0.0.1, in an event loop on its own thread."""

    def __init__(self, broker: BrokerAgent) -> None:
        self.broker = broker
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="served-broker", daemon=True)
        self.thread.start()
        plane = broker.data_plane
        self.server = KafkaServer(
            name="broker-1",
            host="127.0.0.1",
            port=0,
            handlers={PRODUCE: plane.produce, FETCH: plane.fetch, LIST_OFFSETS: plane.list_offsets},
            max_frame_bytes=MAX_FRAME_BYTES,
        )
        self.address = self.call(self.server.start())
        self._correlation = 0

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        try:
            self.call(self.server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()

    def next_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def send(self, data: bytes, api_key: int | None = None, version: int | None = None) -> Outcome:
        """Send ``data`` (whole frames or not) then the sentinel on one connection; what came back. Returns once the
        server has closed its side too (every connection it accepted is closed: none is left behind)."""
        try:
            return self._exchange(data, api_key, version)
        finally:
            deadline = time.monotonic() + SOCKET_TIMEOUT_S
            while self.server.closed_connections < self.server.accepted_connections and time.monotonic() < deadline:
                time.sleep(0.001)
            assert self.server.closed_connections == self.server.accepted_connections

    def _exchange(self, data: bytes, api_key: int | None, version: int | None) -> Outcome:
        sentinel = encode_request(ApiKey.API_VERSIONS, 0, SENTINEL_ID, {})
        answer: dict[str, Any] | None = None
        with socket.create_connection(self.address, timeout=SOCKET_TIMEOUT_S) as sock:
            try:
                sock.sendall(data + sentinel)
            except OSError:  # closed while we still sent: the server refused the frame
                return Outcome(None, False)
            while True:
                payload = _read_frame(sock)
                if payload is None:
                    return Outcome(answer, False)
                correlation_id = struct.unpack_from(">i", payload)[0]
                if correlation_id == SENTINEL_ID:
                    return Outcome(answer, True)
                assert api_key is not None and version is not None, "an answer to bytes that are no request"
                assert answer is None, "two answers to one request"
                answer = decode_response(payload, api_key, version)[1]

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Outcome:
        return self.send(encode_request(api_key, version, self.next_id(), body), api_key, version)

    def good_client_is_served(self) -> None:
        value = b"good-%d" % self.next_id()
        produced = self.request(PRODUCE, 9, produce_body(batch(value), topic="good"))
        assert produced.stayed_open and produced.answer is not None
        entry = produced.answer["responses"][0]["partition_responses"][0]
        assert entry["error_code"] == 0, entry
        fetched = self.request(FETCH, 12, fetch_body(entry["base_offset"], topic="good"))
        assert fetched.stayed_open and fetched.answer is not None
        records = fetched.answer["responses"][0]["partitions"][0]["records"]
        assert [r.value for _, _, r in records_at_or_after(records, entry["base_offset"])] == [value]
        assert self.server.handler_failures == 0


def _read_frame(sock: socket.socket) -> bytes | None:
    """One response payload, or None at end of stream (or a reset: the server closed with our bytes unread)."""
    try:
        head = _read_exactly(sock, 4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        assert 0 <= size <= 64 * 1024 * 1024, size
        return _read_exactly(sock, size)
    except ConnectionResetError:
        return None


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 16))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[ServedBroker]:
    """Topic ``t`` (two partitions, three records in partition 0), ``good`` for the good client, ``elsewhere`` led by
    broker 2; all logs local."""
    tmp = tmp_path_factory.mktemp("data-plane-bad-input")
    with in_process_broker(tmp, segment_ms=24 * 3_600_000) as (broker, writer):
        yield from _serving(broker, writer)


def _serving(broker: BrokerAgent, writer: ControllerWriter) -> Iterator[ServedBroker]:
    broker.data_dir.mkdir(parents=True)
    writer.create_topic("t", partitions=2, tiered=False)
    writer.create_topic("good", tiered=False)
    writer.create_topic("elsewhere", leader=2, tiered=False)
    asyncio.run(broker._metadata_round())
    served = ServedBroker(broker)
    try:
        first = served.request(PRODUCE, 9, produce_body(batch(b"r0", b"r1", b"r2")))
        assert first.answer is not None and first.answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        served.good_client_is_served()
        yield served
    finally:
        served.close()


def partition_code(outcome: Outcome, api_key: int) -> int:
    assert outcome.stayed_open and outcome.answer is not None, outcome
    answer = outcome.answer
    if api_key == PRODUCE:
        return answer["responses"][0]["partition_responses"][0]["error_code"]
    if api_key == FETCH:
        assert answer["error_code"] == 0
        return answer["responses"][0]["partitions"][0]["error_code"]
    return answer["topics"][0]["partitions"][0]["error_code"]


def log_end_offset(served: ServedBroker, partition: int = 0) -> int:
    outcome = served.request(LIST_OFFSETS, 9, list_offsets_body(-1, partition=partition))
    assert outcome.answer is not None
    return outcome.answer["topics"][0]["partitions"][0]["offset"]


# --- Produce: records that are no record batch get an error, the connection stays


def _flipped(raw: bytes, at: int) -> bytes:
    out = bytearray(raw)
    out[at] ^= 0xFF
    return bytes(out)


GOOD = batch(b"a", b"b")
BAD_RECORDS = {
    "random bytes": bytes(range(7, 250, 3)) * 3,
    "a truncated batch": GOOD[:-7],
    "only a batch header": GOOD[:61],
    "a few bytes": b"\x00\x01\x02",
    "a flipped CRC byte": _flipped(GOOD, 18),
    "a huge declared batch length": GOOD[:8] + struct.pack(">i", 2**31 - 1) + GOOD[12:],
    "a negative declared batch length": GOOD[:8] + struct.pack(">i", -1) + GOOD[12:],
    "magic 1": GOOD[:16] + b"\x01" + GOOD[17:],
    "two batches": GOOD + GOOD,
    "no records": None,
    "empty records": b"",
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
@pytest.mark.parametrize("version", [3, 9])
def test_records_that_are_no_record_batch_get_an_error_and_append_nothing(served, case, version):
    before = log_end_offset(served, 1)
    outcome = served.request(PRODUCE, version, produce_body(BAD_RECORDS[case], partition=1))
    assert partition_code(outcome, PRODUCE) in {2, 87}, case  # CORRUPT_MESSAGE or INVALID_RECORD
    assert log_end_offset(served, 1) == before
    served.good_client_is_served()


def test_a_failed_produce_with_acks_0_closes_its_connection_and_a_good_one_is_not_answered(served):
    failed = served.request(PRODUCE, 9, produce_body(b"garbage" * 20, partition=1, acks=0))
    assert (failed.answer, failed.stayed_open) == (None, False)
    unanswered = served.request(PRODUCE, 9, produce_body(batch(b"quiet"), partition=1, acks=0))
    assert (unanswered.answer, unanswered.stayed_open) == (None, True)  # no response, the connection stays
    served.good_client_is_served()


def test_a_records_field_declaring_more_bytes_than_the_frame_holds_closes_the_connection(served):
    marker = b"M" * 64
    frame = bytearray(encode_request(PRODUCE, 8, served.next_id(), produce_body(marker)))  # v8: int32 lengths
    at = bytes(frame).index(marker) - 4
    assert struct.unpack_from(">i", frame, at)[0] == len(marker)
    for declared in (2**31 - 1, len(marker) + 1, -5):
        struct.pack_into(">i", frame, at, declared)
        assert served.send(bytes(frame), PRODUCE, 8) == Outcome(None, False), declared
    served.good_client_is_served()


@pytest.mark.parametrize("api_key", [PRODUCE, FETCH, LIST_OFFSETS])
def test_a_valid_header_with_a_body_cut_short_closes_the_connection(served, api_key):
    lo, hi = VERSIONS[api_key]
    bodies = {PRODUCE: produce_body(GOOD), FETCH: fetch_body(), LIST_OFFSETS: list_offsets_body(-1)}
    for version in (lo, hi):
        whole = encode_request(api_key, version, served.next_id(), bodies[api_key])[4:]
        for keep in (len(whole) - 1, len(whole) // 2, 12):
            cut = whole[:keep]
            assert served.send(struct.pack(">i", len(cut)) + cut, api_key, version) == Outcome(None, False)
    served.good_client_is_served()


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">i", 2**31 - 1) + b"\x00" * 16,  # a frame far larger than max_frame_bytes
        struct.pack(">i", MAX_FRAME_BYTES + 1),
        struct.pack(">i", -1),
        struct.pack(">i", 2) + b"\x00\x00",  # shorter than a request header
    ],
    ids=["huge", "just too large", "negative", "tiny"],
)
def test_frames_that_do_not_frame_close_the_connection(served, data):
    assert served.send(data) == Outcome(None, False)
    served.good_client_is_served()


# --- Fetch and ListOffsets: absurd values get a Kafka error, or an empty answer


@pytest.mark.parametrize(
    "body,code,values",
    [
        (fetch_body(partition=-1), 3, []),
        (fetch_body(partition=2**31 - 1), 3, []),
        (fetch_body(topic=""), 3, []),
        (fetch_body(topic="elsewhere"), 6, []),
        (fetch_body(-1), 1, []),
        (fetch_body(-(2**63)), 1, []),
        (fetch_body(2**63 - 1), 1, []),
        (fetch_body(0, max_bytes=0, partition_max_bytes=0), 0, [b"r0", b"r1", b"r2"]),  # KIP-74: one batch
        (fetch_body(0, max_bytes=-5, partition_max_bytes=-(2**31)), 0, [b"r0", b"r1", b"r2"]),
        (fetch_body(1, max_wait_ms=-1, min_bytes=-1), 0, [b"r1", b"r2"]),
        (fetch_body(3, max_wait_ms=50, min_bytes=2**31 - 1), 0, []),  # waits its 50 ms, then answers empty
        (fetch_body(0, current_leader_epoch=2**31 - 1), 75, []),
        (fetch_body(0, current_leader_epoch=-(2**31)), 0, [b"r0", b"r1", b"r2"]),  # any negative: none given
    ],
)
def test_fetch_with_absurd_values_gets_an_error_or_an_empty_answer(served, body, code, values):
    outcome = served.request(FETCH, 12, body)
    assert partition_code(outcome, FETCH) == code
    assert outcome.answer is not None
    entry = outcome.answer["responses"][0]["partitions"][0]
    offset = body["topics"][0]["partitions"][0]["fetch_offset"]
    assert [r.value for _, _, r in records_at_or_after(entry["records"] or b"", offset)] == values
    served.good_client_is_served()


@pytest.mark.parametrize(
    "body,version,code",
    [
        (list_offsets_body(-1, partition=-1), 9, 3),
        (list_offsets_body(-1, topic="nope"), 1, 3),
        (list_offsets_body(-7), 9, 42),
        (list_offsets_body(-(2**63)), 9, 42),
        (list_offsets_body(-3), 6, 35),
        (list_offsets_body(2**63 - 1), 9, 0),
        (list_offsets_body(-1, epoch=2**31 - 1), 9, 75),
        (list_offsets_body(-1, topic="elsewhere"), 9, 6),
    ],
)
def test_list_offsets_with_absurd_values_gets_an_error(served, body, version, code):
    assert partition_code(served.request(LIST_OFFSETS, version, body), LIST_OFFSETS) == code
    served.good_client_is_served()


# --- random input, bounded


@PROPERTY
@given(records=st.binary(min_size=0, max_size=2_000), version=st.integers(3, 9), acks=st.sampled_from([1, -1]))
def test_random_records_get_a_produce_error_and_the_server_keeps_serving(served, records, version, acks):
    outcome = served.request(PRODUCE, version, produce_body(records, partition=1, acks=acks))
    assert partition_code(outcome, PRODUCE) in PRODUCE_REFUSALS
    served.good_client_is_served()


@PROPERTY
@given(data=st.data())
def test_a_good_batch_with_random_bytes_overwritten_is_refused_or_served(served, data):
    raw = bytearray(batch(b"k" * 10, b"v" * 30))
    start = data.draw(st.integers(0, len(raw) - 1))
    patch = data.draw(st.binary(min_size=1, max_size=8))
    raw[start : start + len(patch)] = patch
    outcome = served.request(PRODUCE, 9, produce_body(bytes(raw), partition=1))
    assert partition_code(outcome, PRODUCE) in PRODUCE_REFUSALS | {0}
    served.good_client_is_served()


int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@PROPERTY
@given(
    offset=st.one_of(st.integers(-3, 6), int64),
    partition=st.one_of(st.integers(-2, 3), int32),
    max_bytes=int32,
    partition_max_bytes=int32,
    min_bytes=int32,
    max_wait_ms=st.integers(-(2**31), 50),  # anything longer is capped at 30 s; not worth waiting for here
    epoch=st.one_of(st.just(-1), int32),
    version=st.integers(4, 12),
)
def test_random_fetch_values_get_a_kafka_error_or_records(
    served, offset, partition, max_bytes, partition_max_bytes, min_bytes, max_wait_ms, epoch, version
):
    body = fetch_body(
        offset,
        partition=partition,
        max_bytes=max_bytes,
        partition_max_bytes=partition_max_bytes,
        min_bytes=min_bytes,
        max_wait_ms=max_wait_ms,
        current_leader_epoch=epoch,
    )
    assert partition_code(served.request(FETCH, version, body), FETCH) in FETCH_CODES
    assert served.server.handler_failures == 0


@PROPERTY
@given(
    timestamp=st.one_of(st.integers(-8, 2), int64),
    partition=st.one_of(st.integers(-2, 3), int32),
    epoch=st.one_of(st.just(-1), int32),
    version=st.integers(1, 9),
)
def test_random_list_offsets_values_get_a_kafka_error_or_an_offset(served, timestamp, partition, epoch, version):
    outcome = served.request(LIST_OFFSETS, version, list_offsets_body(timestamp, partition=partition, epoch=epoch))
    assert partition_code(outcome, LIST_OFFSETS) in LIST_OFFSETS_CODES
    assert served.server.handler_failures == 0


@PROPERTY
@given(
    api_key=st.sampled_from([PRODUCE, FETCH, LIST_OFFSETS]),
    data=st.data(),
    garbage=st.binary(min_size=0, max_size=300),
)
def test_a_valid_header_with_a_garbage_body_closes_the_connection_or_is_answered(served, api_key, data, garbage):
    version = data.draw(st.integers(*VERSIONS[api_key]), label="version")
    header = encode_request(api_key, version, served.next_id(), _minimal(api_key))
    header_only = header[4 : len(header) - len(_body_bytes(api_key, version))]
    payload = header_only + garbage
    try:
        request = decode_request(payload)
    except ProtocolError:
        request = None
    if request is not None and api_key == FETCH:
        assume(request.body["min_bytes"] <= 0 or request.body["max_wait_ms"] <= 100)  # a long poll: not waited for
    outcome = served.send(struct.pack(">i", len(payload)) + payload, api_key, version)
    if request is None:
        assert outcome == Outcome(None, False)  # it does not decode: the connection goes
    elif api_key == PRODUCE and request.body["acks"] == 0:
        assert outcome.answer is None  # no response: an open connection or, after a failure, a closed one
    else:
        assert outcome.stayed_open and outcome.answer is not None  # it decoded: answered like any request
    served.good_client_is_served()


def _minimal(api_key: int) -> dict[str, Any]:
    return {PRODUCE: produce_body(None), FETCH: fetch_body(), LIST_OFFSETS: list_offsets_body(-1)}[api_key]


def _body_bytes(api_key: int, version: int) -> bytes:
    """The encoded body of :func:`_minimal` alone (a request less its header)."""
    from orchestrator.protocol import codec
    from orchestrator.protocol.schema import request_schema

    schema = request_schema(api_key)
    assert schema is not None
    return codec.encode(schema, version, _minimal(api_key))
