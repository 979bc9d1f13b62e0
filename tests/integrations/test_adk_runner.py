"""ADK's Runner on TetherSessionService: what a user sees equals what ADK's InMemorySessionService
gives, flow by flow (offline scripted models, no network); and a run SIGKILLed anywhere resumes in
a fresh process on the same database with no event lost or stored twice."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent, LoopAgent, ParallelAgent, SequentialAgent
from google.adk.apps.app import App as AdkApp
from google.adk.apps.app import EventsCompactionConfig, ResumabilityConfig
from google.adk.apps.llm_event_summarizer import LlmEventSummarizer
from google.adk.artifacts import InMemoryArtifactService
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.tools import FunctionTool, ToolContext
from google.adk.tools.exit_loop_tool import exit_loop
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types

import tether
from tests._forkserver import ForkServers
from tests.integrations.conftest import CHILD_ENV, HERE
from tether.integrations.adk import TetherSessionService

Step = list[tuple[str, Any]]  # the parts of one model response: ("text", str) or (tool name, args)


class Scripted(BaseLlm):
    """An offline model answering with the next step of its script, whatever it is asked."""

    model: str = "scripted"
    script: list[Step] = Field(default_factory=list)
    turn: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        step = self.script[self.turn % len(self.script)]
        self.turn += 1
        parts = [
            types.Part(text=value)
            if kind == "text"
            else types.Part(function_call=types.FunctionCall(name=kind, args=value))
            for kind, value in step
        ]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


async def set_preferences(tool_context: ToolContext) -> dict[str, bool]:
    """Sets state in every scope and saves an artifact."""
    tool_context.state["app:currency"] = "EUR"
    tool_context.state["user:seat"] = "aisle"
    tool_context.state["temp:scratch"] = 1
    tool_context.state["count"] = tool_context.state.get("count", 0) + 1
    await tool_context.save_artifact("note.txt", types.Part(text="hello"))
    return {"ok": True}


def start_export(order: str) -> dict[str, str]:
    """A long-running operation: answers that it started."""
    return {"status": "pending", "order": order}


def charge(amount: int, tool_context: ToolContext) -> dict[str, int]:
    """Charges, once the user confirmed."""
    tool_context.state["charged"] = amount
    return {"charged": amount}


def tools_and_transfer() -> AdkApp:
    helper = LlmAgent(name="helper", model=Scripted(script=[[("text", "helped")]]), output_key="helper_out")
    steps: list[Step] = [
        [("set_preferences", {})],
        [("start_export", {"order": "A"})],
        [("transfer_to_agent", {"agent_name": "helper"})],
    ]
    main = LlmAgent(
        name="main",
        model=Scripted(script=steps),
        tools=[set_preferences, LongRunningFunctionTool(func=start_export)],
        sub_agents=[helper],
    )
    return AdkApp(name="shop", root_agent=main)


def loop_and_parallel() -> AdkApp:
    worker = LlmAgent(
        name="worker", model=Scripted(script=[[("text", "tick")], [("exit_loop", {})]]), tools=[exit_loop]
    )
    fan = ParallelAgent(
        name="fan",
        sub_agents=[
            LlmAgent(name="left", model=Scripted(script=[[("text", "from left")]]), output_key="left"),
            LlmAgent(name="right", model=Scripted(script=[[("text", "from right")]]), output_key="right"),
        ],
    )
    return AdkApp(
        name="shop",
        root_agent=SequentialAgent(
            name="seq", sub_agents=[LoopAgent(name="loop", sub_agents=[worker], max_iterations=4), fan]
        ),
    )


def confirmation() -> AdkApp:
    agent = LlmAgent(
        name="main",
        model=Scripted(script=[[("charge", {"amount": 5})], [("text", "charged")]]),
        tools=[FunctionTool(charge, require_confirmation=True)],
    )
    return AdkApp(name="shop", root_agent=agent, resumability_config=ResumabilityConfig(is_resumable=True))


def compaction() -> AdkApp:
    summarizer = LlmEventSummarizer(llm=Scripted(script=[[("text", "SUMMARY")]]))
    config = EventsCompactionConfig(summarizer=summarizer, compaction_interval=2, overlap_size=1)
    agent = LlmAgent(name="main", model=Scripted(script=[[("text", "reply")]]), output_key="last")
    return AdkApp(name="shop", root_agent=agent, events_compaction_config=config)


def said(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def talk(runner: Runner, produced: list[Event], flow: str) -> None:
    """The user's side of a flow."""

    async def send(message: types.Content, **options: Any) -> None:
        produced.extend(
            [e async for e in runner.run_async(user_id="ada", session_id="s1", new_message=message, **options)]
        )

    if flow == "confirmation":
        await send(said("charge me"))
        asked = next(c for e in produced for c in e.get_function_calls() if c.name == "adk_request_confirmation")
        answer = types.FunctionResponse(id=asked.id, name=asked.name, response={"confirmed": True})
        await send(types.Content(role="user", parts=[types.Part(function_response=answer)]))
    elif flow == "rewind":
        for text in ("one", "two", "three"):
            await send(said(text), state_delta={"turn": text})
        second = [e.invocation_id for e in produced][1]
        await runner.rewind_async(user_id="ada", session_id="s1", rewind_before_invocation_id=second)
        await send(said("four"))
    else:
        for text in ("one", "two", "three", "four", "five")[: 5 if flow == "compaction" else 2]:
            await send(said(text))


