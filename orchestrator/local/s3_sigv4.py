"""Whether a request to the embedded S3 carries a valid AWS Signature Version 4 made with the cluster's key pair,
and, when it does not, the refusal S3 itself would answer.

:func:`check` is pure (the request, the pair and the time are given): it reads the signature from the
``Authorization`` header or from a presigned URL's query, recomputes it with botocore's own S3 signers
(:class:`botocore.auth.S3SigV4Auth`, :class:`botocore.auth.S3SigV4QueryAuth`: the canonical request, the string to
sign and the HMAC chain are theirs, not ours) over exactly the headers the client says it signed, and compares the
two in constant time. :mod:`.embedded_s3` puts it in front of moto's server.

Invariants:
* Nothing passes without a signature made with the pair: an anonymous request is ``AccessDenied``, another access
  key id ``InvalidAccessKeyId``, another secret or an altered request ``SignatureDoesNotMatch``, each with S3's
  status, code, message and XML fields (:meth:`Refusal.xml`). Signature Version 2 (header or presigned URL) is
  ``InvalidRequest``, as in the S3 regions that take only Version 4.
* A signed payload hash (``x-amz-content-sha256`` a hex digest) must be the body's: ``XAmzContentSHA256Mismatch``.
  ``UNSIGNED-PAYLOAD`` and the streaming values are accepted as S3 accepts them; the chunk signatures of
  ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD`` are not checked (no client of this project sends it; the seed signature,
  which covers every signed header, is).
* A request's time must be within 15 minutes of ``now`` (``RequestTimeTooSkewed``); a presigned URL is refused
  once its ``X-Amz-Expires`` has passed (``AccessDenied``, "Request has expired"), as S3 does.
* The secret key appears in no refusal: only the access key id, the string to sign and the canonical request,
  which S3 also returns.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote
from xml.sax.saxutils import escape

from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth, SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials

from orchestrator.local.s3_keys import KeyPair

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "s3"
MAX_SKEW = dt.timedelta(minutes=15)
MAX_PRESIGNED_EXPIRES_S = 604_800  # seven days, S3's limit
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_UNRESERVED = "-_.~"  # SigV4's URI encoding leaves these (and letters and digits) as they are
_HEX_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_HEADER_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=(?P<credential>[^,\s]+)\s*,\s*SignedHeaders=(?P<signed>[^,\s]+)\s*,"
    r"\s*Signature=(?P<signature>[0-9a-fA-F]+)\s*$"
)
_QUERY_AUTH_PARAMS = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Signature")


@dataclass(frozen=True, slots=True)
class S3Request:
    """One request as the server received it: the path and query exactly as sent (still percent-encoded), the
    headers by lower-case name."""

    method: str
    raw_path: str
    raw_query: str
    headers: Mapping[str, str]
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Refusal:
    """S3's answer to a request it does not serve: HTTP status, error code, message and the extra XML fields."""

    status: int
    code: str
    message: str
    fields: tuple[tuple[str, str], ...] = ()

    def xml(self, request_id: str) -> bytes:
        """The body S3 sends: ``<Error><Code>..</Code><Message>..</Message>..<RequestId>..</RequestId></Error>``."""
        parts = [f"<Code>{escape(self.code)}</Code>", f"<Message>{escape(self.message)}</Message>"]
        parts += [f"<{name}>{escape(value)}</{name}>" for name, value in self.fields]
        parts.append(f"<RequestId>{escape(request_id)}</RequestId>")
        return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error>' + "".join(parts) + "</Error>").encode()


