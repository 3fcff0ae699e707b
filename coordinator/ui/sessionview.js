// One live session, live (#sessions?task=<id>; PROTOCOL.md, "Live sessions"): the device's last
// screen, its elements beside it, and the idle timeout counting down; for the token that may drive
// it (its creator, or an admin), the controls: a click on the screen taps there (scaled to the
// device's pixels), a drag swipes, a text box types, Back / Home / Enter, a click on an element
// taps its middle, End ends it. Any other token watches the same screen without them.
//
// The screen comes from the feed: the view follows GET /api/v1/events?task_id=<id>, and each
// `command_answered` event (whoever sent the command) brings the command's answer (GET
// …/commands/<id>, its elements and the device's size) and its screen (the artifact the event
// names) in parallel; the newest one drawn wins. A driver's own command draws from its answer
// only when the feed has not brought it first. On opening, the last answer the task's history
// names is drawn, so a watcher arriving late sees the screen at once. Transitions re-read the
// task; once it ends the view says how, and links to its story (the recording, taskview.js).

import * as commands from "./commands.js";
import { el } from "./dom.js";
import { Feed } from "./feed.js";
import * as views from "./views.js";
import { EventType, TaskStatus } from "./wire.js";

const WAIT_S = 30; // how long a command's request waits for its answer before it is pending
const REREAD_AFTER_MS = 150; // transitions of one step come together: one read for all of them
const TICK_MS = 1000;
const KEYS = [["Back", "back"], ["Home", "home"], ["Enter", "enter"]];
const COMMAND_EVENTS = new Set([EventType.COMMAND, EventType.COMMAND_ANSWERED]);

export class SessionView {
  /** @param may     what the token may do (api.js `grants`)
   *  @param onError (error) => void: a read failed */
  constructor(api, root, taskId, { may, onError = () => {} }) {
    Object.assign(this, { api, root, taskId, may, onError });
    this.task = null;
    this.driver = false; // may this token drive it: decided from the task's history
    this.seen = new Set(); // commands whose answer is drawn or being fetched
    this.asked = 0; // answers asked for, in the order they came
    this.drawn = 0; // the newest of those whose answer is shown
    this.screenOrder = 0; // the newest of those whose screen is up
    this.device = null; // {width, height}: the device's pixels, from the last answer
    this.idleDeadline = null; // ms since the epoch
    this.screenUrl = null;
    this.closed = false;
    this.early = []; // events the feed brought before the view was built: applied once it is
    this.aborts = new AbortController();
    this.feed = new Feed({
      url: `/api/v1/events?task_id=${encodeURIComponent(taskId)}`,
      headers: () => api.headers(),
      onEvent: (event) => this.#onEvent(event),
    });
  }

  async open() {
    this.root.replaceChildren(el("p", { class: "muted", text: `Loading session ${this.taskId}…` }));
    this.feed.start(); // first: an answer between the read and the feed is not missed
    const history = await this.#read();
    if (this.closed || this.task === null) return;
    if (this.task.kind !== "session") {
      this.root.replaceChildren(el("p", { class: "error" }, `${this.taskId} is not a live session: see `,
        el("a", { href: views.taskHref(this.taskId), text: "its story" }), "."));
      this.close();
      return;
    }
    const events = history?.events ?? [];
    const creator = events.find((e) => e.type === EventType.CREATED)?.actor_id;
    // The history keeps a task's last 200 events: past them, the creator's own commands say it.
    const mine = this.may.tokenId != null && events.some((e) => e.type === EventType.COMMAND && e.actor_id === this.may.tokenId);
    this.driver = this.may.drive(creator ?? null) || (creator === undefined && this.may.submit &&
      (mine || this.task.created_by === this.may.name));
    this.#build();
    this.#render();
    for (const e of events) if (COMMAND_EVENTS.has(e.type)) this.#active(e);
    const early = this.early;
    this.early = null;
    // The last answer the history names, unless the feed brought a newer one meanwhile.
    const last = events.filter((e) => e.type === EventType.COMMAND_ANSWERED).at(-1);
    if (last && !early.some((e) => e.type === EventType.COMMAND_ANSWERED)) this.#answer(last);
    for (const event of early) this.#onEvent(event);
    this.ticker = setInterval(() => this.#tick(), TICK_MS);
    this.#firstLook();
  }

  close() {
    this.closed = true;
    this.feed.stop();
    this.aborts.abort();
    clearTimeout(this.timer);
    clearInterval(this.ticker);
    if (this.screenUrl) URL.revokeObjectURL(this.screenUrl);
    this.screenUrl = null;
  }

  // -- reading ---------------------------------------------------------------------------------

  /** The task and its history (null when it could not be read). */
  async #read() {
    try {
      const [task, history] = await this.api.taskWithEvents(this.taskId);
      this.task = task;
      this.#deadlines();
      return history;
    } catch (error) {
      if (this.closed) return null;
      if (error.status === 404) {
        this.root.replaceChildren(el("p", { class: "error", text: `No task ${this.taskId} (gone after its retention, or never made).` }));
        this.close();
        return null;
      }
      this.onError(error);
      return null;
    }
  }

