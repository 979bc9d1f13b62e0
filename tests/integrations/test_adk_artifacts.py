"""TetherArtifactService: ADK's artifact service, call for call as ADK's own in-memory one, on every backend."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.artifacts import InMemoryArtifactService, artifact_util
from google.adk.artifacts.base_artifact_service import BaseArtifactService
from google.genai import types

import tether
from tether.events.adk import ArtifactSaved
from tether.integrations.adk import TetherArtifactService
from tether.log.streams import Stream

APP, USER = "shop", "ada"


def text(value: str) -> types.Part:
    return types.Part(text=value)


def blob(data: bytes, mime: str = "image/png") -> types.Part:
    return types.Part(inline_data=types.Blob(mime_type=mime, data=data))


def ref(filename: str, version: int, session_id: str | None = "s1", user_id: str = USER) -> types.Part:
    uri = artifact_util.get_artifact_uri(APP, user_id, filename, version, session_id)
    return types.Part(file_data=types.FileData(file_uri=uri))


def calls() -> list[tuple[str, dict[str, Any]]]:
    """A user's calls, good and bad, in order: what an agent's tools and ADK's runner and rewind do."""
    s1 = {"app_name": APP, "user_id": USER, "session_id": "s1"}
    s2 = {"app_name": APP, "user_id": USER, "session_id": "s2"}
    return [
        ("save", {**s1, "filename": "notes.txt", "artifact": text("draft")}),
        ("save", {**s1, "filename": "notes.txt", "artifact": text("final"), "custom_metadata": {"by": "ada"}}),
        ("save", {**s1, "filename": "notes.txt", "artifact": text("draft")}),  # an old version again
        ("save", {**s1, "filename": "chart.png", "artifact": blob(b"\x89PNG\x00" * 50)}),
        ("save", {**s1, "filename": "doc", "artifact": {"inlineData": {"mimeType": "text/csv", "data": "YSxi"}}}),
        ("save", {**s2, "filename": "notes.txt", "artifact": text("other session")}),
        ("save", {**s1, "filename": "user:profile", "artifact": text("likes trains")}),
        ("save", {"app_name": APP, "user_id": USER, "filename": "user:profile", "artifact": text("likes boats")}),
        ("save", {**s1, "filename": "link", "artifact": ref("notes.txt", 1)}),
        ("save", {**s1, "filename": "user-link", "artifact": ref("user:profile", 0, None)}),
        ("save", {**s1, "filename": "chain", "artifact": ref("link", 0)}),
        ("save", {**s1, "filename": "gone", "artifact": artifact_util._new_rewind_tombstone()}),
        (
            "save",
            {
                **s1,
                "filename": "files",
                "artifact": types.Part(file_data=types.FileData(file_uri="gs://b/x", mime_type="text/plain")),
            },
        ),
        # refused, as ADK refuses them
        ("save", {"app_name": APP, "user_id": USER, "filename": "notes.txt", "artifact": text("no session")}),
        ("save", {**s1, "filename": "empty", "artifact": types.Part()}),
        ("save", {**s1, "filename": "x", "artifact": ref("notes.txt", 0, "s2")}),
        ("save", {**s1, "filename": "x", "artifact": ref("notes.txt", 0, "s1", "bob")}),
        (
            "save",
            {**s1, "filename": "x", "artifact": types.Part(file_data=types.FileData(file_uri="artifact://nonsense"))},
        ),
        ("save", {"app_name": APP, "user_id": USER, "session_id": "user", "filename": "x", "artifact": text("t")}),
        ("save", {"app_name": "a/b", "user_id": USER, "session_id": "s1", "filename": "x", "artifact": text("t")}),
        ("save", {"app_name": APP, "user_id": "..", "session_id": "s1", "filename": "x", "artifact": text("t")}),
        *[("load", {**s1, "filename": "notes.txt", "version": v}) for v in (None, 0, 1, 2, 3, -1)],
        *[
            ("load", {**s1, "filename": name})
            for name in ("chart.png", "doc", "link", "user-link", "chain", "gone", "files")
        ],
        ("load", {**s1, "filename": "user:profile"}),
        ("load", {"app_name": APP, "user_id": USER, "filename": "user:profile", "version": 0}),
        ("load", {**s2, "filename": "user:profile"}),
        ("load", {**s1, "filename": "missing"}),
        ("load", {"app_name": APP, "user_id": USER, "filename": "notes.txt"}),
        ("load", {"app_name": APP, "user_id": "bob", "session_id": "s1", "filename": "notes.txt"}),
        ("keys", s1),
        ("keys", s2),
        ("keys", {"app_name": APP, "user_id": USER}),
        ("keys", {"app_name": APP, "user_id": "bob", "session_id": "s1"}),
        ("keys", {"app_name": "a/b", "user_id": USER}),
        ("versions", {**s1, "filename": "notes.txt"}),
        ("versions", {**s1, "filename": "missing"}),
        ("versions", {"app_name": APP, "user_id": USER, "filename": "user:profile"}),
        ("metadata", {**s1, "filename": "notes.txt"}),
        ("metadata", {**s1, "filename": "chart.png"}),
        ("metadata", {**s1, "filename": "link"}),
        ("metadata", {**s1, "filename": "missing"}),
        *[("version", {**s1, "filename": "notes.txt", "version": v}) for v in (None, 1, 5, -1)],
        ("version", {**s1, "filename": "missing"}),
        ("delete", {**s1, "filename": "notes.txt"}),
        ("delete", {**s1, "filename": "missing"}),
        ("delete", {"app_name": APP, "user_id": USER, "filename": "notes.txt"}),
        ("load", {**s1, "filename": "notes.txt"}),
        ("load", {**s1, "filename": "link"}),  # its target is gone
        ("versions", {**s1, "filename": "notes.txt"}),
        ("save", {**s1, "filename": "notes.txt", "artifact": text("again")}),  # numbered from 0 again
        ("load", {**s1, "filename": "notes.txt", "version": 0}),
        ("keys", s1),
        ("delete", {"app_name": APP, "user_id": USER, "filename": "user:profile"}),
        ("keys", s2),
    ]


