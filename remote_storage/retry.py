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
import time
from collections.abc import Callable
from typing import Any, TypeVar

import botocore.exceptions as bce
import structlog
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from orchestrator.backoff import Backoff, tenacity_wait

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
_RETRIABLE_EXCEPTIONS = (
    bce.ConnectionError,  # EndpointConnectionError, ConnectTimeoutError, ...
    bce.HTTPClientError,  # ConnectionClosedError (a reset mid-request), ReadTimeoutError, ...
    bce.ResponseStreamingError,
    ConnectionResetError,
)

T = TypeVar("T")


_MISSING_CREDENTIALS = (bce.NoCredentialsError, bce.PartialCredentialsError, bce.CredentialRetrievalError)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


def error_code(exc: bce.ClientError) -> str:
    """The S3 error code of a client error (``NoSuchKey``, ``SlowDown``, ``AccessDenied``...)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_missing_credentials(exc: BaseException) -> bool:
    """botocore found no credentials (or half of them) to sign the request with."""
    return isinstance(exc, _MISSING_CREDENTIALS)


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, bce.ClientError) and error_code(exc) in _NOT_FOUND_CODES


def is_retriable_code(code: str) -> bool:
    return code in _RETRIABLE_CODES


def is_retriable_s3_error(exc: BaseException) -> bool:
    if isinstance(exc, bce.ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return is_retriable_code(error_code(exc)) or int(status) >= 500
    return isinstance(exc, _RETRIABLE_EXCEPTIONS) or getattr(exc, "retriable", False) is True


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
