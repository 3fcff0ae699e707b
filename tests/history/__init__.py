"""Histories of client operations, and a checker of the protocol's promises over them.

Jepsen's approach (Knossos, Elle) applied to Tether: the fault tests record every operation a
client made (what it sent, when, what came back and when, or that nothing came back) and, once
the run is over, ``check`` decides from that record alone whether the coordinator kept its word.

- ``tests.history.records``: an operation (``Op``), a test's ``History`` of them, and the
  ``RecordingTransport`` of the test's own operator client;
- ``tests.history.proxy``: the ``RecordingProxy`` between agent processes and the coordinator;
- ``tests.history.checker``: ``check`` (the promises, (a) to (e)) and ``verify`` for a test.

Times are ``time.monotonic()`` of this test process, so every side shares one clock. An
operation's ``invoked_at`` is taken before the request reaches the coordinator and its
``responded_at`` after the coordinator's answer left it: whatever the coordinator did for the
request, it did in between. That is all the checker assumes about time.
"""
