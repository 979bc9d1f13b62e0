"""Renderers: a window's messages in OpenAI Chat, OpenAI Responses or Anthropic shape.

A message stored in the target's own shape is sent back verbatim (a copy of it). Any other
is converted part by part: text, images, tool calls and results, system/developer messages.
A part the target has no form for raises ``InvalidInputError`` naming the message's seq and
the part ("message 7: an Anthropic 'thinking' block has no OpenAI Chat form"); no part is
ever dropped silently. What each conversion keeps and refuses is tabled in
``docs/conversation.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from tether.conversation.messages import Message, parts_of
from tether.conversation.shapes import PROVIDER, Part
from tether.errors import InvalidInputError

__all__ = ["to_anthropic", "to_openai", "to_openai_responses"]


def _copy(value: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = orjson.loads(orjson.dumps(value))
    return copied


def _refuse(m: Message, part: Part, target: str) -> InvalidInputError:
    return InvalidInputError(f"message {m.seq}: {part['what']} has no {PROVIDER[target]} form")


def _arguments_json(part: Part) -> str:
    return part["raw"] if part["raw"] is not None else orjson.dumps(part["arguments"]).decode()


def _data_url(part: Part) -> str:
    return part["url"] or f"data:{part['media_type']};base64,{part['data']}"


def _plain(parts: list[Part]) -> str | None:
    """The bare string a message's content was, if it was one (so it renders as one again)."""
    if len(parts) == 1 and parts[0]["kind"] == "text" and parts[0]["plain"]:
        return str(parts[0]["text"])
    return None


# ----------------------------------------------------------------------------- OpenAI Chat


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """OpenAI Chat Completions ``messages``."""
    out: list[dict[str, Any]] = []
    for m in messages:
        items = [_copy(m.original)] if m.format == "openai" else _chat_items(m)
        for item in items:
            previous = out[-1] if out else None
            calling = previous is not None and previous["role"] == "assistant" and previous.get("tool_calls")
            if item["role"] == "assistant" and previous is not None and calling:
                # Parallel calls stored as separate items (Responses): Chat wants them in one message,
                # answered by the tool messages right after it.
                _merge_assistant(previous, item)
            else:
                out.append(item)
    return out


def _merge_assistant(into: dict[str, Any], item: dict[str, Any]) -> None:
    def as_parts(content: Any) -> list[Any]:
        return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])

    if item.get("content") is not None:
        into["content"] = item["content"] if into.get("content") is None else as_parts(into["content"]) + as_parts(
            item["content"]
        )
    into["tool_calls"] = [*into["tool_calls"], *item.get("tool_calls", [])]


def _chat_content(m: Message, parts: list[Part], allowed: set[str]) -> Any:
    plain = _plain(parts)
    if plain is not None:
        return plain
    content: list[dict[str, Any]] = []
    for p in parts:
        if p["kind"] not in allowed:
            raise _refuse(m, p, "openai")
        if p["kind"] == "text":
            content.append({"type": "text", "text": p["text"]})
        elif p["kind"] == "image":
            image = {"url": _data_url(p)}
            if p["detail"] is not None:
                image["detail"] = p["detail"]
            content.append({"type": "image_url", "image_url": image})
        else:  # audio
            content.append({"type": "input_audio", "input_audio": {"data": p["data"], "format": p["format"]}})
    return content


def _chat_tool_content(m: Message, result: Part) -> Any:
    for inner in result["parts"]:
        if inner["kind"] != "text":  # a Chat tool message holds text only
            raise InvalidInputError(
                f"message {m.seq}: {inner['what']} inside a tool result has no OpenAI Chat form "
                "(a Chat tool message holds text only)"
            )
    return _chat_content(m, result["parts"], {"text"}) if result["parts"] else ""


def _chat_items(m: Message) -> list[dict[str, Any]]:
    role, parts = parts_of(m)
    if m.role == "system":
        item = {"role": role if role == "developer" else "system", "content": _chat_content(m, parts, {"text"})}
        return [{**item, "name": m.name} if m.name else item]
    items: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": p["id"], "content": _chat_tool_content(m, p)}
        for p in parts
        if p["kind"] == "tool_result"
    ]
    rest = [p for p in parts if p["kind"] != "tool_result"]
    if m.role == "assistant":
        texts = [p for p in rest if p["kind"] != "tool_call"]
        calls = [p for p in rest if p["kind"] == "tool_call"]
        item = {"role": "assistant", "content": _chat_content(m, texts, {"text"}) if texts else None}
        if calls:
            item["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": _arguments_json(c)}}
                for c in calls
            ]
        elif not texts:
            item["content"] = ""
        items.append({**item, "name": m.name} if m.name else item)
    elif rest or not items:
        item = {"role": "user", "content": _chat_content(m, rest, {"text", "image", "audio"})}
        items.append({**item, "name": m.name} if m.name else item)
    return items


