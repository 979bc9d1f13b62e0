"""Tokens, turns and the context window.

A turn is a user message, or an assistant message with the results of the tools it called
(in every shape: one Chat assistant message and its tool messages, an Anthropic assistant
message and the user message of tool_result blocks, Responses function_call items and their
function_call_output items). The window takes whole turns, newest first, so a tool result is
never sent without its call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import orjson

from tether.conversation import render
from tether.conversation.messages import Message, SessionView, Summary, parts_of
from tether.conversation.shapes import Part
from tether.errors import ConfigurationError

__all__ = [
    "IMAGE_TOKENS",
    "IMAGE_TOKENS_LOW",
    "EstimateCounter",
    "TiktokenCounter",
    "TokenCounter",
    "Window",
    "as_compacted",
    "build_window",
    "default_counter",
    "message_tokens",
    "summary_message",
    "turns",
    "window_over",
]

IMAGE_TOKENS_LOW = 85
"""An image with ``detail: "low"``: OpenAI's fixed price for one."""
IMAGE_TOKENS = 765
"""Any other image: OpenAI's price for a 1024×1024 image at high detail, a middle-of-the-road
estimate (tether does not decode images to measure them)."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens in a text. ``name`` says which counter it is (a window reports it)."""

    name: str

    def count(self, text: str) -> int: ...


class EstimateCounter:
    """An estimate: one token per four characters, rounded up. What a session counts with unless it
    is given another counter."""

    name = "estimate (4 characters per token)"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / 4)


class TiktokenCounter:
    """Tokens as tiktoken counts them in one encoding: a choice made explicitly, never because
    tiktoken happens to be installed (``pip install 'tether[tiktoken]'``).

    Example:
        >>> counter = TiktokenCounter.of("cl100k_base")  # doctest: +SKIP
        >>> session = app.session("s1", counter=counter)  # doctest: +SKIP
    """

    @classmethod
    def of(cls, encoding: str = "cl100k_base") -> TiktokenCounter:
        """The counter for ``encoding``; a clear error when tiktoken (or the encoding) cannot be had."""
        try:
            import tiktoken  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            raise ConfigurationError("TiktokenCounter needs tiktoken: pip install 'tether[tiktoken]'") from None
        try:
            return cls(tiktoken.get_encoding(encoding), encoding)
        except Exception as exc:  # an unknown name, or its encoding file cannot be downloaded
            raise ConfigurationError(f"tiktoken cannot load the encoding {encoding!r}: {exc}") from None

    def __init__(self, encoding: Any, label: str) -> None:
        self._encoding = encoding
        self.name = f"tiktoken {label}"

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


_DEFAULT = EstimateCounter()


def default_counter() -> TokenCounter:
    """The counter of a session given none: the estimate, whatever is installed, so a count never
    changes because a package appeared. Choose tiktoken with ``counter=TiktokenCounter.of(...)``."""
    return _DEFAULT


def message_tokens(message: Message, counter: TokenCounter) -> int:
    """A message's tokens: its text and tool calls by the counter, each image a fixed estimate
    (``IMAGE_TOKENS_LOW`` at low detail, else ``IMAGE_TOKENS``), any other part (audio, files,
    thinking, reasoning, unknown items) by the counter over its JSON, and 4 for the framing."""
    text = message.content
    if message.tool_calls:
        text += orjson.dumps([c.model_dump() for c in message.tool_calls]).decode()
    if message.format == "tether":
        return counter.count(text) + 4
    images, others = _weigh(parts_of(message)[1])
    return counter.count(text + "".join(orjson.dumps(o).decode() for o in others)) + images + 4


def _weigh(parts: list[Part]) -> tuple[int, list[Any]]:
    images, others = 0, list[Any]()
    for p in parts:
        if p["kind"] == "image":
            images += IMAGE_TOKENS_LOW if p["detail"] == "low" else IMAGE_TOKENS
        elif p["kind"] == "tool_result":
            inner, more = _weigh(p["parts"])
            images, others = images + inner, others + more
        elif p["kind"] in ("other", "audio"):
            others.append(p["raw"])
    return images, others


