// The dashboard's state and how it follows the coordinator: one full read of the lists, then
// the event feed. Progress events are applied as they come; any other event marks what it
// touches (a task, a host, a device) to be read again, in rounds at most FLUSH_EVERY_MS apart,
// one round at a time. The lists are read again in full every RESYNC_EVERY_MS (device status and
// newly reported devices come with heartbeats, which publish no event) and after the feed was
// reconnected. While a list is being read, events wait and are applied after it, in order.

import { byId, el } from "./dom.js";
import { Feed } from "./feed.js";
import { KeyedTable } from "./table.js";
import * as views from "./views.js";

const FLUSH_EVERY_MS = 250;
const RESYNC_EVERY_MS = 15_000;
const RETRY_AFTER_FAILURE_MS = 2_000;
const BATCH = 20; // more changed records of a kind than this in one round: read the list instead
const QUEUE_SHOWN = 500; // the newest queued tasks (one page)
const RESULTS_SHOWN = 50;
const EVENTS_SHOWN = 100;

const ACTIVE = new Set(["assigned", "running"]);
const WAITING = new Set(["queued", "assigned"]);

export class Dashboard {
  /**
   * @param api            an Api holding the token
   * @param may            what the token may do (api.js `grants`): only those buttons are shown
   * @param ask            ({text, reason}) => Promise<{ok, reason}>: the confirmation dialog
   * @param onUnauthorized (error) => void: the token stopped working
   */
  constructor(api, { may, ask, onUnauthorized }) {
    this.api = api;
    this.may = may;
    this.ask = ask;
    this.onUnauthorized = onUnauthorized;
    this.tasks = new Map(); // task id -> task, for every task a table shows
    this.deviceRecords = new Map(); // device id -> device
    this.deviceTask = new Map(); // device id -> id of its assigned or running task
    this.pending = emptyMarks();
    this.held = null; // events arriving while a list is read, or null
    this.timer = null;
    this.flushing = false;
    this.lastFlush = -Infinity;
    this.stopped = false;
    this.queueMore = false;

    this.hosts = new KeyedTable(byId("hosts"), {
      key: (h) => h.host_id, columns: views.hostColumns(may), compare: views.byHostId, empty: "No hosts yet.",
      onAction: (action, key, button) => this.#act(button, () => this.#hostAction(action, key)),
    });
    this.devices = new KeyedTable(byId("devices"), {
      key: (r) => r.device.device_id, columns: views.deviceColumns(may), compare: views.byHostThenDevice,
      empty: "No devices in the pool.",
      onAction: (action, key, button) => this.#act(button, () => this.#deviceAction(action, key)),
    });
    this.queue = new KeyedTable(byId("queue"), {
      key: (t) => t.task_id, columns: views.queueColumns(may), compare: views.newestFirst, empty: "Nothing waiting.",
      onAction: (action, key, button) => this.#act(button, () => this.#cancel(key)),
    });
    this.results = new KeyedTable(byId("results"), {
      key: (t) => t.task_id, columns: views.resultColumns, compare: views.finishedNewestFirst,
      empty: "No finished tasks.",
    });
    this.filterInput = byId("device-filter");
    this.filterInput.value = "";
    this.filterInput.oninput = () => this.#filter();
    byId("events").replaceChildren();

    this.feed = new Feed({
      headers: () => api.headers(),
      onEvent: (event) => this.#onEvent(event),
      onOpen: (resumed) => resumed && this.#mark("everything"),
      onState: (state, detail) => this.#feedState(state, detail),
    });
  }

