"""The embedded S3's signature check, on requests botocore's own S3 signers signed: the pair's signature passes,
and everything else gets S3's refusal (status, code, message), with no secret in it.

Pure: each request is signed by botocore (header or presigned query) and checked at the time it was signed, or at a
time given; nothing is served.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import xml.etree.ElementTree as ET
from urllib.parse import urlsplit

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from orchestrator.local.s3_keys import KeyPair
from orchestrator.local.s3_sigv4 import S3Request, check

pytestmark = pytest.mark.unit

PAIR = KeyPair("AKIDEXAMPLE000000001", "the-cluster-secret-key-0123456789abcdefgh")
HOST = "127.0.0.1:41234"
SIGNED_AT = dt.datetime(2026, 11, 28, 9, 30, tzinfo=dt.UTC)


def _signed(
    method: str = "PUT",
    path: str = "/tiered/orders-1/0/00000000000000000000-abc.log",
    query: str = "",
    body: bytes = b"segment bytes",
    *,
    pair: KeyPair = PAIR,
    headers: dict[str, str] | None = None,
) -> S3Request:
    """A request as boto3 sends one: signed in the Authorization header, the payload's SHA-256 signed with it."""
    url = f"http://{HOST}{path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    request.headers["Host"] = HOST
    signer = S3SigV4Auth(Credentials(pair.access_key_id, pair.secret_access_key), "s3", "us-east-1")
    request.context["timestamp"] = SIGNED_AT.strftime("%Y%m%dT%H%M%SZ")
    signer._modify_request_before_signing(request)  # what add_auth does, at a fixed time
    canonical = signer.canonical_request(request)
    signature = signer.signature(signer.string_to_sign(request, canonical), request)
    signer._inject_signature_to_request(request, signature)
    return _received(request)


def _presigned(path: str = "/tiered/key", *, expires: int = 300, pair: KeyPair = PAIR) -> S3Request:
    url = f"http://{HOST}{path}"
    request = AWSRequest(method="GET", url=url, headers={"Host": HOST})
    signer = S3SigV4QueryAuth(
        Credentials(pair.access_key_id, pair.secret_access_key), "s3", "us-east-1", expires=expires
    )
    request.context["timestamp"] = SIGNED_AT.strftime("%Y%m%dT%H%M%SZ")
    signer._modify_request_before_signing(request)
    canonical = signer.canonical_request(request)
    signer._inject_signature_to_request(request, signer.signature(signer.string_to_sign(request, canonical), request))
    return _received(request)


def _received(request: AWSRequest) -> S3Request:
    parts = urlsplit(request.url)
    headers = {name.lower(): value for name, value in request.headers.items()}
    body = request.body if isinstance(request.body, bytes) else (request.body or "").encode()
    return S3Request(request.method, parts.path, parts.query, headers, body)


def test_a_request_signed_with_the_clusters_pair_passes_header_and_presigned() -> None:
    assert check(_signed(), PAIR, now=SIGNED_AT) is None
    assert check(_signed("GET", "/tiered", "list-type=2&prefix=orders-1%2F", b""), PAIR, now=SIGNED_AT) is None
    assert check(_presigned(), PAIR, now=SIGNED_AT + dt.timedelta(minutes=4)) is None


def test_keys_and_queries_are_checked_whatever_bytes_they_hold() -> None:
    odd_key = "/tiered/a%20b/%2Bplus%3D/%C3%A9t%C3%A9~_.-%21"  # encoded as SigV4 (and boto3) encode keys
    assert check(_signed("PUT", odd_key, body=b"x"), PAIR, now=SIGNED_AT) is None
    assert check(_signed("GET", "/tiered", "prefix=a%2Bb%20c&delimiter=%2F&tagging", b""), PAIR, now=SIGNED_AT) is None


def test_an_anonymous_request_is_access_denied() -> None:
    request = S3Request("PUT", "/tiered/key", "", {"host": HOST}, b"x")
    refusal = check(request, PAIR, now=SIGNED_AT)
    assert refusal is not None
    assert (refusal.status, refusal.code, refusal.message) == (403, "AccessDenied", "Access Denied")


def test_another_access_key_id_is_invalid_access_key_id() -> None:
    refusal = check(_signed(pair=KeyPair("AKIDSOMEONEELSE00000", PAIR.secret_access_key)), PAIR, now=SIGNED_AT)
    assert refusal is not None
    assert (refusal.status, refusal.code) == (403, "InvalidAccessKeyId")
    assert ("AWSAccessKeyId", "AKIDSOMEONEELSE00000") in refusal.fields


