"""Adapters that let agent frameworks keep their state in tether.

One module per framework, each behind an optional extra, each importing its
framework only when it is imported itself (``import tether`` loads none):

- :mod:`tether.integrations.langgraph`: ``TetherSaver``, a LangGraph checkpointer (``tether[langgraph]``)
- :mod:`tether.integrations.openai_agents`: ``TetherSession`` and durable runs for the OpenAI Agents SDK
  (``tether[openai-agents]``)
- :mod:`tether.integrations.adk`: ``TetherSessionService`` for Google ADK (``tether[adk]``)
- :mod:`tether.integrations.pydantic_ai`: message history and durable runs for Pydantic AI (``tether[pydantic-ai]``)
"""