# ----------------------------------------------------------------------------- turns


def _leads_on(previous: Message) -> bool:
    """Whether an assistant message right after ``previous`` belongs to ``previous``'s turn: after
    calls not yet answered (parallel calls stored one per item), or after a Responses reasoning
    item (the item it reasoned towards)."""
    if previous.role != "assistant":
        return False
    return bool(previous.tool_calls) or (
        previous.format == "openai_responses" and previous.original.get("type") == "reasoning"
    )


def turns(messages: Sequence[Message]) -> list[list[Message]]:
    """Messages grouped into turns: an assistant message with its tool calls' results is one turn.

    A tool result whose call is not in its turn (it was summarized) is dropped: a model API
    refuses a tool result without the call it answers.
    """
    groups: list[list[Message]] = []
    open_calls: set[str] = set()
    for m in messages:
        if m.role == "tool":
            if groups and m.answers and open_calls.issuperset(m.answers):
                groups[-1].append(m)
            continue
        if m.role == "assistant" and groups and _leads_on(groups[-1][-1]):
            groups[-1].append(m)
            open_calls |= {c.id for c in m.tool_calls}
            continue
        groups.append([m])
        open_calls = {c.id for c in m.tool_calls} if m.role == "assistant" else set()
    return groups


# ----------------------------------------------------------------------------- the window


@dataclass(frozen=True)
class Window:
    """What goes into the next model call, with its token count and the counter that made it."""

    messages: tuple[Message, ...]
    summary: Summary | None
    tokens: int
    max_tokens: int
    counter: str
    dropped: int
    """Messages after the summary left out: those that did not fit, and tool results whose call
    was summarized (a model API refuses them)."""

    def to_openai(self) -> list[dict[str, Any]]:
        """OpenAI Chat Completions ``messages``; messages stored in that shape come back verbatim."""
        return render.to_openai(self.messages)

    def to_openai_responses(self) -> list[dict[str, Any]]:
        """OpenAI Responses ``input`` items; items stored in that shape come back verbatim."""
        return render.to_openai_responses(self.messages)

    def to_anthropic(self) -> dict[str, Any]:
        """Anthropic Messages: ``{"system": ..., "messages": [...]}``; tool calls as ``tool_use`` blocks,
        results as ``tool_result`` blocks in a user turn; consecutive turns of one role merged;
        messages stored in that shape come back verbatim."""
        return render.to_anthropic(self.messages)


def summary_message(summary: Summary) -> Message:
    """The system message a summary goes to a model as (in windows, and in ``Session.compacted()``)."""
    content = f"Summary of the earlier conversation:\n{summary.text}"
    return Message(
        seq=summary.seq, role="system", at=summary.at, content=content, original={"role": "system", "content": content}
    )


def as_compacted(shown: Sequence[Message], summary: Summary | None) -> list[Message]:
    """The conversation as compaction leaves it (pure): ``shown`` (every message still in the session,
    oldest first) with the messages ``summary`` folded replaced by it, in the place of the first of
    them. System messages are never folded and keep their places; messages after the summary's
    range are as they were added."""
    if summary is None:
        return list(shown)
    out: list[Message] = []
    placed = False
    for m in shown:
        folded = m.role != "system" and m.seq <= summary.covers_to
        if not placed and (folded or m.seq > summary.covers_to):
            out.append(summary_message(summary))
            placed = True
        if not folded:
            out.append(m)
    if not placed:
        out.append(summary_message(summary))
    return out


def build_window(view: SessionView, max_tokens: int, keep_last: int, counter: TokenCounter) -> Window:
    """The window over ``view`` (pure): system messages, the summary, then the newest turns that fit.

    Its cost is the window's, not the conversation's: turns are grouped from the newest message
    backwards, only as far as the budget (and ``keep_last``) reaches.
    """
    window = window_over(
        view.system, view.summary, view.recent, complete=True, total=len(view.recent),
        max_tokens=max_tokens, keep_last=keep_last, counter=counter,
    )
    assert window is not None  # a complete list of messages always answers
    return window


