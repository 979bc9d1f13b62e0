"""How the Redis backend keeps an event in its stream's list: every field comes back as written, tether's
own event types take one byte, and a stream written in the first format (text fields led by the seq)
still reads, alone and with elements of the current format after it."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._redis_server import RedisServer
from tether.errors import StoreCorruptError
from tether.store import EventRow, TaskRow, open_store
from tether.store._redis_keys import TYPE_CODES, pack_event, unpack_event

# The codes stored elements carry: this list may only grow at its end.
PINNED_CODES = (
    "ArtifactSaved", "CallAttemptFailed", "CallCompleted", "CallFailed", "CallInDoubt", "CallStarted",
    "CancelRequested", "CheckpointSaved", "CheckpointsDeleted", "DataMigrated", "DataUpdated", "DecisionMade",
    "FailureRecorded", "InputReceived", "InputRejected", "InputRequested", "InputTimedOut", "KeyCreated",
    "KeyRevoked", "KeysOpened", "MessageAdded", "MessageRemoved", "MessagesCleared", "ObservationRecorded",
    "OutputSet", "PatchMarked", "PhaseChanged", "PlanSet", "RetryRequested", "RunTraced", "SessionClosed",
    "SessionOpened", "SessionRead", "SessionWritten", "SleepScheduled", "StatusChanged", "StepCompleted",
    "StepFailed", "StepStarted", "SummaryAdded", "SummaryWithdrawn", "TaskArchived", "TaskCreated",
    "TaskForked", "ThreadCompacted", "UsageRecorded", "UserChanged", "UserCreated", "WritesSaved",
)  # fmt: skip

# Three events as the first format stored them (written by that code): a user-declared type with a
# schema of 2 and a payload that is not UTF-8, and a fence.
FIRST_FORMAT = [
    b'1\x1fTaskCreated\x1f1\x1f1796305360.5037127\x1f\x1f{"type":"x"}',
    b'2\x1fMessageAdded\x1f1\x1f1796305360.513301\x1f7\x1f{"role":"user"}',
    b"3\x1fNoted\x1f2\x1f1796305361.0\x1f\x1f\xff\xfe",
]
FIRST_EVENTS = [
    EventRow(1, "TaskCreated", 1, 1796305360.5037127, '{"type":"x"}'),
    EventRow(2, "MessageAdded", 1, 1796305360.513301, '{"role":"user"}', 7),
    EventRow(3, "Noted", 2, 1796305361.0, b"\xff\xfe"),
]

# A type is a name: text that encodes (no lone surrogate, which no backend can store), less the separator.
_types = st.sampled_from(TYPE_CODES) | st.text(
    st.characters(exclude_characters="\x1f", exclude_categories=("Cs",)), max_size=30
)
_events = st.builds(
    EventRow,
    seq=st.integers(1, 2**40),
    type=_types,
    schema=st.integers(0, 2**20),
    at=st.floats(allow_nan=False),
    data=st.text(max_size=200),
    fence=st.none() | st.integers(0, 2**63),
)


@given(_events)
def test_every_field_of_an_event_comes_back_as_written(event: EventRow) -> None:
    assert unpack_event(pack_event(event, event.fence), event.seq) == event


def test_a_payload_that_is_not_utf8_comes_back_as_bytes() -> None:
    event = EventRow(5, "Noted", 1, time.time(), b"\xff\xfe", None)
    assert unpack_event(pack_event(event, None), 5) == event


def test_tethers_own_event_types_take_one_byte_and_keep_their_codes() -> None:
    assert TYPE_CODES[: len(PINNED_CODES)] == PINNED_CODES and len(TYPE_CODES) <= 127
    # the format byte, the time (8), the schema, the fence and the type's code: 12 bytes before the payload
    assert len(pack_event(EventRow(9, "MessageAdded", 1, time.time(), "{}"), None)) == 12 + 2


def test_a_stream_of_the_first_format_reads_and_takes_appends(server: RedisServer) -> None:
    import redis

    store = open_store(f"{server.url}?prefix=first")
    client = redis.Redis(port=server.port)
    key = "first:{t:old}:e"
    try:
        row = TaskRow("old", "t", "x", "pending", None, None, 1796305360.5, 1796305360.5, 1)
        store.create_task("t", row, FIRST_EVENTS[0])
        store.append("t", "old", FIRST_EVENTS[1:], 1)
        client.delete(key)
        client.rpush(key, *FIRST_FORMAT)  # the stream as the first format left it
        assert store.read_events("t", "old") == FIRST_EVENTS
        later = EventRow(4, "MessageAdded", 1, time.time(), '{"role":"assistant"}')
        store.append("t", "old", [later], 3)
        assert client.lindex(key, 3)[:1] == b"\x01"  # written in the current format, after the first's
        assert store.read_events("t", "old") == [*FIRST_EVENTS, later]
        assert store.read_events("t", "old", after=1, upto=3) == FIRST_EVENTS[1:]
        assert store.read_events("t", "old", after=2) == [FIRST_EVENTS[2], later]
    finally:
        store.delete_task("t", "old")
        store.close()
        client.close()


def test_a_read_across_a_compaction_never_gives_events_seqs_they_do_not_have(server: RedisServer) -> None:
    """An element's seq is its place after the row's base: a compaction (or a rewind, or a delete and
    re-create) landing between a read's look at the row and its slice of the list must not label the
    new list's elements with the old base. Another writer compacts at that moment, here."""
    store = open_store(f"{server.url}?prefix=moved")
    other = open_store(f"{server.url}?prefix=moved")
    old = [EventRow(n, "MessageAdded", 1, 1796305360.5 + n, f'{{"n":{n}}}') for n in range(1, 6)]
    new = [EventRow(n, "MessageAdded", 1, 1796305370.5 + n, f'{{"compacted":{n}}}') for n in (6, 7)]
    row = TaskRow("s", "t", "x", "pending", None, None, 1796305360.5, 1796305360.5, 1)
    try:
        store.create_task("t", row, old[0])
        store.append("t", "s", old[1:], 1)
        pipeline = store._client.pipeline  # type: ignore[attr-defined]

        def compacted_meanwhile(*args: object, **kwargs: object) -> object:
            store._client.pipeline = pipeline  # type: ignore[attr-defined]
            other.compact("t", "s", 5, new)
            return pipeline(*args, **kwargs)

        store._client.pipeline = compacted_meanwhile  # type: ignore[attr-defined]
        assert store.read_events("t", "s") == new
        assert store.read_events("t", "s") == other.read_events("t", "s") == new
    finally:
        store.delete_task("t", "s")
        store.close()
        other.close()


def test_an_element_that_is_not_what_its_place_says_is_refused() -> None:
    """Stored data read back is checked, not asserted: a first-format element names its seq, and one
    read at another place is corrupt; a negative schema or fence cannot be packed at all."""
    with pytest.raises(StoreCorruptError, match="stored as seq 1 was read at seq 2"):
        unpack_event(FIRST_FORMAT[0], 2)
    with pytest.raises(ValueError, match="not negative"):
        pack_event(EventRow(1, "MessageAdded", -1, time.time(), "{}"), None)