  #deadlines() {
    const at = this.task?.session?.idle_deadline;
    if (at) this.idleDeadline = Math.max(this.idleDeadline ?? 0, Date.parse(at));
  }

  #onEvent(event) {
    if (this.closed || event.task_id !== this.taskId) return;
    if (this.early !== null) {
      this.early.push(event);
      return;
    }
    if (COMMAND_EVENTS.has(event.type)) this.#active(event);
    if (event.type === EventType.COMMAND_ANSWERED) {
      this.#answer(event);
      return;
    }
    if ([EventType.COMMAND, EventType.ARTIFACT, EventType.PROGRESS].includes(event.type)) return;
    clearTimeout(this.timer); // a transition: read the task again
    this.timer = setTimeout(async () => {
      await this.#read();
      this.#render();
      this.#firstLook();
    }, REREAD_AFTER_MS);
  }

  /** A command sent or answered: the session was active then, so its idle timeout starts again. */
  #active(event) {
    const idle = this.task?.session?.idle_timeout_s;
    if (!idle || !event.at) return;
    this.idleDeadline = Math.max(this.idleDeadline ?? 0, Date.parse(event.at) + idle * 1000);
  }

  /** A driver's session that runs with nothing on screen yet: look at it once. */
  #firstLook() {
    if (!this.driver || this.closed || this.looked || this.task?.status !== TaskStatus.RUNNING || this.asked > 0) return;
    this.looked = true;
    this.#send({ action: "observe" });
  }

  // -- an answer and its screen ------------------------------------------------------------------

  /**
   * Draw the answer of `event` (a `command_answered` event: command_id, attempt, screen), unless
   * it is drawn or being fetched already. `known`: the command's answer when the caller has it.
   */
  async #answer(event, known = null) {
    const commandId = event.command_id;
    if (!commandId || this.seen.has(commandId)) return;
    this.seen.add(commandId);
    const order = ++this.asked;
    const heardAt = Date.now(); // when the answer's news reached the page (its event, or the answer)
    const id = encodeURIComponent(this.taskId);
    const screen = event.screen ?? known?.observation?.screen ?? null;
    // Both read at once, the screen first (it is what a watcher waits for): it goes up as soon as
    // it is here, the elements when they are.
    const screenRead = screen ? this.api.blob(`/api/v1/tasks/${id}/artifacts/${encodeURIComponent(screen)}`,
      { attempt: event.attempt ?? this.task?.attempt ?? 1 }, this.aborts.signal) : Promise.resolve(null);
    const answerRead = known ? Promise.resolve(known)
      : this.api.get(`/api/v1/tasks/${id}/commands/${encodeURIComponent(commandId)}`, { wait_s: 0 });
    answerRead.catch(() => {}); // awaited below; a failure is handled there, not reported twice
    try {
      const blob = await screenRead;
      if (this.closed || order < this.#newest()) return; // a newer answer is on screen
      if (blob) await this.#drawScreen(blob, commandId, order, heardAt);
      const answer = await answerRead;
      if (this.closed || order < this.#newest()) return;
      this.drawn = order;
      this.#showAnswer(answer);
    } catch (error) {
      if (this.closed || error.name === "AbortError") return;
      if (error.status === 404) return; // its screen was dropped (over the task's artifact cap)
      this.onError(error);
    }
  }

  #newest() {
    return Math.max(this.drawn, this.screenOrder);
  }

  async #drawScreen(blob, commandId, order, heardAt) {
    const url = URL.createObjectURL(blob);
    const img = new Image();
    img.src = url;
    try {
      await img.decode();
    } catch {
      URL.revokeObjectURL(url);
      return;
    }
    if (this.closed || order < this.#newest()) {
      URL.revokeObjectURL(url);
      return;
    }
    this.screenOrder = order;
    const shown = this.screen;
    shown.src = url; // decoded already: drawn at the next frame
    if (this.screenUrl) URL.revokeObjectURL(this.screenUrl);
    this.screenUrl = url;
    shown.dataset.command = commandId;
    // When the answer's news and its screen reached the page (tests/browser/screen_latency.py).
    shown.dataset.heardAt = String(heardAt);
    shown.dataset.drawnAt = String(Date.now());
    shown.hidden = false;
    this.noScreen.hidden = true;
  }

  /** A command's answer as the view shows it: its line, and the elements of its screen. */
  #showAnswer(answer) {
    const observation = answer.observation ?? null;
    if (observation && observation.width && observation.height) {
      this.device = { width: observation.width, height: observation.height };
      this.screen.dataset.width = String(observation.width);
      this.screen.dataset.height = String(observation.height);
    }
    this.#lastLine(answer);
    if (observation) this.#elements(observation.elements ?? []);
  }

  #lastLine(answer) {
    const parts = [commands.actionText(answer.action), answer.status];
    if (answer.actor) parts.push(`by ${answer.actor}`);
    if (answer.duration_ms != null) parts.push(`${answer.duration_ms} ms on the device`);
    if (answer.error) parts.push(answer.error);
    this.last.textContent = parts.filter(Boolean).join(" · ");
    this.last.className = answer.status === commands.CommandStatus.FAILED ? "bad" : "";
    this.last.dataset.command = answer.command_id ?? "";
    this.last.dataset.status = answer.status ?? "";
  }

  #elements(elements) {
    this.elementList.replaceChildren(...elements.map((element, index) => {
      const name = element.text || element.id || "(no text)";
      const title = `${element.id ?? ""} [${element.bounds.join(", ")}]${element.clickable ? " clickable" : ""}`.trim();
      const item = this.driver
        ? el("button", { type: "button", title, dataset: { index: String(index) } }, name)
        : el("span", { title }, name);
      if (this.driver) item.onclick = () => this.#send({ action: "tap", ...commands.middle(element.bounds) });
      return el("li", { class: element.clickable ? "clickable" : "" }, item);
    }));
  }

  // -- driving -----------------------------------------------------------------------------------

  async #send(action) {
    if (this.closed) return;
    this.#error(null);
    this.pending.textContent = `sending ${commands.actionText(action)}…`;
    const id = encodeURIComponent(this.taskId);
    try {
      const answer = await this.api.post(`/api/v1/tasks/${id}/commands?wait_s=${WAIT_S}`, { action });
      if (this.closed) return;
      this.pending.textContent = answer.status === commands.CommandStatus.PENDING ? `${commands.actionText(action)}: waiting for the device…` : "";
      if (answer.status !== commands.CommandStatus.PENDING) {
        // Drawn from the answer only when the feed did not bring it first (a feed reconnecting).
        this.#answer({ command_id: answer.command_id, attempt: this.task?.attempt, screen: answer.observation?.screen }, answer);
      }
    } catch (error) {
      if (this.closed) return;
      this.pending.textContent = "";
      if (error.unauthorized) this.onError(error);
      else this.#error(`${commands.actionText(action)} was refused: ${error.message}`, error.code);
    }
  }

  async #end() {
    this.endButton.disabled = true;
    try {
      this.task = await this.api.post(`/api/v1/tasks/${encodeURIComponent(this.taskId)}/end`);
      this.#render();
    } catch (error) {
      if (error.unauthorized) this.onError(error);
      else this.#error(`Could not end it: ${error.message}`, error.code);
    } finally {
      this.endButton.disabled = false;
    }
  }

  /** A press on the screen and its release: a tap where it was pressed, or a swipe between. */
  #pointer(img) {
    let from = null;
    const point = (event) => {
      const box = img.getBoundingClientRect();
      return { x: event.clientX - box.left, y: event.clientY - box.top, box };
    };
    img.addEventListener("dragstart", (event) => event.preventDefault());
    img.addEventListener("pointerdown", (event) => {
      if (event.button !== 0 || !this.device) return;
      event.preventDefault();
      from = point(event);
    });
    img.addEventListener("pointerup", (event) => {
      if (from === null || !this.device) return;
      const to = point(event);
      const start = from;
      from = null;
      const shown = { width: to.box.width, height: to.box.height };
      const a = commands.devicePoint(start.x, start.y, shown, this.device);
      if (!commands.isSwipe(start, to)) {
        this.#send({ action: "tap", x: a.x, y: a.y });
        return;
      }
      const b = commands.devicePoint(to.x, to.y, shown, this.device);
      this.#send({ action: "swipe", x1: a.x, y1: a.y, x2: b.x, y2: b.y });
    });
  }

  // -- drawing -----------------------------------------------------------------------------------

  /** The parts that live as long as the view: the screen, the elements, the controls. */
  #build() {
    this.status = el("p", { id: "session-status" });
    this.idle = el("span", { id: "session-idle" });
    this.screen = el("img", { id: "session-screen", alt: `The screen of ${this.taskId}`, hidden: "", draggable: "false" });
    this.noScreen = el("p", { class: "muted", id: "session-no-screen", text: "No screen yet." });
    this.elementList = el("ol", { id: "session-elements" });
    this.last = el("p", { id: "session-last" });
    this.pending = el("p", { id: "session-pending", class: "muted" });
    this.errorLine = el("p", { id: "session-error", class: "error", role: "alert", hidden: "" });
    const parts = [this.status, el("p", { class: "muted" }, this.idle), this.errorLine];
    let controls = null;
    if (this.driver) {
      this.screen.classList.add("drivable");
      this.#pointer(this.screen);
      const text = el("input", { id: "session-text", autocomplete: "off", spellcheck: "false", placeholder: "text to type",
        "aria-label": "Text to type" });
      const typeForm = el("form", { id: "session-type" }, text, el("button", { type: "submit", text: "Type" }));
      typeForm.onsubmit = (event) => {
        event.preventDefault();
        if (text.value === "") return;
        this.#send({ action: "type", text: text.value });
        text.value = "";
      };
      const keys = KEYS.map(([label, key]) => {
        const button = el("button", { type: "button", text: label, dataset: { key } });
        button.onclick = () => this.#send({ action: "key", key });
        return button;
      });
      this.endButton = el("button", { type: "button", id: "session-end", class: "danger", text: "End session" });
      this.endButton.onclick = () => this.#end();
      controls = el("div", { id: "session-controls" }, typeForm, el("div", { class: "keys" }, ...keys), this.endButton);
    }
    this.controls = controls;
    this.root.replaceChildren(el("div", { id: "session", dataset: { task: this.taskId, role: this.driver ? "driver" : "watcher" } },
      ...parts,
      el("div", { class: "session-body" },
        el("div", { class: "session-screen" }, this.screen, this.noScreen),
        el("div", { class: "session-side" },
          ...(controls ? [controls] : [el("p", { class: "muted", id: "session-watching",
            text: "Watching: only the token that started this session (or an admin) drives it." })]),
          this.last, this.pending,
          el("h3", { text: "Elements" }), this.elementList))));
  }

  /** What changes with the task: its status line, the controls while it runs. */
  #render() {
    const { task } = this;
    if (this.closed || task === null || !this.status) return;
    const root = this.root.querySelector("#session");
    root.dataset.status = task.status;
    const where = task.device_id ? ` on ${task.device_id}` : ` for ${views.target(task)}`;
    const story = el("a", { href: views.taskHref(this.taskId), text: "its story" });
    if (views.isTerminal(task)) {
      const reason = task.result?.metadata?.end_reason ?? task.failure_reason ?? "";
      this.status.replaceChildren(`Session ${this.taskId}${where} ended: ${task.status}${reason ? ` (${reason})` : ""}. The recording is in `, story, ".");
      this.status.className = views.toneOf(task.status);
      if (this.controls) this.controls.hidden = true;
      this.screen.classList.remove("drivable");
      for (const button of this.elementList.querySelectorAll("button")) button.disabled = true;
      this.idle.textContent = "";
      this.feed.stop();
      return;
    }
    const waiting = task.status === TaskStatus.QUEUED ? `: waiting (${task.waiting_reason ?? "for its device"})` : "";
    const ending = task.session?.end_requested ? " · ending" : "";
    this.status.replaceChildren(`Session ${this.taskId}${where} · ${task.status}${waiting}${ending}${task.created_by ? ` · started by ${task.created_by}` : ""} · `, story);
    this.status.className = "";
    if (this.controls) this.controls.hidden = task.status !== TaskStatus.RUNNING;
    this.#tick();
  }

  #tick() {
    if (this.closed || !this.task || this.task.status !== TaskStatus.RUNNING || this.idleDeadline === null) return;
    this.idle.textContent = `Ends if idle in ${commands.countdown(this.idleDeadline - Date.now())}`;
    this.idle.dataset.deadline = String(this.idleDeadline);
  }

  #error(text, code = null) {
    this.errorLine.hidden = text === null;
    this.errorLine.textContent = text ?? "";
    this.errorLine.dataset.code = code ?? "";
  }
}
