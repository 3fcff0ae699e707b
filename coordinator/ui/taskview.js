// The task view, opened by a click on any task id (#task/<id>): the task, its durations, its
// attempts with device and host, and its timeline: every transition of its history (GET
// /api/v1/tasks/{id}/events) and every step the feed kept of it. The steps come from the feed
// itself: the view follows GET /api/v1/events?task_id=<id> from its oldest kept event (0-0), so
// the feed replays the task's past progress (the deployment's last 10,000 events are kept), then
// keeps the view live. Transitions arriving on it re-read the task and its history; its
// `artifact` events go to the strip of artifacts under the timeline (artifacts.js). A live
// session's view also shows its recording (recording.js), which its command events keep current,
// and while it runs a link to its live view (sessionview.js).

import { ArtifactStrip } from "./artifacts.js";
import { Recording } from "./recording.js";
import { el } from "./dom.js";
import { Feed } from "./feed.js";
import * as story from "./story.js";
import { formatDuration, formatTime } from "./time.js";
import { runHref } from "./runs.js";
import * as views from "./views.js";
import { DEFAULT_TEAM, EventType, PRIORITY_DEFAULT, TaskKind, TaskStatus } from "./wire.js";

const COMMAND_EVENTS = new Set([EventType.COMMAND, EventType.COMMAND_ANSWERED]);

const REREAD_AFTER_MS = 150; // transitions of one step come together: one read for all of them
const TICK_MS = 1000; // the running durations move on while the view is open

export class TaskView {
  /**
   * @param api       the Api
   * @param root      the element the view fills
   * @param taskId    the task to show
   * @param hostName  (host id) => the host's name people use, or null
   * @param deviceName (device id) => the device's local name (its serial), or null
   * @param onError   (error) => void: a read failed
   */
  constructor(api, root, taskId, { hostName = () => null, deviceName = () => null, onError = () => {} } = {}) {
    Object.assign(this, { api, root, taskId, hostName, deviceName, onError });
    this.task = null;
    this.events = [];
    this.steps = [];
    this.timer = null;
    this.closed = false;
    this.strip = new ArtifactStrip(api, taskId, { onError });
    this.recording = null; // a session's, once the task is known to be one
    this.feed = new Feed({
      url: `/api/v1/events?task_id=${encodeURIComponent(taskId)}`,
      headers: () => api.headers(),
      onEvent: (event) => this.#onEvent(event),
    });
    this.feed.lastEventId = "0-0"; // from the oldest event kept: the task's past steps too
  }

  async open() {
    this.root.replaceChildren(el("p", { class: "muted", text: `Loading ${this.taskId}…` }));
    await this.#read();
    if (this.closed) return;
    if (this.task?.kind === "session") {
      this.recording = new Recording(this.api, this.taskId, { onError: this.onError });
      this.#render();
      this.recording.load();
    }
    this.feed.start();
    this.strip.load();
    this.ticker = setInterval(() => this.#tick(), TICK_MS);
  }

  close() {
    this.closed = true;
    this.feed.stop();
    this.strip.close();
    this.recording?.close();
    clearTimeout(this.timer);
    clearInterval(this.ticker);
  }

  #onEvent(event) {
    if (this.closed || event.task_id !== this.taskId) return;
    if (event.type === EventType.PROGRESS) {
      this.steps.push(event);
      this.#render();
      return;
    }
    if (event.type === EventType.ARTIFACT) {
      this.strip.add(event); // no transition: nothing to read again
      return;
    }
    if (COMMAND_EVENTS.has(event.type)) {
      this.recording?.event(event); // a session's command: its recording grows, nothing else moved
      return;
    }
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.#read().then(() => this.#render()), REREAD_AFTER_MS);
  }