def test_a_wrong_secret_is_signature_does_not_match_and_the_answer_holds_no_secret() -> None:
    wrong = KeyPair(PAIR.access_key_id, "not-the-secret-key-at-all-0123456789abcd")
    refusal = check(_signed(pair=wrong), PAIR, now=SIGNED_AT)
    assert refusal is not None
    assert (refusal.status, refusal.code) == (403, "SignatureDoesNotMatch")
    body = refusal.xml("REQ1")
    assert PAIR.secret_access_key.encode() not in body and wrong.secret_access_key.encode() not in body
    error = ET.fromstring(body)
    assert error.tag == "Error"
    assert error.findtext("Code") == "SignatureDoesNotMatch" and error.findtext("RequestId") == "REQ1"
    assert (error.findtext("StringToSign") or "").startswith("AWS4-HMAC-SHA256\n20261128T093000Z\n")


def test_a_request_changed_after_signing_is_signature_does_not_match() -> None:
    signed = _signed(headers={"x-amz-meta-remote-size": "10"})
    moved = S3Request(signed.method, signed.raw_path + "-other", signed.raw_query, signed.headers, signed.body)
    altered_header = dict(signed.headers, **{"x-amz-meta-remote-size": "11"})
    altered = S3Request(signed.method, signed.raw_path, signed.raw_query, altered_header, signed.body)
    for request in (moved, altered):
        refusal = check(request, PAIR, now=SIGNED_AT)
        assert refusal is not None and refusal.code == "SignatureDoesNotMatch"


def test_a_body_that_is_not_the_signed_one_is_a_content_sha256_mismatch() -> None:
    signed = _signed(body=b"the signed bytes")
    swapped = S3Request(signed.method, signed.raw_path, signed.raw_query, signed.headers, b"other bytes")
    refusal = check(swapped, PAIR, now=SIGNED_AT)
    assert refusal is not None
    assert (refusal.status, refusal.code) == (400, "XAmzContentSHA256Mismatch")
    assert ("S3ComputedContentSHA256", hashlib.sha256(b"other bytes").hexdigest()) in refusal.fields


def test_a_request_from_too_far_in_the_past_or_future_is_time_too_skewed() -> None:
    for drift in (dt.timedelta(minutes=16), -dt.timedelta(minutes=16)):
        refusal = check(_signed(), PAIR, now=SIGNED_AT + drift)
        assert refusal is not None and (refusal.status, refusal.code) == (403, "RequestTimeTooSkewed")
    assert check(_signed(), PAIR, now=SIGNED_AT + dt.timedelta(minutes=14)) is None


def test_an_expired_presigned_url_is_refused_as_s3_refuses_it() -> None:
    refusal = check(_presigned(expires=60), PAIR, now=SIGNED_AT + dt.timedelta(seconds=61))
    assert refusal is not None
    assert (refusal.status, refusal.code, refusal.message) == (403, "AccessDenied", "Request has expired")


def test_a_presigned_url_with_another_secret_or_path_is_signature_does_not_match() -> None:
    wrong = _presigned(pair=KeyPair(PAIR.access_key_id, "x" * 40))
    good = _presigned()
    elsewhere = S3Request(good.method, "/tiered/other", good.raw_query, good.headers)
    for request in (wrong, elsewhere):
        refusal = check(request, PAIR, now=SIGNED_AT)
        assert refusal is not None and refusal.code == "SignatureDoesNotMatch"


def test_signature_version_2_and_malformed_headers_are_refused_with_s3s_400s() -> None:
    v2 = S3Request("GET", "/tiered", "", {"host": HOST, "authorization": f"AWS {PAIR.access_key_id}:c2lnbmF0dXJl"})
    refusal = check(v2, PAIR, now=SIGNED_AT)
    assert refusal is not None and (refusal.status, refusal.code) == (400, "InvalidRequest")
    garbled = S3Request("GET", "/tiered", "", {"host": HOST, "authorization": "AWS4-HMAC-SHA256 Credential=x"})
    refusal = check(garbled, PAIR, now=SIGNED_AT)
    assert refusal is not None and (refusal.status, refusal.code) == (400, "AuthorizationHeaderMalformed")