def _shown(value: Any) -> Any:
    """A result as the two services can agree on it: a version's URI and time are each service's own."""
    if isinstance(value, list):
        return [_shown(v) for v in value]
    if hasattr(value, "canonical_uri"):
        return value.model_dump(exclude={"canonical_uri", "create_time"})
    if isinstance(value, types.Part):
        return value.model_dump(exclude_none=True)
    return value


async def answers(service: BaseArtifactService) -> list[Any]:
    methods: dict[str, Callable[..., Awaitable[Any]]] = {
        "save": service.save_artifact,
        "load": service.load_artifact,
        "keys": service.list_artifact_keys,
        "versions": service.list_versions,
        "metadata": service.list_artifact_versions,
        "version": service.get_artifact_version,
        "delete": service.delete_artifact,
    }
    out: list[Any] = []
    for name, kwargs in calls():
        try:
            out.append((name, _shown(await methods[name](**kwargs))))
        except Exception as error:  # the same refusal, of the same class, with the same words
            out.append((name, type(error).__name__, str(error)))
    return out


def test_every_call_answers_as_adks_in_memory_service(store_url: str) -> None:
    app = tether.App(store_url)
    try:
        service = TetherArtifactService(app)
        assert isinstance(service, BaseArtifactService)
        expected = asyncio.run(answers(InMemoryArtifactService()))
        assert asyncio.run(answers(service)) == expected
        # and a second service on the same database reads what the first wrote
        assert asyncio.run(answers_after(TetherArtifactService(app))) == asyncio.run(answers_after(service))
    finally:
        app.close()


async def answers_after(service: TetherArtifactService) -> list[Any]:
    s1 = {"app_name": APP, "user_id": USER, "session_id": "s1"}
    return [
        _shown(await service.load_artifact(**s1, filename="chart.png")),
        _shown(await service.list_artifact_versions(**s1, filename="chart.png")),
        await service.list_artifact_keys(**s1),
    ]


def test_a_version_holding_an_earlier_ones_content_is_stored_once(store_url: str) -> None:
    app = tether.App(store_url)
    try:
        service = TetherArtifactService(app)
        where = {"app_name": APP, "user_id": USER, "session_id": "s1", "filename": "big.bin"}
        payload, other = blob(b"x" * 20_000), blob(b"y" * 20_000)

        async def scenario() -> list[int]:
            return [await service.save_artifact(**where, artifact=p) for p in (payload, other, payload, payload)]

        assert asyncio.run(scenario()) == [0, 1, 2, 3]
        (stream,) = [p[0] for p in app.store.stream_positions(app.tenant, "tether.adk.artifact", "adk-artifact:")]
        saved = [rec.event for rec in Stream(app.log, stream, "tether.adk.artifact").read()]
        assert all(isinstance(e, ArtifactSaved) for e in saved)
        assert [(e.part is not None, e.same_as) for e in saved] == [(True, None), (True, None), (False, 0), (False, 0)]
        # a fresh service (no digests in memory) finds the earlier copy too, and loads every version
        fresh = TetherArtifactService(app)
        assert asyncio.run(fresh.save_artifact(**where, artifact=other)) == 4
        last = Stream(app.log, stream, "tether.adk.artifact").read(after=4)[0].event
        assert (last.part, last.same_as) == (None, 1)
        loaded = [asyncio.run(fresh.load_artifact(**where, version=v)) for v in range(5)]
        assert loaded == [payload, other, payload, payload, other]
    finally:
        app.close()


def test_savers_racing_on_one_file_get_each_version_once(durable_url: str) -> None:
    """Two services of their own (two apps, two connections) saving one file at once: every save gets
    a version of its own, none lost, and each version loads what its saver saved."""
    apps = [tether.App(durable_url) for _ in range(2)]
    try:
        services = [TetherArtifactService(a) for a in apps]
        where = {"app_name": APP, "user_id": USER, "session_id": "s1", "filename": "log.txt"}
        got: dict[int, str] = {}
        start = threading.Barrier(2)

        def saver(k: int) -> None:
            start.wait()
            for i in range(15):
                body = f"{k}-{i}"
                got[asyncio.run(services[k].save_artifact(**where, artifact=text(body)))] = body

        threads = [threading.Thread(target=saver, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got) == list(range(30))
        assert asyncio.run(services[0].list_versions(**where)) == list(range(30))
        for version, body in got.items():
            assert asyncio.run(services[1].load_artifact(**where, version=version)) == text(body)
    finally:
        for a in apps:
            a.close()