ACCESS_DENIED = Refusal(403, "AccessDenied", "Access Denied")
NO_DATE = Refusal(403, "AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
UNSUPPORTED = Refusal(
    400,
    "InvalidRequest",
    "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
)


def _malformed(why: str) -> Refusal:
    return Refusal(400, "AuthorizationHeaderMalformed", f"The authorization header is malformed; {why}")


def _query_malformed(why: str) -> Refusal:
    return Refusal(400, "AuthorizationQueryParametersError", why)


@dataclass(frozen=True, slots=True)
class _Signed:
    """What the client says it signed with: the parts of its credential scope, the headers, its signature."""

    access_key_id: str
    scope_date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str
    amz_date: str


def check(request: S3Request, pair: KeyPair, *, now: dt.datetime) -> Refusal | None:
    """None when ``request`` is signed with ``pair`` (and its body matches its signed hash); else S3's refusal."""
    query = _query_pairs(request.raw_query)
    authorization = request.headers.get("authorization")
    names = {name for name, _ in query}
    presigned = "X-Amz-Signature" in names
    if authorization is None and not presigned:
        # A Signature Version 2 presigned URL (botocore's default for presigning S3 unless s3v4 is configured).
        return UNSUPPORTED if {"Signature", "AWSAccessKeyId"} <= names else ACCESS_DENIED
    if authorization is not None:
        signed = _from_header(authorization, request.headers)
        signer_class: type[SigV4Auth] = _HeaderVerifier
        params = query
    else:
        signed = _from_query(query)
        signer_class = _QueryVerifier
        params = [(name, value) for name, value in query if name != "X-Amz-Signature"]
    if isinstance(signed, Refusal):
        return signed
    refused = _check_scope(signed, pair, now=now) or (_check_expiry(query, signed, now=now) if presigned else None)
    if refused is not None:
        return refused
    verifier = signer_class(Credentials(pair.access_key_id, pair.secret_access_key), SERVICE, signed.region)
    aws_request = _aws_request(request, signed, params)
    canonical = verifier.canonical_request(aws_request)
    string_to_sign = verifier.string_to_sign(aws_request, canonical)
    expected = verifier.signature(string_to_sign, aws_request)
    if not hmac.compare_digest(expected, signed.signature.lower()):
        return Refusal(
            403,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. Check your key and "
            "signing method.",
            (
                ("AWSAccessKeyId", signed.access_key_id),
                ("StringToSign", string_to_sign),
                ("SignatureProvided", signed.signature),
                ("CanonicalRequest", canonical),
            ),
        )
    return _check_payload(request) if authorization is not None else None


def _from_header(authorization: str, headers: Mapping[str, str]) -> _Signed | Refusal:
    if not authorization.startswith(ALGORITHM):
        return UNSUPPORTED  # SigV2 ("AWS key:signature") and anything else
    found = _HEADER_AUTH.match(authorization)
    if found is None:
        return _malformed("it must hold Credential, SignedHeaders and Signature.")
    amz_date = headers.get("x-amz-date")
    if amz_date is None:
        return NO_DATE
    return _signed(found["credential"], found["signed"], found["signature"], amz_date, _malformed)


def _from_query(query: list[tuple[str, str]]) -> _Signed | Refusal:
    params = dict(query)
    missing = [name for name in _QUERY_AUTH_PARAMS if name not in params]
    if missing:
        return _query_malformed(f"Query-string authentication version 4 requires the {', '.join(missing)} parameters")
    if params["X-Amz-Algorithm"] != ALGORITHM:
        return _query_malformed(f'X-Amz-Algorithm only supports "{ALGORITHM}"')
    return _signed(
        params["X-Amz-Credential"],
        params["X-Amz-SignedHeaders"],
        params["X-Amz-Signature"],
        params["X-Amz-Date"],
        _query_malformed,
    )


def _signed(
    credential: str, signed_headers: str, signature: str, amz_date: str, malformed: Callable[[str], Refusal]
) -> _Signed | Refusal:
    scope = credential.split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        return malformed("the Credential parameter must be <access key id>/<date>/<region>/<service>/aws4_request.")
    access_key_id, scope_date, region, service, _ = scope
    names = tuple(signed_headers.lower().split(";"))
    return _Signed(access_key_id, scope_date, region, service, names, signature, amz_date)


def _check_scope(signed: _Signed, pair: KeyPair, *, now: dt.datetime) -> Refusal | None:
    if signed.access_key_id != pair.access_key_id:
        return Refusal(
            403,
            "InvalidAccessKeyId",
            "The AWS Access Key Id you provided does not exist in our records.",
            (("AWSAccessKeyId", signed.access_key_id),),
        )
    if signed.service != SERVICE:
        return _malformed(f"incorrect service '{signed.service}'. This endpoint belongs to '{SERVICE}'.")
    if "host" not in signed.signed_headers:
        return _malformed("the host header must be signed.")
    try:
        when = dt.datetime.strptime(signed.amz_date, _AMZ_DATE).replace(tzinfo=dt.UTC)
    except ValueError:
        return NO_DATE
    if signed.scope_date != signed.amz_date[:8]:
        return _malformed(f"invalid credential date '{signed.scope_date}'. Date is not the same as X-Amz-Date.")
    if abs(now - when) > MAX_SKEW:
        return Refusal(
            403,
            "RequestTimeTooSkewed",
            "The difference between the request time and the current time is too large.",
            (
                ("RequestTime", signed.amz_date),
                ("ServerTime", now.strftime(_AMZ_DATE)),
                ("MaxAllowedSkewMilliseconds", str(int(MAX_SKEW.total_seconds() * 1000))),
            ),
        )
    return None


def _check_expiry(query: list[tuple[str, str]], signed: _Signed, *, now: dt.datetime) -> Refusal | None:
    expires = dict(query).get("X-Amz-Expires", "")
    if not expires.isdigit() or not 1 <= int(expires) <= MAX_PRESIGNED_EXPIRES_S:
        return _query_malformed("X-Amz-Expires must be a number of seconds from 1 to 604800")
    signed_at = dt.datetime.strptime(signed.amz_date, _AMZ_DATE).replace(tzinfo=dt.UTC)
    if now > signed_at + dt.timedelta(seconds=int(expires)):
        return Refusal(
            403,
            "AccessDenied",
            "Request has expired",
            (("X-Amz-Expires", expires), ("ServerTime", now.strftime(_AMZ_DATE))),
        )
    return None


def _check_payload(request: S3Request) -> Refusal | None:
    claimed = request.headers.get("x-amz-content-sha256", "")
    if not _HEX_SHA256.match(claimed):
        return None  # UNSIGNED-PAYLOAD, the streaming forms, or none given (then the signature covered the body)
    computed = hashlib.sha256(request.body).hexdigest()
    if hmac.compare_digest(claimed, computed):
        return None
    return Refusal(
        400,
        "XAmzContentSHA256Mismatch",
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
        (("ClientComputedContentSHA256", claimed), ("S3ComputedContentSHA256", computed)),
    )


def _query_pairs(raw_query: str) -> list[tuple[str, str]]:
    """The query's (name, value) pairs decoded; ``+`` stays ``+`` (S3 signs the bytes, not a form encoding)."""
    pairs = []
    for part in raw_query.split("&") if raw_query else ():
        name, _, value = part.partition("=")
        pairs.append((unquote(name), unquote(value)))
    return pairs


def _aws_request(request: S3Request, signed: _Signed, params: list[tuple[str, str]]) -> AWSRequest:
    """The request as botocore's signers see it: the path and query encoded as SigV4 encodes them (each byte once,
    whatever encoding the client sent; botocore sorts the query), only the headers the client signed, the body."""
    path = quote(unquote(request.raw_path), safe="/~")
    query = "&".join(f"{quote(name, safe=_UNRESERVED)}={quote(value, safe=_UNRESERVED)}" for name, value in params)
    headers = {name: request.headers.get(name, "") for name in signed.signed_headers}
    host = headers.get("host", "localhost")
    url = f"http://{host}{path}" + (f"?{query}" if query else "")
    aws_request = AWSRequest(method=request.method, url=url, headers=headers, data=request.body)
    aws_request.context["timestamp"] = signed.amz_date
    aws_request.context["signed_headers"] = signed.signed_headers
    return aws_request


def _exactly_the_signed_headers(request: AWSRequest) -> HTTPHeaders:
    """The headers the client listed in SignedHeaders, none added or dropped (botocore's own choice of headers to
    sign leaves some out, e.g. user-agent, which another client may well sign)."""
    chosen = HTTPHeaders()
    for name in request.context["signed_headers"]:
        chosen[name] = request.headers.get(name, "")
    return chosen


class _HeaderVerifier(S3SigV4Auth):
    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        return _exactly_the_signed_headers(request)


class _QueryVerifier(S3SigV4QueryAuth):
    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        return _exactly_the_signed_headers(request)
