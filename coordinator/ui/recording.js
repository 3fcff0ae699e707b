// A live session's recording in its task view (PROTOCOL.md, "Live sessions"): every command,
// oldest first, with who sent it and when, its answer (done or failed, the error, the device's
// time and the round trip) and the screen after it. Read a page at a time from GET
// /api/v1/tasks/{id}/commands (More reads the next); while the session runs, the view passes on
// the feed's `command` and `command_answered` events and each one's command is read and put in
// its place (once every page was read: before that, More brings it).
//
// The screens are the task's artifacts and need the token: each is fetched as a Blob (a few at a
// time) and shown through an object URL, revoked when the view closes. A screen the task's
// artifact cap dropped says so.

import * as commands from "./commands.js";
import { el } from "./dom.js";
import { formatTime } from "./time.js";
import { EventType } from "./wire.js";

const PAGE = 50;
const FETCHES_AT_ONCE = 4;

export class Recording {
  /** @param onError (error) => void: a read failed */
  constructor(api, taskId, { onError = () => {} } = {}) {
    Object.assign(this, { api, taskId, onError });
    this.rows = new Map(); // command id -> its <li>
    this.cursor = null; // the next page's, or null once every page was read
    this.read = false; // the first page was read
    this.urls = new Set();
    this.waiting = [];
    this.fetching = 0;
    this.closed = false;
    this.aborts = new AbortController();
    this.count = el("span", { class: "count" });
    this.list = el("ol", { id: "recording", class: "recording" });
    this.more = el("button", { type: "button", id: "recording-more", text: "More", hidden: "" });
    this.more.onclick = () => this.#page();
    // One element for the view's life, as the artifact strip's: the view puts it back each time.
    this.element = el("div", { id: "task-recording" }, el("h3", { text: "Recording " }, this.count), this.list, this.more);
  }

  async load() {
    await this.#page();
  }

  /** A `command` or `command_answered` event of the feed: its command read and put in place. */
  async event(event) {
    if (this.closed || !this.read || this.cursor !== null || !event.command_id) return;
    const row = this.rows.get(event.command_id); // the feed replays what the pages showed already
    if (row && (event.type === EventType.COMMAND || row.dataset.status !== commands.CommandStatus.PENDING)) return;
    const id = encodeURIComponent(this.taskId);
    try {
      const command = await this.api.get(`/api/v1/tasks/${id}/commands/${encodeURIComponent(event.command_id)}`, { wait_s: 0 });
      if (!this.closed) this.#put({ ...command, attempt: event.attempt });
    } catch (error) {
      if (!this.closed && error.name !== "AbortError") this.onError(error);
    }
  }

  close() {
    this.closed = true;
    this.aborts.abort();
    this.waiting = [];
    for (const url of this.urls) URL.revokeObjectURL(url);
    this.urls.clear();
  }

  async #page() {
    const id = encodeURIComponent(this.taskId);
    this.more.disabled = true;
    try {
      const page = await this.api.get(`/api/v1/tasks/${id}/commands`, { limit: PAGE, cursor: this.cursor ?? undefined });
      if (this.closed) return;
      for (const command of page.commands) this.#put(command);
      this.cursor = page.next_cursor ?? null;
      this.read = true;
    } catch (error) {
      if (!this.closed && error.status !== 404) this.onError(error); // 404: the view says the task is gone
    } finally {
      this.more.disabled = false;
      this.more.hidden = this.cursor === null;
      this.#counted();
    }
  }

  #counted() {
    this.count.textContent = `${this.rows.size}${this.cursor !== null ? "+" : ""}`;
    if (this.rows.size === 0 && this.read) {
      this.list.replaceChildren(el("li", { class: "empty muted", text: "No command was sent." }));
    }
  }

  /** One command's row, new or updated in place (an answer arriving for a pending command). */
  #put(command) {
    const old = this.rows.get(command.command_id);
    if (old && old.dataset.status === command.status) return;
    const observation = command.observation ?? null;
    const answered = command.status !== commands.CommandStatus.PENDING;
    const timing = [command.duration_ms != null ? `${command.duration_ms} ms on the device` : "",
      command.round_trip_ms != null ? `${command.round_trip_ms} ms round trip` : ""].filter(Boolean).join(", ");
    const shot = observation?.screen ? el("img", { alt: `the screen after ${commands.actionText(command.action)}` }) : null;
    const row = el("li", { dataset: { command: command.command_id, status: command.status } },
      el("time", { text: formatTime(command.sent_at) }),
      el("span", { class: "who", text: command.actor ?? "" }),
      el("span", { class: "what", text: commands.actionText(command.action) }),
      el("span", { class: `answer ${command.status === commands.CommandStatus.FAILED ? "bad" : answered ? "ok" : "muted"}` },
        [command.status, command.error, timing].filter(Boolean).join(" · ")),
      ...(shot ? [el("span", { class: "shot" }, shot)] : []));
    if (old) old.replaceWith(row);
    else {
      this.list.querySelector("li.empty")?.remove();
      this.list.append(row);
    }
    this.rows.set(command.command_id, row);
    if (shot) {
      this.waiting.push({ row, img: shot, name: observation.screen, attempt: command.attempt });
      this.#pump();
    }
    this.#counted();
  }

  #pump() {
    while (this.fetching < FETCHES_AT_ONCE && this.waiting.length > 0) {
      const { row, img, name, attempt } = this.waiting.shift();
      this.fetching += 1;
      const id = encodeURIComponent(this.taskId);
      this.api.blob(`/api/v1/tasks/${id}/artifacts/${encodeURIComponent(name)}`, attempt ? { attempt } : {}, this.aborts.signal)
        .then((blob) => {
          if (this.closed) return;
          const url = URL.createObjectURL(blob);
          this.urls.add(url);
          img.src = url;
        })
        .catch((error) => {
          if (error.name === "AbortError") return;
          // Dropped by the task's artifact cap (the session's oldest screens go first), or unread.
          row.querySelector(".shot").replaceChildren(el("span", { class: "muted",
            text: error.status === 404 ? "screen no longer kept" : `screen not read: ${error.message}` }));
        })
        .finally(() => {
          this.fetching -= 1;
          this.#pump();
        });
    }
  }
}
