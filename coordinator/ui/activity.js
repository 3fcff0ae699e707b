// The last hour of the fleet's work, from the feed's own events (no other read): how many tasks
// finished in each minute, and how the number of waiting tasks (queued or assigned) moved. Each
// task event carries the task's status after it, so a task's entering and leaving the wait is
// seen as it happened; a task whose earlier events are older than the hour is judged by its
// event's type (an `assigned` or `claimed` task was waiting before it).

import { EventType, TaskStatus, TERMINAL_STATUSES } from "./wire.js";

const HOUR_MS = 3_600_000;
const MINUTE_MS = 60_000;
const WAITING = new Set([TaskStatus.QUEUED, TaskStatus.ASSIGNED]);
const TERMINAL = new Set(TERMINAL_STATUSES);
const NO_TRANSITION = new Set([EventType.PROGRESS, EventType.CANCEL_REQUESTED, EventType.ARTIFACT]); // the task's status stays
const WAITING_BEFORE = new Set([EventType.ASSIGNED, EventType.CLAIMED, EventType.UNASSIGNED, EventType.QUEUE_TIMEOUT,
  EventType.CANCELLED]);

export class Activity {
  constructor() {
    this.waiting = new Map(); // task id -> whether it waits now, as its events say
    this.changes = []; // {t, d}: the number waiting moved by d at t (ms)
    this.finished = []; // {t, task}: a task became terminal at t
  }

  /** One feed event, in feed order. */
  add(event) {
    if (!event.task_id || NO_TRANSITION.has(event.type)) return;
    const t = Date.parse(event.at);
    if (Number.isNaN(t)) return;
    const id = event.task_id;
    if (event.type === EventType.RESULT) {
      // The reported status: terminal, unless the `requeued` of the same step follows.
      if (TERMINAL.has(event.status)) this.finished.push({ t, task: id });
      this.#move(id, false, t);
      return;
    }
    if (event.type === EventType.REQUEUED) {
      const last = this.finished.at(-1);
      if (last && last.task === id && last.t === t) this.finished.pop(); // retried, not finished
    } else if (TERMINAL.has(event.status)) {
      this.finished.push({ t, task: id });
    }
    const before = this.waiting.has(id) ? this.waiting.get(id) : WAITING_BEFORE.has(event.type);
    this.waiting.set(id, before);
    this.#move(id, WAITING.has(event.status), t);
  }

  #move(id, waiting, t) {
    const before = this.waiting.get(id) ?? false;
    if (before !== waiting) this.changes.push({ t, d: waiting ? 1 : -1 });
    if (waiting) this.waiting.set(id, true);
    else this.waiting.delete(id); // most tasks end: forget them
  }

  /** Forget what is older than the hour before `now`. */
  prune(now = Date.now()) {
    const since = now - HOUR_MS;
    while (this.changes.length && this.changes[0].t < since) this.changes.shift();
    while (this.finished.length && this.finished[0].t < since) this.finished.shift();
  }

  /** Tasks finished per minute, the oldest minute first: 60 counts ending with this minute. */
  finishedPerMinute(now = Date.now()) {
    const counts = new Array(60).fill(0);
    const last = Math.floor(now / MINUTE_MS);
    for (const { t } of this.finished) {
      const i = 59 - (last - Math.floor(t / MINUTE_MS));
      if (i >= 0 && i < 60) counts[i] += 1;
    }
    return counts;
  }

  /** The number waiting over the hour, as steps [{t, n}] oldest first, ending at `now` with
   *  `current` (the queue as the dashboard shows it now): each earlier value is the current
   *  one less the changes since. */
  waitingOverHour(current, now = Date.now()) {
    const points = [{ t: now, n: current }];
    let n = current;
    for (let i = this.changes.length - 1; i >= 0; i--) {
      const { t, d } = this.changes[i];
      if (t < now - HOUR_MS) break;
      n -= d;
      points.push({ t, n: Math.max(0, n) });
    }
    points.push({ t: now - HOUR_MS, n: Math.max(0, n) });
    return points.reverse();
  }
}
