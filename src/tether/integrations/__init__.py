"""Adapters that let agent frameworks keep their state in tether.

One module per framework, each behind an optional extra, each importing its
framework only when it is imported itself (``import tether`` loads none):

==============================  ==================================================
:mod:`tether.integrations.langgraph`  ``TetherSaver``, a LangGraph checkpointer
                                      (``pip install 'tether[langgraph]'``)
==============================  ==================================================
"""
