"""``tether langgraph``: LangGraph threads as tether stores them (``threads``, ``show``, ``history``).

The ``tether`` command imports this module only when ``tether langgraph`` runs, so the core install
works without LangGraph; without it, ``tether langgraph`` says which extra to install.
"""

from __future__ import annotations

from tether.integrations._langgraph_cli import main as cli

__all__ = ["cli"]
