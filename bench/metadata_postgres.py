"""Metadata log on PostgreSQL: append and replay rates for N records (default 200,000), each beside bare PostgreSQL.

A throwaway server (initdb in a temporary directory, loopback, stopped at the end: the tests' own
``tests.support.postgres_server``) holds both sides, so they share its settings (fsync off there: the figures
compare our layers with PostgreSQL itself, not with a disk).

Append: the store's ``append`` (encoding, CRC, lease-row lock and controller-epoch fence, fence table) in batches
of 1000, against the same encoded bytes and the same CRCs inserted into a bare table of the same shape, one
transaction per batch of 1000 with ``executemany`` (the same statement shape the store uses).
Replay: read + verify + decode + replay into a MetadataImage, against a bare paged ``SELECT`` of the same rows.
``TIEREDCTL_BENCH_PG_RECORDS`` changes N.
"""

from __future__ import annotations

import os
import time
import zlib

import psycopg

from bench.metadata_log import BATCH, cluster_records
from bench.report import Figure, peak_rss_mib, print_figures
from orchestrator.metadata.image import EMPTY_IMAGE, replay
from orchestrator.metadata.postgres import PostgresMetadataStore
from orchestrator.metadata.records import encode_record
from tests.support.postgres_server import running_postgres

DEFAULT_RECORDS = 200_000


def run(n: int | None = None) -> list[Figure]:
    n = n or int(os.environ.get("TIEREDCTL_BENCH_PG_RECORDS", DEFAULT_RECORDS))
    records = list(cluster_records(n))
    encoded = [encode_record(r) for r in records]
    with running_postgres() as server:
        ours, bare = server.create_database(), server.create_database()
        store = PostgresMetadataStore(server.dsn(ours))
        lease = store.acquire_lease(holder="bench", now_ms=int(time.time() * 1000), ttl_ms=3_600_000)
        assert lease is not None
        t0 = time.perf_counter()
        for i in range(0, n, BATCH):
            store.append(records[i : i + BATCH], controller_epoch=lease.controller_epoch)
        append_s = time.perf_counter() - t0
        del records

        with psycopg.connect(server.dsn(bare)) as db:
            db.execute(
                "CREATE TABLE log (record_offset bigint PRIMARY KEY, controller_epoch bigint NOT NULL, "
                "data bytea NOT NULL, crc bigint NOT NULL)"
            )
            db.commit()
            t0 = time.perf_counter()
            for i in range(0, n, BATCH):
                with db.transaction(), db.cursor() as cur:
                    rows = [(i + j, 1, d, zlib.crc32(d)) for j, d in enumerate(encoded[i : i + BATCH])]
                    cur.executemany("INSERT INTO log VALUES (%s, %s, %s, %s)", rows)
            raw_append_s = time.perf_counter() - t0

            t0 = time.perf_counter()
            image = replay(EMPTY_IMAGE, ((e.offset, e.record) for e in store.read()))
            replay_s = time.perf_counter() - t0
            assert image.offset == n - 1

            t0 = time.perf_counter()
            with db.cursor(name="scan") as cur:  # a server-side cursor: paged, as the store reads
                cur.itersize = 512
                cur.execute("SELECT record_offset, data FROM log ORDER BY record_offset")
                scanned = sum(1 for _ in cur)
            raw_scan_s = time.perf_counter() - t0
            assert scanned == n
        store.close()
    figures = [
        Figure(
            f"PostgreSQL metadata append ({n:,} records)", n / append_s, "rec/s", "bare PG insert", n / raw_append_s
        ),
        Figure(f"PostgreSQL metadata replay ({n:,} records)", n / replay_s, "rec/s", "bare PG scan", n / raw_scan_s),
    ]
    print_figures(f"Metadata log on PostgreSQL (peak RSS {peak_rss_mib():,.0f} MiB)", figures)
    return figures


if __name__ == "__main__":
    run()