def window_over(
    system: Sequence[Message],
    summary: Summary | None,
    recent: Sequence[Message],
    *,
    complete: bool,
    total: int,
    max_tokens: int,
    keep_last: int,
    counter: TokenCounter,
    costs: dict[int, int] | None = None,
) -> Window | None:
    """The window from the newest part of a conversation (pure).

    ``recent`` is a suffix of the messages after the summary (all of them when ``complete``), and
    ``total`` how many of those there are. ``None`` when the suffix is too short to answer: the
    window would reach further back than it goes (read more, and ask again). ``costs``: the
    messages' token counts by seq, by this counter, kept between calls (filled in as they are counted).
    """
    costs = {} if costs is None else costs
    fixed = list(system)
    if summary is not None:
        fixed.append(summary_message(summary))
    budget = max_tokens - sum(message_tokens(m, counter) for m in fixed)
    want = max(keep_last, 1)
    span = _FIRST_SPAN
    while True:
        start = max(0, len(recent) - span)
        while start > 0 and not _turn_starts(recent, start):
            start -= 1  # a turn that begins before the suffix would be grouped differently: widen
        if start == 0 and not complete:
            # The oldest messages held may belong to a turn that began before them: group from the
            # first certain turn start, and ask for more only if the window reaches past it.
            start = next((i for i in range(1, len(recent)) if _turn_starts(recent, i)), len(recent))
            chosen, exhausted = _newest_fitting(turns(recent[start:]), budget, want, counter, costs)
            if exhausted:
                return None
            break
        chosen, exhausted = _newest_fitting(turns(recent[start:]), budget, want, counter, costs)
        if not exhausted or start == 0:
            break
        span *= 4
    chosen.reverse()
    picked = [m for group in chosen for m in group]
    messages = tuple(fixed + picked)
    return Window(
        messages=messages,
        summary=summary,
        tokens=sum(message_tokens(m, counter) for m in fixed) + sum(costs[m.seq] for m in picked),
        max_tokens=max_tokens,
        counter=counter.name,
        dropped=total - len(picked),
    )


_FIRST_SPAN = 32  # messages grouped at first, from the newest back (then 4x as many, as needed)


def _newest_fitting(
    groups: list[list[Message]], budget: int, want: int, counter: TokenCounter, costs: dict[int, int]
) -> tuple[list[list[Message]], bool]:
    """The newest turns that fit ``budget`` (at least ``want`` of them), newest first, and whether
    every turn was taken (an earlier one might fit too)."""
    chosen: list[list[Message]] = []
    for group in reversed(groups):
        cost = 0
        for m in group:
            tokens = costs.get(m.seq)
            if tokens is None:
                tokens = costs[m.seq] = message_tokens(m, counter)
            cost += tokens
        if len(chosen) < want or cost <= budget:
            chosen.append(group)
            budget -= cost
        else:
            return chosen, False
    return chosen, True


def _turn_starts(messages: Sequence[Message], i: int) -> bool:
    """Whether ``turns(messages)`` certainly starts a turn at ``messages[i]`` in a state that does
    not depend on anything before it, so ``turns(messages[i:])`` groups the rest the same way.

    True for a user message; for an assistant message after a message it cannot belong to (one
    that is not an assistant with calls pending), or after tool results of which one certainly
    answers the assistant message before them (it is kept, so the next assistant message opens a
    turn). Anything else may depend on earlier messages: False (the caller looks further back).

    Only the oldest turn of a suffix can be grouped differently from the whole (a suffix that
    starts a turn is in the whole's state from there on), and ``window_over`` never uses that turn
    unless the suffix is the whole: this rule saves reading further, it does not make the result.
    """
    m = messages[i]
    if m.role in ("user", "system"):
        return True
    if m.role != "assistant":
        return False
    previous = messages[i - 1]
    if previous.role != "tool":
        return not _leads_on(previous)
    j = i - 1
    while j >= 0 and messages[j].role == "tool":
        j -= 1
    if j < 0:
        return False
    caller = messages[j]
    if not _leads_on(caller):
        return True
    ids = {c.id for c in caller.tool_calls}
    return any(t.answers and ids.issuperset(t.answers) for t in messages[j + 1 : i])
