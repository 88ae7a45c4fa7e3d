"""The one retry layer for S3 calls.

botocore's own retries are switched off (``total_max_attempts=1`` in :func:`remote_storage.s3.make_s3_client`)
and every S3 call goes through :func:`s3_retrying`, so a failure is retried exactly ``S3_MAX_ATTEMPTS`` times,
never botocore's attempts multiplied by ours. What is retriable is decided by :func:`is_retriable_s3_error`:
throttling (503 SlowDown), 5xx, and connection-level failures (reset, closed, timeouts). 4xx answers such as
AccessDenied or NoSuchBucket are permanent and surface at once.

The schedule is :data:`S3_BACKOFF`, exponential backoff with full jitter (:mod:`orchestrator.backoff`, as tenacity's
``wait``); ``sleep`` and ``rng`` are injected so tests assert the schedule without waiting. This module is also
where botocore's failures are told apart for the errors raised from them: :func:`is_missing_credentials` (no
credentials to sign with: :class:`~orchestrator.errors.MissingCredentialsError`, whatever the call) and
:func:`is_not_found`.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from orchestrator.backoff import Backoff, tenacity_wait

if TYPE_CHECKING:
    import botocore.exceptions as bce

log = structlog.get_logger(__name__)

S3_MAX_ATTEMPTS = 8
S3_BACKOFF = Backoff(base=0.05, cap=5.0)  # seconds: a random wait of at most 0.05, 0.1, 0.2 ... 5
_RNG = random.Random()
_RETRIABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
        "503",
        "500",
        "502",
        "504",
    }
)
_RETRIABLE_BOTOCORE = (
    "ConnectionError",  # EndpointConnectionError, ConnectTimeoutError, ...
    "HTTPClientError",  # ConnectionClosedError (a reset mid-request), ReadTimeoutError, ...
    "ResponseStreamingError",
)


def botocore_errors(*names: str) -> tuple[type[Exception], ...]:
    """botocore's exception classes of these names, or none while botocore is not loaded: then no S3 client has been
    built in this process (:class:`remote_storage.s3.LazyS3Client` builds one on first use), so no exception can be
    one of them. A process that never calls S3 (a broker with no tiered topic) never loads botocore; the result fits
    ``except`` and ``isinstance`` either way (an empty tuple matches nothing)."""
    module = sys.modules.get("botocore.exceptions")
    return () if module is None else tuple(getattr(module, name) for name in names)


def call_errors(*names: str) -> tuple[type[Exception], ...]:
    """What a failed S3 call may raise: botocore's ``names`` (:func:`botocore_errors`) and a dropped connection. For
    an ``except`` clause, which evaluates it when an exception reaches it: after the call built the client."""
    return (*botocore_errors(*names), ConnectionError)


T = TypeVar("T")


_MISSING_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError")
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def error_code(exc: bce.ClientError) -> str:
    """The S3 error code of a client error (``NoSuchKey``, ``SlowDown``, ``AccessDenied``...)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_missing_credentials(exc: BaseException) -> bool:
    """botocore found no credentials (or half of them) to sign the request with."""
    return isinstance(exc, botocore_errors(*_MISSING_CREDENTIALS))


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, botocore_errors("ClientError")) and error_code(exc) in _NOT_FOUND_CODES  # type: ignore[arg-type]


def is_retriable_code(code: str) -> bool:
    return code in _RETRIABLE_CODES


def is_retriable_s3_error(exc: BaseException) -> bool:
    if isinstance(exc, botocore_errors("ClientError")):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)  # type: ignore[attr-defined]
        return is_retriable_code(error_code(exc)) or int(status) >= 500  # type: ignore[arg-type]
    retriable = (*botocore_errors(*_RETRIABLE_BOTOCORE), ConnectionResetError)
    return isinstance(exc, retriable) or getattr(exc, "retriable", False) is True


def _log_retry(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.warning(
        "s3.retry",
        attempt=state.attempt_number,
        error=type(exc).__name__ if exc else None,
        detail=str(exc)[:200] if exc else None,
    )


def s3_retrying(
    *, sleep: Callable[[float], None] = time.sleep, max_attempts: int = S3_MAX_ATTEMPTS, rng: random.Random = _RNG
) -> Retrying:
    return Retrying(
        retry=retry_if_exception(is_retriable_s3_error),
        wait=tenacity_wait(S3_BACKOFF, rng),
        stop=stop_after_attempt(max_attempts),
        sleep=sleep,
        before_sleep=_log_retry,
        reraise=True,
    )


def call_with_retry(fn: Callable[..., T], *args: Any, retrying: Retrying, **kwargs: Any) -> T:
    return retrying(fn, *args, **kwargs)
