"""The OpenAPI document: errors as ``application/problem+json``, and how a client authenticates."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from tether.serve.models import Problem
from tether.serve.problems import MEDIA_TYPE

__all__ = ["ERROR_RESPONSES", "describe", "operation_id"]

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "description": what}
    for status, what in (
        (400, "a bad value: a seq past the end, a step the task never ran, an answer that does not fit"),
        (401, "no API key, or one that is unknown or revoked"),
        (403, "a browser's change without the CSRF header, or a foreign Host without keys"),
        (404, "no such task, session, user or route in your tenant"),
        (409, "the task's state forbids it"),
        (413, "a value over the store's limit"),
        (422, "the request does not fit the document"),
        (503, "the store is away; try again shortly"),
    )
}
"""The errors every operation may answer, each a :class:`Problem`."""


def operation_id(route: APIRoute) -> str:
    """An operation's id: its route's name (``get_task``), which the API keeps as it is."""
    return route.name


def describe(api: FastAPI, *, no_auth: bool) -> None:
    """Make ``api.openapi()`` the document with problems for errors (a server under ``--no-auth``
    takes no key: its operations name no security scheme)."""

    def openapi() -> dict[str, Any]:
        if api.openapi_schema is not None:
            return api.openapi_schema
        doc = get_openapi(title=api.title, version=api.version, description=api.description, routes=api.routes)
        for path in doc.get("paths", {}).values():
            for operation in path.values():
                _problems_for_errors(operation)
                if no_auth:  # this server takes no key
                    operation.pop("security", None)
        for schema in doc.get("components", {}).get("schemas", {}).values():
            _without_examples(schema)
        api.openapi_schema = doc
        return doc

    api.openapi = openapi  # type: ignore[method-assign]


def _problems_for_errors(operation: dict[str, Any]) -> None:
    """An operation's 4xx/5xx answers are ``application/problem+json``, not ``application/json``."""
    for status, response in operation.get("responses", {}).items():
        content = response.get("content")
        if status[:1] in "45" and content and "application/json" in content:
            content[MEDIA_TYPE] = content.pop("application/json")


def _without_examples(schema: dict[str, Any]) -> None:
    """A model's description without its docstring's doctest example (Python, not the API's)."""
    text = schema.get("description")
    if isinstance(text, str) and "\nExample" in text:
        schema["description"] = text.split("\nExample", 1)[0].strip()
