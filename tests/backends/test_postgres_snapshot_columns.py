"""On PostgreSQL a snapshot of bytes keeps ``data`` NOT NULL and empty beside its bytes in ``raw``: a
process of the release before (running on the database while a newer one migrated it) reads the
empty text as the snapshot, which fails its checksum, and folds the events instead of failing."""

from __future__ import annotations

import hashlib

import psycopg

from tests.conftest import PG_URL, pg_url
from tether.log.snapshots import checksum, matches
from tether.store import EventRow, SnapshotRow, TaskRow, open_store


def test_a_bytes_snapshot_leaves_text_an_older_reader_finds_damaged() -> None:
    for url in pg_url("snapcols"):
        store = open_store(url)
        try:
            row = TaskRow("t", "default", "chat", "running", None, None, 1.0, 1.0, 1)
            store.create_task("default", row, EventRow(1, "TaskCreated", 1, 1.0, "{}"))
            store.put_snapshot("default", "t", SnapshotRow(1, 3, checksum(b"\x93\x01\x02"), b"\x93\x01\x02"))
            store.put_snapshot("default", "t", SnapshotRow(2, 3, checksum("{}"), "{}"))
            schema = url.rpartition("schema=")[2]
            with psycopg.connect(PG_URL, autocommit=True, options=f"-c search_path={schema}") as conn:
                nullable = conn.execute(
                    "SELECT is_nullable FROM information_schema.columns "
                    "WHERE table_schema = %s AND table_name = 'snapshots' AND column_name = 'data'",
                    (schema,),
                ).fetchone()
                # What the release before selects: no raw column, data as text.
                old = dict(conn.execute("SELECT seq, data FROM snapshots ORDER BY seq").fetchall())
            assert nullable == ("NO",)
            assert old == {1: "", 2: "{}"}
            stored = store.get_snapshot("default", "t", at_most=1)
            assert stored is not None and stored.data == b"\x93\x01\x02"  # read back as bytes
            assert not matches("", stored.checksum)  # the empty text fails the bytes' checksum
            assert hashlib.blake2b(b"", digest_size=16).hexdigest() != stored.checksum  # and the old one's
        finally:
            store.close()