FLOWS = {
    "tools_and_transfer": tools_and_transfer,
    "loop_and_parallel": loop_and_parallel,
    "confirmation": confirmation,
    "compaction": compaction,
    "rewind": compaction,  # a plain chat agent (compaction's) rewound
}


def seen(events: list[Event]) -> Any:
    """Events as a user compares them: ids, invocation ids and function call ids numbered in order
    of appearance, timestamps and OAuth/confirmation nonces left out."""
    text = json.dumps([e.model_dump(mode="json", exclude_none=True) for e in events])
    text = re.sub(r'"(timestamp|start_timestamp|end_timestamp)": [0-9.e+]+', r'"\1": 0', text)
    numbers: dict[str, str] = {}
    return json.loads(
        re.sub(
            r"(adk-|e-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            lambda m: numbers.setdefault(m.group(0), f"#{len(numbers)}"),
            text,
        )
    )


async def run_flow(service: BaseSessionService, flow: str, reader: BaseSessionService | None = None) -> Any:
    app = FLOWS[flow]()
    if flow == "rewind":
        app = AdkApp(name="shop", root_agent=app.root_agent)
    runner = Runner(app=app, session_service=service, artifact_service=InMemoryArtifactService())
    await service.create_session(app_name="shop", user_id="ada", session_id="s1", state={"init": 1})
    produced: list[Event] = []
    await talk(runner, produced, flow)
    stored = await (reader or service).get_session(app_name="shop", user_id="ada", session_id="s1")
    assert stored is not None
    listed = (await (reader or service).list_sessions(app_name="shop")).sessions
    user = await (reader or service).get_user_state(app_name="shop", user_id="ada")
    return seen(produced), seen(stored.events), stored.state, [(s.id, s.state) for s in listed], user


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore:.* is deprecated in favor of Workflow:DeprecationWarning")
@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_a_runner_flow_gives_what_adks_in_memory_service_gives(store_url: str, flow: str) -> None:
    """Tools setting app:/user:/temp: state and saving artifacts, a long-running tool, a transfer, a
    loop ended by escalation, parallel agents, a tool confirmation answered, compaction, a rewind:
    the events the runner yields, the session as stored (read by another service, as another
    process would), its state, the listing and the user's state equal InMemorySessionService's."""
    theirs = asyncio.run(run_flow(InMemorySessionService(), flow))  # type: ignore[no-untyped-call]
    app = tether.App(store_url)
    other = TetherSessionService(app if store_url == "memory://" else tether.App(store_url))
    ours = asyncio.run(run_flow(TetherSessionService(app), flow, reader=other))
    assert ours == theirs


# ----------------------------------------------------------------------------- SIGKILL, then resume