  /** Connect the feed first (so nothing between the read and the feed is missed), read
   *  everything, show it, then apply what the feed brought meanwhile. */
  async start() {
    performance.mark("tether:load-start");
    this.held = [];
    this.feed.start();
    try {
      const [fleet, tasks] = await Promise.all([this.#readFleet(), this.#readTasks()]);
      performance.mark("tether:render-start");
      this.#showFleet(fleet);
      this.#showTasks(tasks);
      performance.mark("tether:ready");
      performance.measure("tether:render", "tether:render-start", "tether:ready");
      performance.measure("tether:load", "tether:load-start", "tether:ready");
    } finally {
      this.#release();
    }
    this.resync = setInterval(() => this.#mark("everything"), RESYNC_EVERY_MS);
  }

  stop() {
    this.stopped = true;
    this.feed.stop();
    clearInterval(this.resync);
    clearTimeout(this.timer);
    clearTimeout(this.totalsTimer);
  }

  // -- reading -----------------------------------------------------------------------------

  async #readFleet() {
    const [hosts, devices] = await Promise.all([
      this.api.all("/api/v1/hosts", "hosts", { limit: 1000 }),
      this.api.all("/api/v1/devices", "devices", { limit: 1000 }, 50),
    ]);
    return { hosts: hosts.items, devices: devices.items };
  }

  async #readTasks() {
    const list = (status, limit) => this.api.get("/api/v1/tasks", { status, limit });
    const every = (status) => this.api.all("/api/v1/tasks", "tasks", { status, limit: 500 }, 20);
    const [running, assigned, queued, ...ended] = await Promise.all([
      every("running"), every("assigned"), list("queued", QUEUE_SHOWN),
      ...["succeeded", "failed", "cancelled"].map((status) => list(status, RESULTS_SHOWN)),
    ]);
    return {
      active: [...running.items, ...assigned.items],
      queued: queued.tasks,
      queueMore: queued.next_cursor !== null,
      ended: ended.flatMap((page) => page.tasks).sort(views.finishedNewestFirst).slice(0, RESULTS_SHOWN),
    };
  }

  #showFleet({ hosts, devices }) {
    this.hosts.replaceAll(hosts);
    this.deviceRecords = new Map(devices.map((d) => [d.device_id, d]));
    this.devices.replaceAll(devices.map((d) => this.#row(d)));
    this.#totalsSoon();
  }

  #showTasks({ active, queued, queueMore, ended }) {
    this.tasks = new Map([...active, ...queued, ...ended].map((t) => [t.task_id, t]));
    const before = this.deviceTask;
    this.deviceTask = new Map(active.filter((t) => t.device_id).map((t) => [t.device_id, t.task_id]));
    for (const deviceId of new Set([...before.keys(), ...this.deviceTask.keys()])) {
      if (before.get(deviceId) !== this.deviceTask.get(deviceId) || this.deviceTask.has(deviceId)) {
        this.#putDevice(deviceId);
      }
    }
    this.queueMore = queueMore;
    this.queue.replaceAll([...queued, ...active.filter((t) => t.status === "assigned")]);
    this.results.replaceAll(ended);
    this.#totalsSoon();
  }

  /** Read lists with events held back, so an event is never applied before older list data. */
  async #reading(read) {
    this.held = this.held || [];
    try {
      await read();
    } finally {
      this.#release();
    }
  }