  async #read() {
    try {
      const [task, history] = await this.api.taskWithEvents(this.taskId);
      this.task = task;
      this.events = history.events;
    } catch (error) {
      if (this.closed) return;
      if (error.status === 404) {
        this.root.replaceChildren(el("p", { class: "error", text: `No task ${this.taskId} (gone after its retention, or never made).` }));
        this.close();
        return;
      }
      this.onError(error);
    }
    this.#render();
  }

  /** Only the durations move with the clock: the rest is drawn again when something changed. */
  #tick() {
    const { task } = this;
    if (this.closed || task === null || views.isTerminal(task)) return;
    const times = story.durations(task, this.events);
    for (const dd of this.root.querySelectorAll("#task-durations dd")) dd.textContent = formatDuration(times[dd.dataset.key]);
  }

  #render() {
    const { task } = this;
    if (this.closed || task === null) return;
    const times = story.durations(task, this.events);
    const current = task.status === TaskStatus.RUNNING ? task.progress : null;
    this.strip.keepingScroll(() => this.root.replaceChildren(
      el("dl", { class: "facts" },
        ...fact("Status", task.cancel_requested ? `${task.status} (cancelling)` : task.status, views.toneOf(task.status)),
        ...fact("Work", views.work(task)),
        ...fact("Target", views.target(task)),
        ...fact("Team", task.team ?? DEFAULT_TEAM, "", "team"),
        ...fact("Priority", String(task.priority ?? PRIORITY_DEFAULT), "", "priority"),
        ...(task.kind === TaskKind.SESSION && !views.isTerminal(task)
          ? linkFact("Live", "the session's screen", views.sessionHref(task.task_id), "live") : []),
        ...(task.run_id ? linkFact("Run", task.run_id, runHref(task.run_id), "run") : []),
        ...(task.rerun_of ? linkFact("Rerun of", task.rerun_of, views.taskHref(task.rerun_of), "rerun-of") : []),
        ...(task.replaced_by ? linkFact("Replaced by", task.replaced_by, views.taskHref(task.replaced_by), "replaced-by") : []),
        ...fact("Attempt", `${task.attempt}/${task.max_attempts}`),
        ...fact("Created", `${formatTime(task.created_at)}${task.created_by ? ` by ${task.created_by}` : ""}`),
        ...(task.finished_at ? fact("Finished", formatTime(task.finished_at)) : []),
        ...(task.status === TaskStatus.QUEUED ? fact("Waiting", `${task.waiting_reason ?? ""} ${views.candidates(task.candidates)}`) : []),
        ...failureFacts(task),
      ),
      el("h3", { text: "Durations" }),
      el("dl", { class: "facts durations", id: "task-durations" },
        ...fact("Queued", formatDuration(times.queued), "", "queued"), // not wire: the key of story.durations' field
        ...fact("Running", formatDuration(times.running), "", "running"), // not wire: likewise
        ...fact(times.ended ? "Total" : "Total so far", formatDuration(times.total), "", "total"),
      ),
      el("h3", { text: "Attempts" }),
      this.#attempts(),
      el("h3", { text: "Timeline" }),
      this.#timeline(current),
      ...(this.recording ? [this.recording.element] : []), // the same element each time, as the strip
      this.strip.element, // the same element each time: its thumbnails stay
    ));
  }

  #attempts() {
    const rows = story.attempts(this.events);
    if (rows.length === 0) return el("p", { class: "muted", text: "Not run yet." });
    return el("table", { id: "task-attempts" },
      el("thead", {}, el("tr", {}, ...["Attempt", "Device", "Host", "Claimed", "Ended", "Outcome"].map((t) => el("th", { text: t })))),
      el("tbody", {}, ...rows.map((a) => el("tr", { dataset: { attempt: String(a.attempt) } },
        el("td", { text: String(a.attempt) }),
        el("td", { class: "id" }, a.device_id ? el("a", { href: views.deviceHref(a.device_id), text: views.named(this.deviceName(a.device_id), a.device_id) }) : ""),
        el("td", { class: "id", text: views.named(this.hostName(a.host_id), a.host_id) }),
        el("td", { text: formatTime(a.claimed_at) }),
        el("td", { text: formatTime(a.ended_at) }),
        el("td", { text: a.outcome ?? (a.claimed_at ? TaskStatus.RUNNING : ""), class: views.toneOf(a.outcome?.split(" ")[0] ?? "") }),
      ))));
  }

  /** The steps the feed kept, and those a failed result names (`metadata.last_steps`) that it
   *  no longer keeps (the feed holds the deployment's last 10,000 events): every step of the
   *  failure shows, just before the result. */
  #allSteps() {
    const { task } = this;
    const named = task.result?.metadata?.last_steps;
    if (!Array.isArray(named) || !task.finished_at) return this.steps;
    const attempt = task.attempt;
    const seen = new Set(this.steps.filter((s) => s.attempt === attempt).map((s) => s.step_index));
    const at = new Date(Date.parse(task.finished_at) - 1).toISOString();
    const more = named.filter((s) => s && Number.isInteger(s.step_index) && !seen.has(s.step_index))
      .map((s) => ({ step_index: s.step_index, status: s.status, summary: s.summary, at, attempt, withResult: true }));
    return [...this.steps, ...more];
  }

  #timeline(current) {
    // A session's commands are its recording's, under the timeline: here, its transitions only.
    const events = this.events.filter((e) => !COMMAND_EVENTS.has(e.type));
    const entries = story.timeline(events, this.#allSteps(), current, this.task.attempt);
    return el("ol", { id: "task-timeline", class: "timeline" }, ...entries.map((entry) => {
      if (entry.kind === "step") {
        const s = entry.step;
        return el("li", { class: "step", dataset: { step: String(s.step_index), status: s.status ?? "" } },
          el("time", { text: s.current ? "now" : s.withResult ? "with result" : formatTime(s.at) }),
          el("span", { class: `what ${views.toneOf(s.status)}`, text: `step ${s.step_index} ${s.status ?? ""}` }),
          el("span", { class: "detail", text: `${s.summary ?? ""}${s.attempt ? ` · attempt ${s.attempt}` : ""}` }));
      }
      if (entry.kind === "gap") {
        const steps = entry.from === entry.to ? `step ${entry.from}` : `steps ${entry.from}–${entry.to}`;
        return el("li", { class: "gap", dataset: { from: String(entry.from), to: String(entry.to) } },
          el("time", { text: "" }),
          el("span", { class: "what", text: steps }),
          el("span", { class: "detail", text: `ran between two reports · attempt ${entry.attempt}` }));
      }
      const e = entry.event;
      const where = [e.device_id && views.named(this.deviceName(e.device_id), e.device_id), e.host_id && views.named(this.hostName(e.host_id), e.host_id)].filter(Boolean).join(" on ");
      const detail = [e.attempt ? `attempt ${e.attempt}` : "", where, e.status ?? "", e.reason ? `(${e.reason})` : "",
        e.actor ? `by ${e.actor}` : ""].filter(Boolean).join(" · ");
      const title = views.actorTitle(e);
      return el("li", { class: "event", dataset: { type: e.type }, ...(title ? { title } : {}) },
        el("time", { text: formatTime(e.at) }),
        el("span", { class: "what", text: e.type }),
        el("span", { class: "detail", text: detail }));
    }));
  }
}

// A failed task's reason, and the error text its host reported with it, at the step that failed
// (the result's metadata: `error`, `failed_step`), so the view says more than `assertion_failed`.
function failureFacts(task) {
  const metadata = task.result?.metadata ?? {};
  const error = typeof metadata.error === "string" && metadata.error ? metadata.error : null;
  const at = Number.isInteger(metadata.failed_step) ? `step ${metadata.failed_step}: ` : "";
  return [
    ...(task.failure_reason ? fact("Failure", task.failure_reason, "bad") : []),
    ...(error ? fact("Error", `${at}${error}`, "bad") : []),
  ];
}

function linkFact(name, id, href, key) {
  return [el("dt", { text: name }), el("dd", { class: "id", dataset: { key } }, el("a", { href, text: id }))];
}

function fact(name, value, tone = "", key = null) {
  return [el("dt", { text: name }), el("dd", { text: value ?? "", class: tone, ...(key ? { dataset: { key } } : {}) })];
}
