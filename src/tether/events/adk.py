"""The events of an ADK artifact (an internal stream, ``adk-artifact:{app}:{user}:{session}:{file}``),
kept with tether's other events so any reader of a store decodes them without ADK installed. The
service that writes them is ``tether.integrations.adk.TetherArtifactService``."""

from __future__ import annotations

from typing import Any

from tether.events.base import Event, define_event

__all__ = ["ArtifactSaved"]


@define_event
class ArtifactSaved(Event):
    """Version ``number`` of the artifact (0 first). ``part`` is the ADK ``Part`` as JSON (bytes in
    base64), or ``None`` when it holds the same content as version ``same_as``, which stores it: a
    version is a reference, never a second copy (a rewind restoring an old version saves one).
    ``digest`` identifies the content (a BLAKE2b hash of its canonical JSON)."""

    number: int
    part: dict[str, Any] | None
    digest: str
    same_as: int | None = None
    mime_type: str | None = None
    custom_metadata: dict[str, Any] | None = None

    def describe(self) -> str:
        held = f"same content as version {self.same_as}" if self.same_as is not None else self.mime_type or "content"
        return f"artifact version {self.number} saved ({held})"
