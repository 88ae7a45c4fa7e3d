"""The key pair of a secured local cluster's embedded S3: made once, kept in one private file, read by whoever talks
to that S3.

The file, ``DIR/security/s3-credentials`` (mode 0600 in the 0700 ``security/``), is an AWS shared credentials file
with one ``[default]`` profile, so the operator can hand it to any AWS tool as it is
(``AWS_SHARED_CREDENTIALS_FILE=DIR/security/s3-credentials aws --endpoint-url URL s3 ls s3://BUCKET``).

Invariants:
* A pair is random (an access key id of 20 upper-case letters and digits, as AWS's are, and a 40-character secret)
  and made for one cluster; nothing else chooses it.
* The secret key never appears in a ``repr``, a log line or an error: :class:`KeyPair` hides it, and a file that
  cannot be read is reported by its path only.
"""

from __future__ import annotations

import configparser
import secrets
import string
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import LocalClusterError
from orchestrator.private_files import write_private

S3_CREDENTIALS_FILE = "security/s3-credentials"  # under the cluster's directory
_PROFILE = "default"
_ACCESS_KEY_ALPHABET = string.ascii_uppercase + string.digits
ACCESS_KEY_ID_LENGTH = 20
SECRET_KEY_BYTES = 30  # 40 characters of url-safe base64, as long as AWS's


@dataclass(frozen=True, slots=True)
class KeyPair:
    access_key_id: str
    secret_access_key: str = field(repr=False)

    @classmethod
    def generate(cls) -> KeyPair:
        access_key_id = "".join(secrets.choice(_ACCESS_KEY_ALPHABET) for _ in range(ACCESS_KEY_ID_LENGTH))
        return cls(access_key_id, secrets.token_urlsafe(SECRET_KEY_BYTES))

    def as_tuple(self) -> tuple[str, str]:
        return self.access_key_id, self.secret_access_key


def write_key_pair(path: Path, pair: KeyPair) -> None:
    """Write ``pair`` to ``path`` as an AWS shared credentials file, created 0600 (its directory must exist)."""
    text = f"[{_PROFILE}]\naws_access_key_id = {pair.access_key_id}\naws_secret_access_key = {pair.secret_access_key}\n"
    write_private(path, text)


def read_key_pair(path: Path) -> KeyPair:
    """The pair :func:`write_key_pair` wrote to ``path``; a :class:`LocalClusterError` naming the file otherwise."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with path.open() as source:
            parser.read_file(source)
        profile = parser[_PROFILE]
        return KeyPair(profile["aws_access_key_id"], profile["aws_secret_access_key"])
    except (OSError, configparser.Error, KeyError) as exc:
        raise LocalClusterError(
            f"the embedded S3's key pair cannot be read from {path} ({type(exc).__name__}); it is written by "
            "'tieredctl cluster up' for a secured cluster"
        ) from None