# ----------------------------------------------------------------------------- Anthropic


def to_anthropic(messages: Sequence[Message]) -> dict[str, Any]:
    """Anthropic Messages: ``{"system": ..., "messages": [...]}``; consecutive turns of one role merged,
    and a first turn that is not the user's preceded by a placeholder user turn (the API needs one)."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            for p in parts_of(m)[1]:
                if p["kind"] != "text":
                    raise InvalidInputError(
                        f"message {m.seq}: {p['what']} in a system message has no Anthropic form "
                        "(Anthropic's system prompt is text)"
                    )
            system.append(m.content)
            continue
        if m.format == "anthropic":
            role, content = m.original["role"], _copy(m.original)["content"]
        else:
            role, content = ("assistant" if m.role == "assistant" else "user"), _anthropic_content(m)
        if out and out[-1]["role"] == role:
            out[-1]["content"] = _blocks(out[-1]["content"]) + _blocks(content)
        else:
            out.append({"role": role, "content": content})
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": "(conversation continues)"}]})
    result: dict[str, Any] = {"messages": out}
    if system:
        result["system"] = "\n\n".join(system)
    return result


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _anthropic_block(m: Message, p: Part) -> dict[str, Any]:
    if p["kind"] == "text":
        return {"type": "text", "text": p["text"]}
    if p["kind"] == "image":
        if p["url"] is not None:
            return {"type": "image", "source": {"type": "url", "url": p["url"]}}
        return {"type": "image", "source": {"type": "base64", "media_type": p["media_type"], "data": p["data"]}}
    if p["kind"] == "tool_call":
        if p["arguments"] is None:
            raise InvalidInputError(
                f"message {m.seq}: {p['what']} {p['id']!r} has arguments that are not a JSON object, "
                "which an Anthropic tool_use input must be"
            )
        return {"type": "tool_use", "id": p["id"], "name": p["name"], "input": p["arguments"]}
    if p["kind"] == "tool_result":
        plain = _plain(p["parts"])
        content: Any = plain if plain is not None else [_anthropic_block(m, q) for q in p["parts"]]
        block = {"type": "tool_result", "tool_use_id": p["id"], "content": content if p["parts"] else ""}
        return {**block, "is_error": True} if p["is_error"] else block
    raise _refuse(m, p, "anthropic")


def _anthropic_content(m: Message) -> Any:
    parts = parts_of(m)[1]
    plain = _plain(parts)
    return plain if plain is not None else [_anthropic_block(m, p) for p in parts]


# ----------------------------------------------------------------------------- OpenAI Responses


def to_openai_responses(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """OpenAI Responses ``input`` items."""
    out: list[dict[str, Any]] = []
    for m in messages:
        out += [_copy(m.original)] if m.format == "openai_responses" else _responses_items(m)
    return out


def _input_parts(m: Message, parts: list[Part]) -> Any:
    plain = _plain(parts)
    if plain is not None:
        return plain
    content: list[dict[str, Any]] = []
    for p in parts:
        if p["kind"] == "text":
            content.append({"type": "input_text", "text": p["text"]})
        elif p["kind"] == "image":
            content.append({"type": "input_image", "image_url": _data_url(p), "detail": p["detail"] or "auto"})
        else:
            raise _refuse(m, p, "openai_responses")
    return content


def _responses_items(m: Message) -> list[dict[str, Any]]:
    role, parts = parts_of(m)
    if m.role == "system":
        return [{"role": role if role == "developer" else "system", "content": _input_parts(m, parts)}]
    items: list[dict[str, Any]] = [
        {
            "type": "function_call_output",
            "call_id": p["id"],
            "output": _input_parts(m, p["parts"]) if p["parts"] else "",
        }
        for p in parts
        if p["kind"] == "tool_result"
    ]
    rest = [p for p in parts if p["kind"] != "tool_result"]
    if m.role != "assistant":
        if rest or not items:
            items.append({"role": "user", "content": _input_parts(m, rest)})
        return items
    for p in rest:  # assistant text and calls, in order: one item each
        if p["kind"] == "text":
            items.append({"role": "assistant", "content": p["text"]})
        elif p["kind"] == "tool_call":
            items.append({"type": "function_call", "call_id": p["id"], "name": p["name"],
                          "arguments": _arguments_json(p)})
        else:
            raise _refuse(m, p, "openai_responses")
    return items
