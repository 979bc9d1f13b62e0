"""One constructor convention across the adapters: a store URL or an App; anything else a clear error.
And ADK's own registry of URL schemes (services.yaml, --session_service_uri) resolving tether's."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from tether.errors import ConfigurationError


def _adk() -> Any:
    pytest.importorskip("google.adk")
    from tether.integrations import adk

    return adk


def _openai() -> Any:
    pytest.importorskip("agents")
    from tether.integrations import openai_agents

    return openai_agents


def _pydantic_ai() -> Any:
    pytest.importorskip("pydantic_ai")
    from tether.integrations import pydantic_ai

    return pydantic_ai


def _makers() -> dict[str, Any]:
    """Each adapter's constructor, as a function of its target."""
    return {
        "TetherSessionService": lambda t: _adk().TetherSessionService(t),
        "TetherMemoryService": lambda t: _adk().TetherMemoryService(t),
        "TetherArtifactService": lambda t: _adk().TetherArtifactService(t),
        "TetherSession": lambda t: _openai().TetherSession("s1", t),
        "TetherHistory": lambda t: _pydantic_ai().TetherHistory("s1", t),
    }


@pytest.mark.parametrize("name", list(_makers()))
@pytest.mark.parametrize(
    "wrong", [3, b"sqlite:///x.db", {"url": "memory://"}, object()], ids=["int", "bytes", "dict", "object"]
)
def test_a_wrong_target_is_refused_naming_what_was_given_and_what_is_expected(name: str, wrong: Any) -> None:
    with pytest.raises(ConfigurationError) as raised:
        _makers()[name](wrong)
    message = str(raised.value)
    assert name in message and type(wrong).__name__ in message
    assert "store URL" in message and "tether.App" in message


@pytest.mark.parametrize("name", list(_makers()))
def test_a_url_and_an_app_name_the_same_database(name: str, tmp_path: Path) -> None:
    """What an adapter opened from a URL is in the database an App on that URL reads; the adapter
    closes what it opened, and never an App it was given."""
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    for target in (url, "tether+" + url):
        opened = _makers()[name](target)
        asyncio.run(_write(name, opened))
        opened.close()
    app = tether.App(url)
    try:
        given = _makers()[name](app)
        assert asyncio.run(_read(name, given)) == 2
        given.close()
        assert app.sessions() is not None  # still open: it is the caller's
    finally:
        app.close()


async def _write(name: str, adapter: Any) -> None:
    from google.genai import types

    if name == "TetherSessionService":
        await adapter.create_session(app_name="a", user_id="u")
    elif name == "TetherArtifactService":
        await adapter.save_artifact(app_name="a", user_id="u", filename="user:f", artifact=types.Part(text="x"))
    elif name == "TetherMemoryService":
        from google.adk.events import Event

        said = types.Content(role="user", parts=[types.Part(text="seat 12A")])
        await adapter.add_events_to_memory(app_name="a", user_id="u", events=[Event(author="user", content=said)])
    elif name == "TetherSession":
        await adapter.add_items([{"role": "user", "content": "hi"}])
    else:
        from pydantic_ai.messages import ModelRequest, UserPromptPart

        adapter.add([ModelRequest(parts=[UserPromptPart(content="hi")])])


async def _read(name: str, adapter: Any) -> int:
    if name == "TetherSessionService":
        return len((await adapter.list_sessions(app_name="a")).sessions)
    if name == "TetherArtifactService":
        return len(await adapter.list_versions(app_name="a", user_id="u", filename="user:f"))
    if name == "TetherMemoryService":
        found = await adapter.search_memory(app_name="a", user_id="u", query="seat")
        return len(found.memories)
    if name == "TetherSession":
        return len(await adapter.get_items())
    return len(adapter.messages())


def test_adk_services_refuse_a_target_and_a_uri_together_and_an_app_of_another_tenant() -> None:
    adk = _adk()
    with pytest.raises(ConfigurationError, match="both"):
        adk.TetherSessionService("memory://", uri="memory://")
    app = tether.App("memory://", tenant="acme")
    try:
        with pytest.raises(ConfigurationError, match="tenant"):
            adk.TetherArtifactService(app, tenant="other")
    finally:
        app.close()


# ----------------------------------------------------------------------------- ADK's registry


def test_services_yaml_names_tethers_services_through_adks_own_resolution(tmp_path: Path) -> None:
    """An agents folder's services.yaml, loaded as ``adk web``/``adk api_server`` load it, makes
    ``tether+sqlite:///…`` in --session_service_uri, --memory_service_uri and --artifact_service_uri
    resolve to tether's services on that database."""
    adk = _adk()
    from google.adk.cli.service_registry import load_services_module
    from google.adk.cli.utils.service_factory import (
        create_artifact_service_from_options,
        create_memory_service_from_options,
        create_session_service_from_options,
    )

    (tmp_path / "services.yaml").write_text(
        "services:\n"
        + "".join(
            f"  - scheme: tether+sqlite\n    type: {kind}\n    class: tether.integrations.adk.{cls}\n"
            for kind, cls in [
                ("session", "TetherSessionService"),
                ("memory", "TetherMemoryService"),
                ("artifact", "TetherArtifactService"),
            ]
        )
    )
    url = f"tether+sqlite:///{tmp_path / 'agent.db'}"
    try:
        load_services_module(str(tmp_path))
        sessions = create_session_service_from_options(base_dir=tmp_path, session_service_uri=url)
        memory = create_memory_service_from_options(base_dir=tmp_path, memory_service_uri=url)
        artifacts = create_artifact_service_from_options(base_dir=tmp_path, artifact_service_uri=url, strict_uri=True)
    finally:
        sys.path.remove(str(tmp_path))
    assert isinstance(sessions, adk.TetherSessionService)
    assert isinstance(memory, adk.TetherMemoryService)
    assert isinstance(artifacts, adk.TetherArtifactService)
    asyncio.run(sessions.create_session(app_name="a", user_id="u", session_id="s1"))
    for service in (sessions, memory, artifacts):
        service.close()
    app = tether.App(url.removeprefix("tether+"))
    try:
        assert [s.session_id for s in app.sessions()] == ["adk:a:u:s1"]
    finally:
        app.close()


def test_register_services_gives_adks_registry_every_tether_scheme(tmp_path: Path) -> None:
    adk = _adk()
    from google.adk.cli.service_registry import ServiceRegistry
    from google.adk.cli.utils.service_factory import create_session_service_from_options

    registry = ServiceRegistry()
    adk.register_services(registry)
    made = [
        registry.create_session_service("tether+memory://", agents_dir=str(tmp_path)),
        registry.create_memory_service("tether+memory://", agents_dir=str(tmp_path)),
        registry.create_artifact_service(f"tether+sqlite:///{tmp_path / 'a.db'}", agents_dir=str(tmp_path)),
    ]
    assert [type(m).__name__ for m in made] == ["TetherSessionService", "TetherMemoryService", "TetherArtifactService"]
    for m in made:
        m.close()
    assert {"tether+memory", "tether+sqlite", "tether+postgresql", "tether+postgres"} <= set(adk.SCHEMES)
    # the process-wide registry the CLI reads
    adk.register_services()
    service = create_session_service_from_options(base_dir=tmp_path, session_service_uri="tether+memory://")
    assert isinstance(service, adk.TetherSessionService)
    service.close()