# What _adk_run_child.py imports, done once in its fork servers instead of in every child: its own
# imports, then what ADK and tether import lazily during a run (ADK's workflow and flow modules, the
# LlmAgent and Gemini model classes, the stores), which cost a child 0.6 s of its 0.8 s otherwise.
CHILD_IMPORTS = (
    "google.adk.agents",
    "google.adk.apps.app",
    "google.adk.events",
    "google.adk.models.base_llm",
    "google.adk.models.llm_request",
    "google.adk.models.llm_response",
    "google.adk.runners",
    "google.adk.sessions.session",
    "google.adk.tools",
    "google.genai.types",
    "tether",
    "tether.integrations.adk",
    "google.adk.agents._agent_router",
    "google.adk.agents.llm_agent",
    "google.adk.auth.auth_preprocessor",
    "google.adk.flows.llm_flows.auto_flow",
    "google.adk.flows.llm_flows.single_flow",
    "google.adk.memory.in_memory_memory_service",
    "google.adk.models.google_llm",
    "google.adk.tools.agent_tool",
    "google.adk.workflow._llm_agent_wrapper",
    "google.adk.workflow._workflow",
    "tether.store.postgres",
    "tether.store.sqlite",
)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def stored_session(url: str) -> list[Event]:
    service = TetherSessionService(tether.App(url))
    session = asyncio.run(service.get_session(app_name="shop", user_id="ada", session_id="s1"))
    assert session is not None
    return session.events


def shape(events: list[Event]) -> list[tuple[Any, ...]]:
    """What each event says: who, the parts (calls and answers by name), whether it ends the agent."""

    def part(p: types.Part) -> tuple[Any, ...]:
        if p.function_call:
            return ("call", p.function_call.name, p.function_call.args)
        if p.function_response:
            return ("answer", p.function_response.name, p.function_response.response)
        return ("text", p.text)

    return [
        (e.author, [part(p) for p in (e.content.parts or [] if e.content else [])], bool(e.actions.end_of_agent))
        for e in events
    ]


@pytest.mark.crash
@pytest.mark.timeout(600)
def test_sigkill_anywhere_in_a_run_then_resume(tmp_path: Path, make_url: Any, fork_servers: ForkServers) -> None:
    """A resumable ADK app's run on TetherSessionService, SIGKILLed after each event it stores and
    inside its side-effecting tool, is resumed by fresh processes on the same database: every event
    the killed process stored is still there, none is stored twice, the session ends as an
    uninterrupted run's, and the refund ran once — except where ADK itself runs something again
    (its resumability is at-least-once, and ADK's DatabaseSessionService does the same): a kill
    inside the refund after its effect runs it again, under the same function call id; a kill
    between the final answer and the event that ends the agent asks the model for it again."""
    script = HERE / "_adk_run_child.py"
    first_life, next_lives = fork_servers(CHILD_IMPORTS, CHILD_ENV)
    ref = tmp_path / "reference"
    ref.mkdir()
    ref_url = make_url(ref)
    done = first_life.run(script, ref_url, str(ref), "none:0", timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["completed"], done.stderr
    reference = shape(stored_session(ref_url))
    assert [e[0] for e in reference] == ["user", *["support"] * 6] and reference[-1][2], reference
    answer = reference.index(next(e for e in reference if e[1] and e[1][0][0] == "text" and e[0] == "support"))
    points = [f"after_append:{k}" for k in range(1, len(reference) + 1)]
    for point in [*points, "in_tool_before_effect:1", "in_tool_after_effect:1"]:
        work = tmp_path / point.replace(":", "-")
        work.mkdir()
        url = make_url(work)
        killed = first_life.run(script, url, str(work), point, timeout=120)
        assert killed.returncode == -signal.SIGKILL and (work / "killed").exists(), point + killed.stderr
        committed = lines(work / "appends.log")
        resumed = next_lives.run(script, url, str(work), "none:0", timeout=120)
        assert resumed.returncode == 0 and resumed.stdout.split() == ["completed"], point + resumed.stderr
        events = stored_session(url)
        ids = [e.id for e in events]
        assert len(ids) == len(set(ids)), point  # no event stored twice
        assert ids[: len(committed)] == committed, point  # what the killed process stored is there, in order
        refunds = [line for line in lines(work / "tools.log") if line.startswith("refund")]
        if point == "in_tool_after_effect:1":  # ADK runs the call again: the same key
            assert len(refunds) == 2 and len(set(refunds)) == 1, point
        else:
            assert len(refunds) == 1, point
        assert len(list((work / "effects").iterdir())) == 1, point
        if point == f"after_append:{answer + 1}":  # the answer stored, not the end of the agent
            assert shape(events) == [*reference[: answer + 1], *reference[answer:]], point
        else:
            assert shape(events) == reference, point
            assert lines(work / "model.log") == lines(ref / "model.log"), point  # no turn asked twice
