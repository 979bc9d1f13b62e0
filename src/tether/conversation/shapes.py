"""The providers' message shapes: which one a message is, whether it is well formed, and what it says.

A message is stored verbatim, as it came; this module reads it into tether's neutral
terms — a normalised role and a list of *parts* — for the window (roles, tool-call
pairing, token weight) and for rendering into another provider's shape. Reading is
also validation: :func:`read` refuses a malformed message with ``InvalidInputError``
naming what was wrong and what was expected, and is run once before anything is
written and again, on data it already accepted, whenever a stored message is read.

A part is a plain dict with a ``kind``:

- ``text``: ``text``; ``plain`` when the message's content was a bare string.
- ``image``: ``url``, or ``media_type`` and base64 ``data``; ``detail`` when given.
- ``audio``: OpenAI Chat ``input_audio`` (``data``, ``format``).
- ``tool_call``: ``id``, ``name``, ``arguments`` (a dict, or ``None`` when the provider's JSON
  string is not an object) and ``raw`` (that JSON string, ``None`` for Anthropic's ``input``).
- ``tool_result``: ``id`` (the call it answers), ``parts`` (text and image parts), ``plain``,
  ``is_error``.
- ``other``: anything that exists in one provider only (thinking, reasoning, files, refusals,
  server tools, unknown item types); ``raw`` is the block. It renders only verbatim, in its own
  provider's shape; a ``call_id``/``answers`` on it still pairs calls with their results.

Every part carries ``what``, its name for error messages ("an Anthropic 'thinking' block").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from tether.errors import InvalidInputError

__all__ = ["FORMATS", "Format", "Part", "Shape", "detect", "read"]

Format = Literal["tether", "openai", "openai_responses", "anthropic"]
FORMATS: tuple[Format, ...] = ("tether", "openai", "openai_responses", "anthropic")
Role = Literal["system", "user", "assistant", "tool"]
Part = dict[str, Any]

PROVIDER = {"openai": "OpenAI Chat", "openai_responses": "OpenAI Responses", "anthropic": "Anthropic"}

_CHAT_ONLY = {"image_url", "input_audio", "file", "refusal"}
_RESPONSES_PARTS = {"input_text", "output_text", "input_image", "input_file"}
_ANTHROPIC_ONLY = {
    "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking", "search_result",
    "server_tool_use", "web_search_tool_result", "container_upload",
}
_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.S)


@dataclass(frozen=True)
class Shape:
    """A message read into neutral terms: its normalised role, its parts, and its ``name`` if any.

    ``source_role`` is the role as the provider spelled it (``developer`` stays ``developer``).
    """

    role: Role
    parts: list[Part]
    source_role: str
    name: str | None = None


def detect(message: dict[str, Any]) -> Format:
    """Which shape ``message`` is in. tether's own form wins where it is indistinguishable.

    ``{"role": "user", "content": "hi"}`` is valid in every provider's shape and renders back
    identically for each, so it is tether's form; a shape is recognised by what only it has
    (OpenAI's ``function`` in tool calls, Anthropic's ``tool_use`` blocks, Responses ``type``).
    """
    if message.get("type") == "message":
        return "openai_responses"
    if "role" not in message:  # a Responses item; with a role, any other "type" is tether metadata
        if isinstance(message.get("type"), str):
            return "openai_responses"
        raise InvalidInputError(
            f"a message needs a 'role' (tether's form, OpenAI Chat, Anthropic) or a 'type' (an OpenAI "
            f"Responses item); got keys {sorted(message)}"
        )
    content = message.get("content")
    if isinstance(content, list):
        kinds = {p.get("type") for p in content if isinstance(p, dict)}
        if kinds & _RESPONSES_PARTS:
            return "openai_responses"
        anthropic_text = any(isinstance(p, dict) and ({"cache_control", "citations"} & p.keys()) for p in content)
        if kinds & _ANTHROPIC_ONLY or anthropic_text:
            return "anthropic"
        if kinds <= {"text"} | _CHAT_ONLY:
            return "openai"
        raise InvalidInputError(
            f"cannot tell which provider's shape a message with content parts {sorted(map(str, kinds))} is in; "
            "pass format='openai', 'openai_responses' or 'anthropic'"
        )
    calls = message.get("tool_calls")
    openai_calls = isinstance(calls, list) and any(
        isinstance(c, dict) and {"function", "type"} & c.keys() for c in calls
    )
    tether_calls = isinstance(calls, list) and bool(calls) and not openai_calls  # {"id", "name", "arguments"}
    if (
        openai_calls
        or (content is None and message.get("role") == "assistant" and calls is not None and not tether_calls)
        or message.get("role") in ("developer", "function")
        or {"refusal", "audio", "function_call"} & message.keys()
    ):
        return "openai"
    return "tether"


def read(fmt: str, message: dict[str, Any]) -> Shape:
    """Read a provider-shaped message (validating it) into a :class:`Shape`."""
    if not isinstance(message, dict):
        raise InvalidInputError(f"a message is a dict, got {type(message).__name__}")
    return _READERS[fmt](message)


# ----------------------------------------------------------------------------- helpers


def _bad(what: str, expected: str) -> InvalidInputError:
    return InvalidInputError(f"{what}; expected {expected}")


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{what} is {type(value).__name__}", "a string")
    return value


def _typed(block: Any, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _bad(f"{where} is not a dict with a string 'type'", "a part such as {'type': 'text', 'text': ...}")
    return str(block["type"])


def _only(message: dict[str, Any], allowed: set[str], what: str) -> None:
    extra = sorted(message.keys() - allowed)
    if extra:
        raise _bad(
            f"unexpected key(s) {extra} in {what}",
            f"only {sorted(allowed)} (metadata goes in keywords: session.add(message, key=value))",
        )


def text(value: str, what: str, *, plain: bool = False) -> Part:
    return {"kind": "text", "text": value, "plain": plain, "what": what}


def _other(raw: Any, what: str, **pairing: Any) -> Part:
    return {"kind": "other", "raw": raw, "what": what, **pairing}


def _image_from_url(url: str, detail: str | None, what: str) -> Part:
    match = _DATA_URL.fullmatch(url)
    if match:
        return {"kind": "image", "url": None, "media_type": match[1], "data": match[2], "detail": detail, "what": what}
    return {"kind": "image", "url": url, "media_type": None, "data": None, "detail": detail, "what": what}


def _arguments(raw: str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def tool_call(call_id: str, name: str, arguments: dict[str, Any] | None, raw: str | None, what: str) -> Part:
    return {"kind": "tool_call", "id": call_id, "name": name, "arguments": arguments, "raw": raw, "what": what}


def tool_result(call_id: str, parts: list[Part], *, plain: bool, is_error: bool, what: str) -> Part:
    return {"kind": "tool_result", "id": call_id, "parts": parts, "plain": plain, "is_error": is_error, "what": what}


# ----------------------------------------------------------------------------- OpenAI Chat Completions

_CHAT_ROLES: dict[str, Role] = {
    "system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool",
}
_CHAT_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal", "audio"},
    "tool": {"role", "content", "tool_call_id"},
}
_CHAT_PARTS = {
    "system": {"text"},
    "developer": {"text"},
    "user": {"text", "image_url", "input_audio", "file"},
    "assistant": {"text", "refusal"},
    "tool": {"text"},
}
_CHAT_CALL = "{'id': str, 'type': 'function', 'function': {'name': str, 'arguments': '<JSON string>'}}"


def _chat_part(part: Any, role: str, where: str) -> Part:
    kind = _typed(part, where)
    if kind not in _CHAT_PARTS[role]:
        raise _bad(f"{where} has type {kind!r}, which an OpenAI Chat {role} message cannot hold",
                   f"one of {sorted(_CHAT_PARTS[role])}")
    what = f"an OpenAI Chat {kind!r} part"
    if kind == "text":
        return text(_str(part.get("text"), f"{where}.text"), what)
    if kind == "image_url":
        image = part.get("image_url")
        if not isinstance(image, dict):
            raise _bad(f"{where} has no 'image_url' object", "{'type': 'image_url', 'image_url': {'url': ...}}")
        detail = image.get("detail")
        return _image_from_url(_str(image.get("url"), f"{where}.image_url.url"), detail, what)
    if kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict):
            raise _bad(f"{where} has no 'input_audio' object", "{'input_audio': {'data': base64, 'format': 'wav'}}")
        data = _str(audio.get("data"), f"{where}.input_audio.data")
        audio_format = _str(audio.get("format"), f"{where}.input_audio.format")
        return {"kind": "audio", "data": data, "format": audio_format, "raw": part, "what": what}
    if kind == "refusal":
        _str(part.get("refusal"), f"{where}.refusal")
    return _other(part, what)


def _chat_call(call: Any, where: str) -> Part:
    if not isinstance(call, dict):
        raise _bad(f"{where} is {type(call).__name__}", _CHAT_CALL)
    call_id = _str(call.get("id"), f"{where}.id")
    kind = call.get("type", "function")
    if kind == "custom":
        return _other(call, "an OpenAI Chat 'custom' tool call", call_id=call_id)
    function = call.get("function")
    if kind != "function" or not isinstance(function, dict):
        problem = f"has type {kind!r}" if kind != "function" else "has no 'function'"
        raise _bad(f"{where} {problem}", _CHAT_CALL)
    name = _str(function.get("name"), f"{where}.function.name")
    raw = _str(function.get("arguments"), f"{where}.function.arguments (a JSON string, not a dict)")
    return tool_call(call_id, name, _arguments(raw), raw, "an OpenAI Chat tool call")


def _read_openai(message: dict[str, Any]) -> Shape:
    role = message.get("role")
    if role == "function" or "function_call" in message:
        raise _bad("the deprecated OpenAI 'function' role and 'function_call' are not accepted",
                   "tool_calls on the assistant message and role 'tool' messages with tool_call_id")
    if not isinstance(role, str) or role not in _CHAT_ROLES:
        raise _bad(f"role {role!r} is not an OpenAI Chat role", "one of system, developer, user, assistant, tool")
    _only(message, _CHAT_KEYS[role], f"an OpenAI Chat {role} message")
    content = message.get("content")
    parts: list[Part] = []
    if isinstance(content, str):
        parts.append(text(content, "OpenAI Chat text", plain=True))
    elif isinstance(content, list):
        parts += [_chat_part(p, role, f"content[{i}]") for i, p in enumerate(content)]
    elif content is not None:
        raise _bad(f"content is {type(content).__name__}", "a string or a list of content parts")
    elif role != "assistant" or not ({"tool_calls", "refusal", "audio"} & {k for k, v in message.items() if v}):
        # The API's rule: only an assistant message that calls tools (or refuses, or answers with
        # audio) may have no content.
        raise _bad(
            f"content of an OpenAI Chat {role} message is {'missing' if 'content' not in message else 'None'}",
            "a string or a list of content parts (content may be None only in an assistant message with "
            "tool_calls, a refusal or audio)",
        )
    name = message.get("name")
    if name is not None:
        _str(name, "name")
    if role == "tool":
        call_id = _str(message.get("tool_call_id"), "tool_call_id (the id of the call this answers)")
        result = tool_result(call_id, parts, plain=isinstance(content, str), is_error=False,
                             what="an OpenAI Chat tool message")
        return Shape("tool", [result], role)
    if role == "assistant":
        refusal = message.get("refusal")
        if refusal is not None:
            parts.append(_other(_str(refusal, "refusal"), "an OpenAI Chat 'refusal'"))
        if message.get("audio") is not None:
            parts.append(_other(message["audio"], "an OpenAI Chat assistant 'audio' reference"))
        calls = message.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise _bad(f"tool_calls is {type(calls).__name__}", f"a list of {_CHAT_CALL}")
            parts += [_chat_call(c, f"tool_calls[{i}]") for i, c in enumerate(calls)]
    return Shape(_CHAT_ROLES[role], parts, role, name)


# ----------------------------------------------------------------------------- Anthropic Messages

_ANTHROPIC_ASSISTANT_ONLY = {"tool_use", "thinking", "redacted_thinking"}


def _anthropic_source(block: dict[str, Any], where: str, what: str) -> Part:
    source = block.get("source")
    if not isinstance(source, dict):
        raise _bad(f"{where} has no 'source'", "{'type': 'base64', 'media_type': ..., 'data': ...} or {'type': 'url'}")
    if source.get("type") == "base64":
        return {"kind": "image", "url": None, "detail": None, "what": what,
                "media_type": _str(source.get("media_type"), f"{where}.source.media_type"),
                "data": _str(source.get("data"), f"{where}.source.data")}
    if source.get("type") == "url":
        url = _str(source.get("url"), f"{where}.source.url")
        return {"kind": "image", "url": url, "media_type": None, "data": None, "detail": None, "what": what}
    return _other(block, f"an Anthropic image with a {source.get('type')!r} source")


def _anthropic_block(block: Any, role: str, where: str) -> Part:
    kind = _typed(block, where)
    what = f"an Anthropic {kind!r} block"
    if (kind in _ANTHROPIC_ASSISTANT_ONLY and role != "assistant") or (kind == "tool_result" and role != "user"):
        raise _bad(
            f"{where} is a {kind!r} block in a {role} message",
            "tool_use and thinking blocks in assistant messages, tool_result blocks in user messages",
        )
    if kind == "text":
        return text(_str(block.get("text"), f"{where}.text"), what)
    if kind == "image":
        return _anthropic_source(block, where, what)
    if kind == "tool_use":
        arguments = block.get("input")
        if not isinstance(arguments, dict):
            raise _bad(f"{where}.input is {type(arguments).__name__}", "a dict of the tool's arguments")
        return tool_call(_str(block.get("id"), f"{where}.id"), _str(block.get("name"), f"{where}.name"),
                         arguments, None, "an Anthropic 'tool_use' block")
    if kind == "tool_result":
        call_id = _str(block.get("tool_use_id"), f"{where}.tool_use_id")
        content = block.get("content", "")
        if isinstance(content, str):
            inner = [text(content, what, plain=True)] if "content" in block else []
        elif isinstance(content, list):
            inner = [_anthropic_block(b, "user", f"{where}.content[{i}]") for i, b in enumerate(content)]
        else:
            raise _bad(f"{where}.content is {type(content).__name__}", "a string or a list of text/image blocks")
        return tool_result(call_id, inner, plain=isinstance(content, str), is_error=bool(block.get("is_error")),
                           what=what)
    if kind == "thinking":
        _str(block.get("thinking"), f"{where}.thinking")
    return _other(block, what)


def _read_anthropic(message: dict[str, Any]) -> Shape:
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise _bad(
            f"role {role!r} is not an Anthropic message role",
            "'user' or 'assistant' (a system prompt is added in tether's form: session.add('system', text))",
        )
    _only(message, {"role", "content"}, "an Anthropic message")
    content = message.get("content")
    if isinstance(content, str):
        parts = [text(content, "Anthropic text", plain=True)]
    elif isinstance(content, list):
        parts = [_anthropic_block(b, role, f"content[{i}]") for i, b in enumerate(content)]
    else:
        raise _bad(f"content is {type(content).__name__}", "a string or a list of content blocks")
    answers = any(p["kind"] == "tool_result" for p in parts)
    return Shape("tool" if answers else role, parts, role)


# ----------------------------------------------------------------------------- OpenAI Responses

_RESPONSES_ROLES: dict[str, Role] = {
    "system": "system", "developer": "system", "user": "user", "assistant": "assistant",
}


def _responses_part(part: Any, where: str) -> Part:
    kind = _typed(part, where)
    what = f"an OpenAI Responses {kind!r} part"
    if kind in ("input_text", "output_text"):
        return text(_str(part.get("text"), f"{where}.text"), what)
    if kind == "input_image":
        url = part.get("image_url")
        if url is None:  # an uploaded file's id: OpenAI only
            return _other(part, "an OpenAI Responses 'input_image' given by file_id")
        return _image_from_url(_str(url, f"{where}.image_url"), part.get("detail"), what)
    if kind == "refusal":
        _str(part.get("refusal"), f"{where}.refusal")
    return _other(part, what)


def _read_responses(item: dict[str, Any]) -> Shape:
    if "type" not in item and "role" not in item and "content" not in item:
        # No item of the API's, but one a session store keeps all the same: what the Agents SDK's
        # session wrappers store in the session beneath them (EncryptedSession's envelopes). Kept
        # verbatim; it renders only as itself.
        return Shape("assistant", [_other(item, "an item of no OpenAI Responses type")], "assistant")
    kind = item.get("type", "message" if "role" in item else None)
    if not isinstance(kind, str):
        raise _bad("an OpenAI Responses item has no 'type'", "'message', 'function_call', 'function_call_output', …")
    what = f"an OpenAI Responses {kind!r} item"
    if kind == "message":
        role = item.get("role")
        if not isinstance(role, str) or role not in _RESPONSES_ROLES:
            raise _bad(f"role {role!r} is not an OpenAI Responses message role", "user, assistant, system or developer")
        content = item.get("content")
        if isinstance(content, str):
            parts = [text(content, "OpenAI Responses text", plain=True)]
        elif isinstance(content, list):
            parts = [_responses_part(p, f"content[{i}]") for i, p in enumerate(content)]
        else:
            raise _bad(f"content is {type(content).__name__}", "a string or a list of input_text/input_image parts")
        return Shape(_RESPONSES_ROLES[role], parts, role)
    if kind == "function_call":
        raw = _str(item.get("arguments"), "function_call.arguments (a JSON string)")
        call_id = _str(item.get("call_id"), "function_call.call_id")
        call = tool_call(call_id, _str(item.get("name"), "function_call.name"), _arguments(raw), raw, what)
        return Shape("assistant", [call], "assistant")
    if kind == "function_call_output":
        call_id = _str(item.get("call_id"), "function_call_output.call_id")
        output = item.get("output")
        if isinstance(output, str):
            inner = [text(output, what, plain=True)]
        elif isinstance(output, list):
            inner = [_responses_part(p, f"output[{i}]") for i, p in enumerate(output)]
        else:
            raise _bad(f"function_call_output.output is {type(output).__name__}", "a string or a list of input parts")
        return Shape("tool", [tool_result(call_id, inner, plain=isinstance(output, str), is_error=False, what=what)],
                     "tool")
    # Any other item (reasoning, built-in tool calls, references): kept verbatim. Items with a
    # call_id still pair: "*_output" answers the call of the same id.
    if item.get("call_id") is not None:
        pairs = _str(item["call_id"], f"{kind}.call_id")
        if kind.endswith("_output"):
            return Shape("tool", [_other(item, what, answers=pairs)], "tool")
        return Shape("assistant", [_other(item, what, call_id=pairs, name=item.get("name") or kind)], "assistant")
    return Shape("assistant", [_other(item, what)], "assistant")


def _read_tether(message: dict[str, Any]) -> Shape:  # tether's form is read by messages.to_event
    raise AssertionError("tether's own form has no provider reader")


_READERS: dict[str, Callable[[dict[str, Any]], Shape]] = {
    "openai": _read_openai,
    "anthropic": _read_anthropic,
    "openai_responses": _read_responses,
    "tether": _read_tether,
}
