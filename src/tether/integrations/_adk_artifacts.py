"""ADK's artifact service on tether (``tether.integrations.adk.TetherArtifactService``): versioned
artifacts, each version stored once, on any backend."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, unquote

import orjson
from google.adk.artifacts import artifact_util
from google.adk.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService, ensure_part
from google.adk.errors.input_validation_error import InputValidationError
from google.genai import types

from tether.errors import ConflictError, TaskNotFoundError
from tether.events.adk import ArtifactSaved
from tether.integrations._targets import one_target, open_target
from tether.log.conflicts import retry_on_conflict
from tether.log.streams import Stream

if TYPE_CHECKING:
    from tether.events import Recorded
    from tether.runtime.app import App

__all__ = ["ARTIFACT_TYPE", "TetherArtifactService"]

ARTIFACT_TYPE = "tether.adk.artifact"
_PREFIX = "adk-artifact:"
_USER_NAMESPACE = "user:"
_REFERENCE_DEPTH = 5  # artifact:// references followed in a row before giving up, as ADK's own services
# What ADK's rewind saves as a version to remove an artifact that did not exist at the rewind point
# (an empty octet stream): every artifact service loads a version holding it as absent.
_REWIND_TOMBSTONE = types.Part(inline_data=types.Blob(mime_type="application/octet-stream", data=b""))


def _quoted(value: str) -> str:
    return quote(value, safe="")


class TetherArtifactService(BaseArtifactService):
    """ADK's artifact service on tether: ``Runner(..., artifact_service=TetherArtifactService(app))``.

    Each artifact (a file name in a session, or a ``user:`` name shared by the user's sessions) is a
    stream of its own, ``adk-artifact:{app}:{user}:{session}:{filename}`` (the session empty for a
    ``user:`` name), and each version one event on it: saved in one append (two savers at once get
    two versions, never one number twice), numbered from 0 as ADK numbers them. A version whose
    content equals an earlier one's (a rewind restoring an old version saves one) refers to it
    instead of holding a copy. The behaviour is ADK's in-memory service's, call for call: the same
    checks of names and ids (``InputValidationError``), ``artifact://`` references followed within
    the caller's scope, a rewind's tombstone loaded as absent, ``delete_artifact`` forgetting every
    version (the next save is version 0 again). ``canonical_uri`` is the version's ``artifact://``
    URI, which ``load_artifact`` of a reference resolves.

    Example:
        >>> import asyncio, tether
        >>> from google.genai import types
        >>> artifacts = TetherArtifactService(tether.App("memory://"))
        >>> async def demo():
        ...     for text in ["draft", "final"]:
        ...         await artifacts.save_artifact(
        ...             app_name="shop", user_id="ada", session_id="s1", filename="notes.txt",
        ...             artifact=types.Part(text=text))
        ...     first = await artifacts.load_artifact(
        ...         app_name="shop", user_id="ada", session_id="s1", filename="notes.txt", version=0)
        ...     versions = await artifacts.list_versions(
        ...         app_name="shop", user_id="ada", session_id="s1", filename="notes.txt")
        ...     return first.text, versions
        >>> asyncio.run(demo())
        ('draft', [0, 1])
    """

    def __init__(
        self,
        target: str | App | None = None,
        *,
        uri: str | None = None,
        tenant: str | None = None,
        agents_dir: str | None = None,
    ) -> None:
        """``target``: a store URL (also with ``tether+`` before its scheme, as ADK's registry names
        it) or a :class:`~tether.App`; ``uri`` the same by keyword (ADK's ``services.yaml``)."""
        del agents_dir  # ADK's CLI passes its folder to every service; the URL says where the store is
        self._target = open_target(
            one_target(target, uri, "TetherArtifactService"), "TetherArtifactService", tenant=tenant
        )
        self._log = self._target.app.log
        # stream -> (its creation time, versions read, {content digest: the version that holds it})
        self._digests: dict[str, tuple[float, int, dict[str, int]]] = {}

    def close(self) -> None:
        """Close the app this service opened from a URL (an app passed in stays open: it is yours)."""
        self._target.close()

    # ------------------------------------------------------------------ naming
    def _stream(self, app_name: str, user_id: str, filename: str, session_id: str | None) -> Stream:
        """The artifact's stream, its names checked as ADK's in-memory service checks them."""
        artifact_util.validate_path_segment(app_name, "app_name")
        artifact_util.validate_path_segment(user_id, "user_id")
        if filename.startswith(_USER_NAMESPACE):
            scope = ""
        else:
            if session_id is None:
                raise InputValidationError("Session ID must be provided for session-scoped artifacts.")
            artifact_util.validate_path_segment(session_id, "session_id")
            scope = _quoted(session_id)
        name = f"{_PREFIX}{_quoted(app_name)}:{_quoted(user_id)}:{scope}:{_quoted(filename)}"
        return Stream(self._log, name, ARTIFACT_TYPE)

    # ------------------------------------------------------------------ writing
    async def save_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        artifact: types.Part | dict[str, Any],
        session_id: str | None = None,
        custom_metadata: dict[str, Any] | None = None,
    ) -> int:
        """Store ``artifact`` as the file's next version and return its number (0 for the first)."""
        if not filename.startswith(_USER_NAMESPACE):
            if session_id is None:
                raise InputValidationError("Session ID must be provided for session-scoped artifacts.")
            _check_session_id(session_id)
        part = ensure_part(artifact)
        stream = self._stream(app_name, user_id, filename, session_id)
        mime_type = _mime_type(part, app_name, user_id, session_id)
        data = part.model_dump(mode="json", exclude_none=True)
        digest = hashlib.blake2b(orjson.dumps(data, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()
        metadata = orjson.loads(orjson.dumps(custom_metadata)) if custom_metadata else None

        def attempt() -> int:
            row = self._log.store.get_task(self._log.tenant, stream.id)
            if row is None:
                first = ArtifactSaved(number=0, part=data, digest=digest, mime_type=mime_type, custom_metadata=metadata)
                if not stream.create(first, user_id=user_id):
                    raise ConflictError(stream.id, expected=0, actual=None)  # another saver made it first
                return 0
            same = self._held(stream, row.created_at, row.version).get(digest)
            event = ArtifactSaved(
                number=row.version,
                part=data if same is None else None,
                digest=digest,
                same_as=same,
                mime_type=mime_type,
                custom_metadata=metadata,
            )
            stream.append([event], row.version)
            return row.version

        return retry_on_conflict(attempt, stream=stream.id)

    def _held(self, stream: Stream, created_at: float, versions: int) -> dict[str, int]:
        """Which version holds each content among the stream's first ``versions``: what was read
        before, brought up to date (a stream deleted and made again since is read from its start)."""
        known = self._digests.get(stream.id)
        if known is None or known[0] != created_at or known[1] > versions:
            known = (created_at, 0, {})
        digests = known[2]
        if known[1] < versions:
            for rec in stream.read(after=known[1], upto=versions):
                event = cast(ArtifactSaved, rec.event)
                digests.setdefault(event.digest, event.number if event.same_as is None else event.same_as)
        self._digests[stream.id] = (created_at, versions, digests)
        return digests

    async def delete_artifact(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> None:
        """Forget every version of the file (nothing if there is none); its next save is version 0."""
        stream = self._stream(app_name, user_id, filename, session_id)
        self._digests.pop(stream.id, None)
        try:
            self._log.store.delete_task(self._log.tenant, stream.id)
        except TaskNotFoundError:
            return

    # ------------------------------------------------------------------ reading
    def _record(self, stream: Stream, version: int | None) -> Recorded | None:
        """The record of ``version`` (the newest if ``None``); ``None`` if there is no such version."""
        row = self._log.store.get_task(self._log.tenant, stream.id)
        if row is None or (version is not None and not 0 <= version < row.version):
            return None
        seq = row.version if version is None else version + 1
        try:
            records = stream.read(after=seq - 1, upto=seq)
        except TaskNotFoundError:
            return None
        return records[0] if records else None

    def _content(self, stream: Stream, event: ArtifactSaved) -> dict[str, Any] | None:
        if event.part is not None:
            return event.part
        held = self._record(stream, event.same_as)
        return None if held is None else cast(ArtifactSaved, held.event).part

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> types.Part | None:
        """The file's ``version`` (the newest if ``None``); ``None`` if there is none (or it was
        removed by a rewind). An ``artifact://`` reference is followed, within the caller's scope."""
        return await self._load(app_name, user_id, filename, session_id, version, _REFERENCE_DEPTH)

    async def _load(
        self, app_name: str, user_id: str, filename: str, session_id: str | None, version: int | None, depth: int
    ) -> types.Part | None:
        stream = self._stream(app_name, user_id, filename, session_id)
        rec = self._record(stream, version)
        data = None if rec is None else self._content(stream, cast(ArtifactSaved, rec.event))
        if data is None:
            return None
        part = types.Part.model_validate(data)
        if artifact_util.is_artifact_ref(part):
            target = artifact_util.resolve_artifact_reference(
                file_uri=cast(types.FileData, part.file_data).file_uri or "",
                app_name=app_name,
                user_id=user_id,
                session_id=session_id,
                remaining_depth=depth,
            )
            return await self._load(
                target.app_name, target.user_id, target.filename, target.session_id, target.version, depth - 1
            )
        if part == types.Part() or part == _REWIND_TOMBSTONE:
            return None
        return part

    async def list_artifact_keys(self, *, app_name: str, user_id: str, session_id: str | None = None) -> list[str]:
        """The session's file names and the user's ``user:`` names (only those without a session), sorted."""
        artifact_util.validate_path_segment(app_name, "app_name")
        artifact_util.validate_path_segment(user_id, "user_id")
        if session_id is not None:
            artifact_util.validate_path_segment(session_id, "session_id")
        prefix = f"{_PREFIX}{_quoted(app_name)}:{_quoted(user_id)}:"
        scopes = {""} if not session_id else {"", _quoted(session_id)}
        names = []
        for position in self._log.store.stream_positions(self._log.tenant, ARTIFACT_TYPE, prefix):
            scope, _, name = position[0][len(prefix) :].partition(":")
            if scope in scopes:
                names.append(unquote(name))
        return sorted(names)

    async def list_versions(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> list[int]:
        """The file's version numbers, oldest first (``[]`` if there is none)."""
        stream = self._stream(app_name, user_id, filename, session_id)
        row = self._log.store.get_task(self._log.tenant, stream.id)
        return [] if row is None else list(range(row.version))

    async def list_artifact_versions(
        self, *, app_name: str, user_id: str, filename: str, session_id: str | None = None
    ) -> list[ArtifactVersion]:
        """Each version's metadata, oldest first (``[]`` if there is none)."""
        stream = self._stream(app_name, user_id, filename, session_id)
        try:
            records = stream.read()
        except TaskNotFoundError:
            return []
        return [_version_of(rec, app_name, user_id, filename, session_id) for rec in records]

    async def get_artifact_version(
        self,
        *,
        app_name: str,
        user_id: str,
        filename: str,
        session_id: str | None = None,
        version: int | None = None,
    ) -> ArtifactVersion | None:
        """One version's metadata (the newest if ``version`` is ``None``); ``None`` if there is none."""
        stream = self._stream(app_name, user_id, filename, session_id)
        rec = self._record(stream, version)
        return None if rec is None else _version_of(rec, app_name, user_id, filename, session_id)


def _check_session_id(session_id: str) -> None:
    """A session-scoped artifact's session id, checked as ADK's in-memory service checks it: a valid
    path segment whose first segment is not ``user`` (the user-scoped artifacts' namespace there)."""
    artifact_util.validate_path_segment(session_id, "session_id")
    if session_id.replace("\\", "/").split("/")[0] == "user":
        raise InputValidationError("session_id must not be or start with the reserved value 'user'.")


def _mime_type(part: types.Part, app_name: str, user_id: str, session_id: str | None) -> str | None:
    """The version's MIME type as ADK's in-memory service records it (``None`` for a reference,
    whose type is its target's); a reference outside the caller's scope, or a part with nothing an
    artifact holds, is refused."""
    if part.inline_data is not None:
        return part.inline_data.mime_type
    if part.text is not None:
        return "text/plain"
    if part.file_data is not None:
        if not artifact_util.is_artifact_ref(part):
            return part.file_data.mime_type
        parsed = artifact_util.parse_artifact_uri(part.file_data.file_uri or "")
        if not parsed:
            raise InputValidationError(f"Invalid artifact reference URI: {part.file_data.file_uri}")
        artifact_util.validate_artifact_reference_scope(
            app_name=app_name, user_id=user_id, session_id=session_id, parsed_uri=parsed
        )
        return None
    raise InputValidationError("Not supported artifact type.")


def _version_of(rec: Recorded, app_name: str, user_id: str, filename: str, session_id: str | None) -> ArtifactVersion:
    event = cast(ArtifactSaved, rec.event)
    scoped = None if filename.startswith(_USER_NAMESPACE) else session_id
    return ArtifactVersion(
        version=event.number,
        canonical_uri=artifact_util.get_artifact_uri(app_name, user_id, filename, event.number, scoped),
        custom_metadata=dict(event.custom_metadata or {}),
        create_time=rec.at,
        mime_type=event.mime_type,
    )
