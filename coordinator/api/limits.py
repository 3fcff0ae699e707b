"""What the operator API's listings accept: the bounds of their query parameters. The handlers
enforce these and ``openapi.py`` documents them, both from here, so the document cannot drift
from the server. (The bodies' bounds live with their models, in ``bodies.py``.)"""

from __future__ import annotations

# Listings: (default, maximum) of ``limit``.
TASKS_LIMIT = (50, 500)
DEVICES_LIMIT = (100, 1000)
HOSTS_LIMIT = (100, 1000)
TOKENS_LIMIT = (100, 1000)
CURSOR_MAX_CHARS = 300  # an opaque text cursor (devices)
TASK_CURSOR_MAX = 2**63 - 1  # tasks page by sequence number
OFFSET_CURSOR_MAX = 2**31 - 1  # tokens page by position
