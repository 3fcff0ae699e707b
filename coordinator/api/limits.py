"""What the operator API accepts: each body's fields and the bounds of its values and of its
listings' query parameters. The handlers enforce these and ``openapi.py`` documents them, both
from here, so the document cannot drift from the server."""

from __future__ import annotations

# POST /api/v1/tasks, and its nested objects.
TASK_FIELDS = frozenset({"kind", "goal", "workflow", "device_id", "selector", "max_attempts", "max_steps",
                         "idempotency_key", "queue_timeout_s"})
WORKFLOW_FIELDS = frozenset({"name", "params"})
SELECTOR_FIELDS = frozenset({"driver", "labels"})
MAX_ATTEMPTS = 100
DEFAULT_MAX_ATTEMPTS = 3
MAX_STEPS = 10_000
DEFAULT_GOAL_MAX_STEPS = 30
MAX_QUEUE_TIMEOUT_S = 365 * 24 * 3600

# POST /api/v1/enrollment-tokens
TOKEN_FIELDS = frozenset({"ttl_s", "max_uses", "labels"})
MAX_TOKEN_TTL_S = 30 * 24 * 3600
DEFAULT_TOKEN_TTL_S = 3600
MAX_TOKEN_USES = 100_000

# POST /api/v1/operator-tokens
OPERATOR_TOKEN_FIELDS = frozenset({"name", "scopes", "ttl_s"})

# POST /api/v1/devices/{device_id}/disable
DISABLE_FIELDS = frozenset({"reason"})
MAX_REASON_CHARS = 256

# Labels (selectors, enrollment tokens, heartbeats): a flat object of short strings.
LABELS_MAX_ITEMS = 64
LABEL_MAX_CHARS = 256
HOSTNAME_MAX_CHARS = 255

# A heartbeat's agent.capabilities: each kind a list of at most this many names (ids).
CAPABILITY_KINDS = ("workflows", "planners")
MAX_CAPABILITY_NAMES = 1000

# Listings: (default, maximum) of ``limit``.
TASKS_LIMIT = (50, 500)
DEVICES_LIMIT = (100, 1000)
HOSTS_LIMIT = (100, 1000)
TOKENS_LIMIT = (100, 1000)
CURSOR_MAX_CHARS = 300  # an opaque text cursor (devices)
TASK_CURSOR_MAX = 2**63 - 1  # tasks page by sequence number
OFFSET_CURSOR_MAX = 2**31 - 1  # tokens page by position
