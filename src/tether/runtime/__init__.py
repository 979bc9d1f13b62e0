"""The runtime: what runs a task's code durably over the event log.

:class:`~tether.App` (``app``) is the public facade. It builds an :class:`~tether.runtime.engine.Engine`
— the log, the registered code (``specs``), the commit thread (``_commits``), the ledger, the worker id,
the lease's time, the inline-wait policy — and hands it to the parts that do the work: a run
(``run``: open, hold the lease, drive the code, let go), the worker (``worker``, ``claimed``), time
travel (``_time_travel``); sessions and users' documents it opens on the log itself. A run's code talks to its
:class:`~tether.TaskContext` (``context``), whose calls (``calls``), waits and sessions (``session``)
go through the run's recorder (``_recording``), which replays the record (``_replay``) and writes
what is new. The imports go one way: the app imports the parts, the parts the engine, the engine none
of them. Nothing here is imported from ``tether.runtime`` itself: the package is a folder of modules.
"""
