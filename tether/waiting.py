"""Why a task just created cannot be placed, in words, with what the fleet has instead.

Two waiting reasons (PROTOCOL.md, "Waiting work") mean the task may wait until its queue deadline
(a day by default) for something that may never come: ``no_matching_device`` (no pooled device
matches its target: a misspelled driver, label or device id) and ``no_capable_host`` (devices
match, but no online host of theirs lists its workflow: a misspelled workflow). The others wait
for something that comes by itself (a busy device, a team's quota) and get no warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import wire

Json = dict[str, Any]

UNPLACEABLE = frozenset({wire.WaitingReason.NO_MATCHING_DEVICE.value, wire.WaitingReason.NO_CAPABLE_HOST.value})


def unplaceable_reason(task: Json) -> str | None:
    """The task's ``waiting_reason`` when it is one of ``UNPLACEABLE``, else None."""
    reason = task.get("waiting_reason")
    return reason if task.get("status") == wire.TaskStatus.QUEUED.value and reason in UNPLACEABLE else None


def describe(task: Json, *, workflows: Sequence[str] | None, drivers: Sequence[str] | None) -> str | None:
    """One sentence for an unplaceable ``task`` (None for any other), naming what the fleet has:
    ``workflows`` its online hosts run, ``drivers`` of its pooled devices (None: not known, the
    token may not read them)."""
    reason = unplaceable_reason(task)
    if reason is None:
        return None
    if reason == wire.WaitingReason.NO_CAPABLE_HOST.value:
        name = (task.get("workflow") or {}).get("name")
        head = f"no online host with a matching device runs workflow {name!r}"
        has = _listed("the fleet runs", workflows, "no workflow")
        return f"{head}: the task waits until one does ({has}; `tether workflows` lists them)"
    head = f"no pooled device matches {_target(task)}"
    has = _listed("the pool has drivers", drivers, "no device")
    return f"{head}: the task waits until one does ({has}; `tether devices` lists them)"


def _target(task: Json) -> str:
    selector = task.get("selector")
    if not selector:
        return f"device {task.get('device_id')!r}"
    labels = selector.get("labels") or {}
    with_labels = f" with labels {', '.join(f'{k}={v}' for k, v in sorted(labels.items()))}" if labels else ""
    return f"driver {selector.get('driver')!r}{with_labels}"


def _listed(what: str, names: Sequence[str] | None, none: str) -> str:
    if names is None:
        return "this token may not read what the fleet has"
    if not names:
        return f"the fleet has {none} now"
    return f"{what}: {', '.join(sorted(names))}"
