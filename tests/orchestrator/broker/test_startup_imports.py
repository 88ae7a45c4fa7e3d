"""What a broker's start-up imports: a test cluster starts a few hundred brokers, a real cluster restarts them, and
every module imported at start is paid by each. pycryptodomex (RSA for Aiven's key ring) waits until a key is read:
only a broker that encrypts needs it (remote_storage/segment_format/key_ring.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

PROBE = (
    "import sys\n"
    "import orchestrator.cli.broker, orchestrator.broker.agent\n"  # what `tieredctl broker start` imports
    "print(sorted(name for name in sys.modules if name.split('.')[0] == 'Cryptodome'))\n"
    "from remote_storage.segment_format.key_ring import RsaKeyPair\n"
    "from Cryptodome.PublicKey import RSA\n"
    "key = RSA.generate(1024)\n"
    "pair = RsaKeyPair.from_pem(key.public_key().export_key(), key.export_key())\n"
    "print(pair.private_key is not None)\n"
)


def test_a_broker_starts_without_importing_pycryptodomex_and_reading_a_key_imports_it() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True"]