  #release() {
    const held = this.held || [];
    this.held = null;
    for (const event of held) this.#apply(event);
  }

  // -- events ------------------------------------------------------------------------------

  #onEvent(event) {
    if (this.stopped) return;
    if (this.held) this.held.push(event);
    else this.#apply(event);
  }

  #apply(event) {
    if (event.type === "progress") {
      this.#progress(event);
      return;
    }
    this.#log(event);
    switch (event.type) {
      case "host_online":
      case "host_offline":
        this.#hostOnline(event.host_id, event.type === "host_online");
        this.#mark("hosts", event.host_id);
        if (event.type === "host_online") this.#mark("hostDevices", event.host_id); // its snapshot
        break;
      case "host_draining": {
        const host = this.hosts.get(event.host_id);
        if (host) this.hosts.put({ ...host, draining: Boolean(event.draining) });
        this.#mark("hosts", event.host_id);
        break;
      }
      case "host_revoked":
        this.#mark("hosts", event.host_id);
        this.#mark("hostDevices", event.host_id);
        break;
      case "device_disabled":
      case "device_enabled": {
        const device = this.deviceRecords.get(event.device_id);
        if (device) {
          const disabled = event.type === "device_disabled";
          this.#setDevice({ ...device, disabled, disabled_reason: disabled ? event.reason ?? null : null });
        }
        this.#mark("devices", event.device_id);
        break;
      }
      default:
        if (event.task_id) this.#mark("tasks", event.task_id);
    }
  }

  /** A renewal's progress: shown at once on the device running the task. */
  #progress(event) {
    const known = this.tasks.get(event.task_id);
    if (known && known.attempt > event.attempt) return; // an older attempt's late word
    if (known && views.isTerminal(known) && known.attempt === event.attempt) return; // replayed after its end
    const progress = { step_index: event.step_index, status: event.status, summary: event.summary };
    const task = {
      ...(known || { task_id: event.task_id, max_attempts: event.attempt }),
      status: "running",
      attempt: event.attempt,
      device_id: event.device_id ?? known?.device_id,
      host_id: event.host_id ?? known?.host_id,
      progress,
    };
    if (!known || known.status !== "running" || known.attempt !== event.attempt) this.#mark("tasks", event.task_id);
    this.#applyTask(task);
  }

  #hostOnline(hostId, online) {
    const host = this.hosts.get(hostId);
    if (host) this.hosts.put({ ...host, online });
    for (const device of this.deviceRecords.values()) {
      if (device.host_id === hostId && device.host_online !== online) this.#setDevice({ ...device, host_online: online });
    }
  }

  #log(event) {
    const list = byId("events");
    list.prepend(el("li", { text: views.eventLine(event), dataset: { type: event.type } }));
    while (list.childElementCount > EVENTS_SHOWN) list.lastElementChild.remove();
  }

  // -- applying records ----------------------------------------------------------------------

  #applyTask(task) {
    const old = this.tasks.get(task.task_id);
    const active = ACTIVE.has(task.status);
    this.tasks.set(task.task_id, task);
    if (WAITING.has(task.status)) this.queue.put(task);
    else this.queue.remove(task.task_id);
    if (views.isTerminal(task)) this.#addResult(task);
    else this.results.remove(task.task_id);
    for (const deviceId of new Set([old?.device_id, task.device_id])) {
      if (!deviceId) continue;
      if (active && deviceId === task.device_id) this.deviceTask.set(deviceId, task.task_id);
      else if (this.deviceTask.get(deviceId) === task.task_id) this.deviceTask.delete(deviceId);
      this.#putDevice(deviceId);
    }
    if (!active && !this.queue.has(task.task_id) && !this.results.has(task.task_id)) this.tasks.delete(task.task_id);
    this.#totalsSoon();
  }

  #forgetTask(taskId) {
    const task = this.tasks.get(taskId);
    this.tasks.delete(taskId);
    this.queue.remove(taskId);
    this.results.remove(taskId);
    if (task && this.deviceTask.get(task.device_id) === taskId) {
      this.deviceTask.delete(task.device_id);
      this.#putDevice(task.device_id);
    }
  }

  #addResult(task) {
    this.results.put(task);
    while (this.results.size > RESULTS_SHOWN) {
      const oldest = this.results.items().at(-1);
      this.results.remove(oldest.task_id);
      if (!this.queue.has(oldest.task_id)) this.tasks.delete(oldest.task_id);
    }
  }

  #row(device) {
    const taskId = this.deviceTask.get(device.device_id);
    return { device, task: taskId ? this.tasks.get(taskId) ?? null : null };
  }

  #putDevice(deviceId) {
    const device = this.deviceRecords.get(deviceId);
    if (device) this.devices.put(this.#row(device));
  }

  #setDevice(device) {
    this.deviceRecords.set(device.device_id, device);
    this.devices.put(this.#row(device));
    this.#totalsSoon();
  }

  // -- re-reading what events touched ----------------------------------------------------------

  #mark(kind, id) {
    if (kind === "everything") this.pending.everything = true;
    else this.pending[kind].add(id);
    this.#schedule(FLUSH_EVERY_MS);
  }

  #schedule(spacing) {
    if (this.timer !== null || this.flushing || this.stopped) return;
    const wait = Math.max(0, this.lastFlush + spacing - performance.now());
    this.timer = setTimeout(() => this.#flush(), wait);
  }

  async #flush() {
    this.timer = null;
    this.flushing = true;
    this.lastFlush = performance.now();
    const marks = this.pending;
    this.pending = emptyMarks();
    let spacing = FLUSH_EVERY_MS;
    try {
      await this.#reread(marks);
      this.#banner(null);
    } catch (error) {
      if (error.unauthorized) {
        this.onUnauthorized(error);
        return;
      }
      this.#banner(`Could not refresh: ${error.message}. Retrying.`);
      this.pending.everything = true;
      spacing = RETRY_AFTER_FAILURE_MS;
    } finally {
      this.flushing = false;
    }
    if (!isEmpty(this.pending)) this.#schedule(spacing);
  }

  async #reread({ everything, tasks, hosts, devices, hostDevices }) {
    if (this.stopped) return;
    if (everything) {
      await this.#reading(async () => {
        const [fleet, lists] = await Promise.all([this.#readFleet(), this.#readTasks()]);
        this.#showFleet(fleet);
        this.#showTasks(lists);
      });
      return;
    }
    const work = [];
    if (tasks.size > BATCH) work.push(this.#reading(async () => this.#showTasks(await this.#readTasks())));
    else for (const id of tasks) work.push(this.#rereadTask(id));
    if (hosts.size > BATCH) work.push(this.api.all("/api/v1/hosts", "hosts", { limit: 1000 }).then((p) => this.hosts.replaceAll(p.items)));
    else for (const id of hosts) work.push(this.#one(`/api/v1/hosts/${enc(id)}`, (h) => this.hosts.put(h), () => this.hosts.remove(id)));
    for (const id of devices) {
      work.push(this.#one(`/api/v1/devices/${enc(id)}`, (d) => this.#setDevice(d), () => this.#dropDevice(id)));
    }
    for (const id of hostDevices) work.push(this.#rereadHostDevices(id));
    await Promise.all(work);
    this.#totalsSoon();
  }

  #rereadTask(taskId) {
    return this.#one(`/api/v1/tasks/${enc(taskId)}`, (t) => this.#applyTask(t), () => this.#forgetTask(taskId));
  }

  async #rereadHostDevices(hostId) {
    const page = await this.api.all("/api/v1/devices", "devices", { host_id: hostId, limit: 1000 });
    const now = new Set(page.items.map((d) => d.device_id));
    for (const device of [...this.deviceRecords.values()]) {
      if (device.host_id === hostId && !now.has(device.device_id)) this.#dropDevice(device.device_id);
    }
    for (const device of page.items) this.#setDevice(device);
  }

  /** GET one record: `found(record)`, or `gone()` on 404. */
  async #one(path, found, gone) {
    try {
      found(await this.api.get(path));
    } catch (error) {
      if (error.status === 404) gone();
      else throw error;
    }
  }

  #dropDevice(deviceId) {
    this.deviceRecords.delete(deviceId);
    this.devices.remove(deviceId);
  }

  // -- operator actions ------------------------------------------------------------------------

  /** Run one action of a button. A refusal shows the coordinator's own message (a scope the
   *  token lacks: `insufficient_scope`), in a line of its own that the refreshes do not clear. */
  async #act(button, action) {
    button.disabled = true;
    try {
      await action();
      this.#actionError(null);
    } catch (error) {
      if (error.unauthorized) this.onUnauthorized(error);
      else this.#actionError(`That did not work: ${error.message}`, error.code);
    } finally {
      button.disabled = false;
    }
  }

  async #hostAction(action, hostId) {
    if (action === "revoke") {
      const text = `Revoke ${hostId}? Its credential stops working at once and its devices leave the pool.`;
      if (!(await this.ask({ text, reason: false })).ok) return;
    }
    this.hosts.put(await this.api.post(`/api/v1/hosts/${enc(hostId)}/${action}`));
  }

  async #deviceAction(action, deviceId) {
    if (action === "cancel") {
      const taskId = this.deviceTask.get(deviceId);
      if (taskId) await this.#cancel(taskId);
    } else if (action === "disable") {
      const answer = await this.ask({ text: `Disable ${deviceId}? It gets no new work until enabled.`, reason: true });
      if (!answer.ok) return;
      this.#setDevice(await this.api.post(`/api/v1/devices/${enc(deviceId)}/disable`, { reason: answer.reason }));
    } else if (action === "enable") {
      this.#setDevice(await this.api.post(`/api/v1/devices/${enc(deviceId)}/enable`));
    }
  }

  async #cancel(taskId) {
    const answer = await this.ask({ text: `Cancel task ${taskId}?`, reason: false });
    if (answer.ok) this.#applyTask(await this.api.post(`/api/v1/tasks/${enc(taskId)}/cancel`));
  }

  // -- what the header and section titles say -----------------------------------------------

  #feedState(state, detail) {
    const pill = byId("feed-state");
    pill.dataset.state = state;
    pill.textContent = {
      connecting: "connecting…",
      live: "live",
      reconnecting: `reconnecting in ${((detail ?? 0) / 1000).toFixed(1)} s`,
      stopped: "stopped",
    }[state];
    if (state === "stopped" && detail && detail.status === 401) this.onUnauthorized(detail);
  }

  #actionError(text, code = null) {
    const line = byId("action-error");
    line.hidden = text === null;
    line.textContent = text ?? "";
    line.dataset.code = code ?? "";
  }

  #banner(text) {
    const banner = byId("banner");
    banner.hidden = text === null;
    banner.textContent = text ?? "";
  }

  #filter() {
    const needle = this.filterInput.value.trim().toLowerCase();
    this.devices.filter(needle ? (row) => views.deviceSearchText(row).toLowerCase().includes(needle) : null);
  }

  /** The totals cost a pass over every device: computed at most ten times a second. */
  #totalsSoon() {
    if (this.totalsTimer) return;
    this.totalsTimer = setTimeout(() => {
      this.totalsTimer = null;
      this.#totals();
    }, 100);
  }

  #totals() {
    const hosts = this.hosts.items();
    const online = hosts.filter((h) => views.hostState(h) === "online" || views.hostState(h) === "draining").length;
    const states = new Map();
    for (const device of this.deviceRecords.values()) {
      const state = views.deviceState({ device });
      states.set(state, (states.get(state) || 0) + 1);
    }
    const running = [...this.deviceTask.values()].filter((id) => this.tasks.get(id)?.status === "running").length;
    byId("hosts-count").textContent = `${online} online of ${hosts.length}`;
    byId("devices-count").textContent = [
      `${this.deviceRecords.size}`, ...[...states].map(([state, n]) => `${n} ${state}`),
    ].join(" · ");
    byId("queue-count").textContent = `${this.queue.size}${this.queueMore ? "+" : ""} waiting`;
    byId("results-count").textContent = `newest ${this.results.size}`;
    byId("totals").textContent = `${this.deviceRecords.size} devices · ${running} running · ${this.queue.size} waiting`;
  }
}

function emptyMarks() {
  return { everything: false, tasks: new Set(), hosts: new Set(), devices: new Set(), hostDevices: new Set() };
}

function isEmpty(marks) {
  return !marks.everything && !marks.tasks.size && !marks.hosts.size && !marks.devices.size && !marks.hostDevices.size;
}

const enc = encodeURIComponent;
