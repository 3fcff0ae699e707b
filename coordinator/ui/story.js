// A task's story as pure functions of what the coordinator keeps: its history (GET
// /api/v1/tasks/{id}/events, transitions only, oldest first) and the progress events the feed
// kept of it. The task view (taskview.js) shows what these return.

import { EventType, TaskStatus } from "./wire.js";

const WAITING = new Set([TaskStatus.QUEUED, TaskStatus.ASSIGNED]);

/** Where time goes after an event: "queued" (queued or assigned), "running", or "end". A
 *  result's `status` is the reported one: time after it belongs to whatever comes next (a
 *  retried task's `requeued` follows it in the same step). */
function phaseAfter(event) {
  if (event.type === EventType.RESULT) return "end";
  if (WAITING.has(event.status)) return TaskStatus.QUEUED;
  if (event.status === TaskStatus.RUNNING) return TaskStatus.RUNNING;
  return "end";
}

const ms = (at) => (at ? Date.parse(at) : NaN);

/** `{queued, running, total}` in ms: time spent waiting (queued or assigned), running (claimed
 *  until the result, every attempt), and from creation to the end, or to `now` while it lives. */
export function durations(task, events, now = Date.now()) {
  const created = ms(task.created_at ?? events[0]?.at);
  let queued = 0;
  let running = 0;
  let end = null;
  events.forEach((event, i) => {
    const from = ms(event.at);
    const phase = phaseAfter(event);
    if (phase === "end") {
      if (i === events.length - 1) end = from;
      return;
    }
    const to = i + 1 < events.length ? ms(events[i + 1].at) : now;
    if (phase === TaskStatus.QUEUED) queued += Math.max(0, to - from);
    else running += Math.max(0, to - from);
  });
  if (end === null && task.finished_at) end = ms(task.finished_at);
  const total = (end ?? now) - created;
  return { queued, running, total: Number.isNaN(total) ? null : Math.max(0, total), ended: end !== null };
}

/** One row per attempt: where it ran, when it was claimed and ended, and how. */
export function attempts(events) {
  const byAttempt = new Map();
  for (const event of events) {
    if (!event.attempt) continue;
    const row = byAttempt.get(event.attempt) ?? {
      attempt: event.attempt, host_id: null, device_id: null, claimed_at: null, ended_at: null, outcome: null,
    };
    if (event.host_id) row.host_id = event.host_id;
    if (event.device_id) row.device_id = event.device_id;
    if (event.type === EventType.CLAIMED) row.claimed_at = event.at;
    if (event.type === EventType.RESULT) {
      row.ended_at = event.at;
      row.outcome = event.reason ? `${event.status} (${event.reason})` : event.status;
    } else if ([EventType.LEASE_EXPIRED, EventType.CANCELLED, EventType.QUEUE_TIMEOUT].includes(event.type) && !row.outcome) {
      row.ended_at = event.at;
      row.outcome = event.type;
    }
    byAttempt.set(event.attempt, row);
  }
  return [...byAttempt.values()];
}

/**
 * The timeline: transitions and steps in time order. `steps` are progress events (the feed's
 * `{at, attempt, step_index, status, summary}`); `current` is the task's stored progress, added
 * when no kept step shows it (the feed keeps the deployment's last 10,000 events only).
 */
export function timeline(events, steps, current = null, attempt = null) {
  const entries = [
    ...events.map((event) => ({ kind: "event", at: event.at, event })),
    ...steps.map((step) => ({ kind: "step", at: step.at, step })),
  ];
  const shown = steps.some((s) => current && s.attempt === attempt && s.step_index === current.step_index &&
    s.status === current.status);
  if (current && !shown) entries.push({ kind: "step", at: null, step: { ...current, attempt, current: true } });
  // Stable: a step and a transition of the same millisecond keep the order they came in.
  const sorted = entries
    .map((entry, i) => ({ entry, i }))
    .sort((a, b) => (ms(a.entry.at) || Infinity) - (ms(b.entry.at) || Infinity) || a.i - b.i)
    .map(({ entry }) => entry);
  return withGaps(sorted);
}

/** `entries` with a "gap" entry wherever an attempt's reported steps skip some: the agent reports
 *  a step change at most once a second, so quick steps run between two reports and no progress
 *  event names them. The gap says which ran there, so 0, 2, 5 never reads as a three-step run. */
function withGaps(entries) {
  const last = new Map(); // attempt -> the step index it reported last
  const out = [];
  for (const entry of entries) {
    if (entry.kind === "step") {
      const { attempt, step_index: index } = entry.step;
      const before = last.get(attempt);
      if (Number.isInteger(before) && Number.isInteger(index) && index > before + 1) {
        out.push({ kind: "gap", at: entry.at, attempt, from: before + 1, to: index - 1 });
      }
      if (Number.isInteger(index) && (!Number.isInteger(before) || index > before)) last.set(attempt, index);
    }
    out.push(entry);
  }
  return out;
}
