"""Cancellation that survives client libraries which swallow it.

redis-py (and fakeredis on top of it) have been seen to turn a task's cancellation mid-command into
their own error, or to return normally; a background loop that only waits for CancelledError would
then run on after shutdown. Loops check ``cancelling()`` too.
"""

from __future__ import annotations

import asyncio


def cancelling() -> bool:
    """True once someone asked the current task to stop."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
