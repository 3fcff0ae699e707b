"""What the operator API's listings accept: the bounds of their query parameters. The handlers
enforce these and ``openapi.py`` documents them, both from here, so the document cannot drift
from the server. (The bodies' bounds live with their models, in ``bodies/``.)"""

from __future__ import annotations

# Listings: (default, maximum) of ``limit``.
TASKS_LIMIT = (50, 500)
COMMANDS_LIMIT = (100, 1000)  # a session's recording
COMMAND_CURSOR_MAX = 2**53  # a command's seq
DEVICES_LIMIT = (100, 1000)
HOSTS_LIMIT = (100, 1000)
TOKENS_LIMIT = (100, 1000)
RUNS_LIMIT = (50, 500)
TEAMS_LIMIT = (100, 1000)
# A run's body carries up to wire.MAX_RUN_TASKS task bodies: it may be this many times
# COORDINATOR_MAX_BODY_BYTES (4 MiB at the default 64 KiB).
RUN_BODY_FACTOR = 64
CURSOR_MAX_CHARS = 300  # an opaque text cursor (devices)
TASK_CURSOR_MAX = 2**63 - 1  # tasks page by sequence number
OFFSET_CURSOR_MAX = 2**31 - 1  # tokens page by position
