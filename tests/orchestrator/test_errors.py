"""The error tree: every error says what it is, declares whether it is retried, and carries a wire code only when
it is a Kafka error; servers translate the rest at their boundary."""

import pytest

import orchestrator.protocol.framing  # noqa: F401 - these modules define leaves of the tree
import remote_storage.export
import remote_storage.inventory
import remote_storage.keys
import remote_storage.s3
import remote_storage.scan.job
import remote_storage.scan.summary  # noqa: F401
from orchestrator import errors as e
from remote_storage.retry import is_retriable_s3_error

pytestmark = pytest.mark.unit


def _subclasses(cls: type[e.TieredError]) -> list[type[e.TieredError]]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def test_every_error_class_declares_its_name_and_retriability_in_its_own_body():
    classes = _subclasses(e.TieredError)
    assert len(classes) > 40
    for cls in classes:
        assert "name" in cls.__dict__ and "retriable" in cls.__dict__, cls
        assert cls.name.isupper() and " " not in cls.name, cls


def test_a_class_that_leaves_retriability_to_inheritance_is_refused_when_defined():
    with pytest.raises(TypeError, match="must declare retriable"):

        class Vague(e.RemoteStorageError):
            name = "VAGUE"


def test_only_kafka_errors_carry_a_wire_code_and_each_code_is_one_class():
    for cls in _subclasses(e.TieredError):
        assert hasattr(cls, "code") == issubclass(cls, e.KafkaError), cls
    kafka = [cls for cls in _subclasses(e.KafkaError) if cls is not e.UnknownServerError]
    codes = [cls.code for cls in kafka if e.for_code(cls.code) is cls]
    assert len(codes) == len(set(codes)) and e.for_code(10950) is e.TieredStorageDisablementInProgress


@pytest.mark.parametrize(
    "error,text",
    [
        (e.InvalidRequest("bad policy 'x'"), "INVALID_REQUEST (42): bad policy 'x'"),
        (e.InvalidArgument("'3 days' is not a duration"), "INVALID_ARGUMENT: '3 days' is not a duration"),
        (e.MissingCredentialsError("list on bucket b"), "MISSING_CREDENTIALS: list on bucket b. Give the"),
    ],
)
def test_an_error_prints_its_own_name_its_code_only_if_kafka_and_its_hint(error, text):
    assert str(error).startswith(text)


def test_a_storage_failure_is_failed_for_good_and_the_s3_retry_layer_does_not_retry_it():
    assert not e.RemoteStorageError.retriable
    assert not is_retriable_s3_error(e.RemoteStorageError("put failed for k: SlowDown"))


@pytest.mark.parametrize(
    "error,code",
    [
        (e.StaleTieredEpoch("x"), 10951),
        (e.RemoteStorageError("delete failed"), 56),
        (e.MissingCredentialsError("no keys"), 56),
        (e.ProtocolError("truncated"), -1),
    ],
)
def test_a_server_answers_every_error_with_a_kafka_code(error, code):
    wire = e.as_wire_error(error)
    assert isinstance(wire, e.KafkaError) and wire.code == code
    assert wire is error or error.name in wire.message
