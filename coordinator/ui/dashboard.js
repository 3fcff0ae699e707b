// The dashboard and how it follows the coordinator: one full read of the lists, then the event
// feed. Progress events are applied as they come; any other event marks what it touches (a task,
// a host, a device) to be read again, in rounds (rereads.js). The lists are read again in full
// every RESYNC_EVERY_MS (device status and newly reported devices come with heartbeats, which
// publish no event) and after the feed was reconnected; a task's `result` frees its device on
// screen at once (the agent released it before reporting). While a list is being read, events
// wait and are applied after it, in order. What is shown lives in records.js; the task view and a
// device's history in detail.js; the charts in charts.js; the operator's buttons act here.

import { Charts } from "./charts.js";
import { Detail } from "./detail.js";
import { byId, el } from "./dom.js";
import { Feed } from "./feed.js";
import { Records, RESULTS_SHOWN } from "./records.js";
import { Rereads } from "./rereads.js";
import { RUNS_SHOWN, RunsPanel } from "./runs.js";
import { TeamsPanel } from "./teams.js";
import { WebhooksPanel } from "./webhooks.js";
import * as views from "./views.js";

const RESYNC_EVERY_MS = 15_000;
const BATCH = 20; // more changed records of a kind than this in one round: read the list instead
const QUEUE_SHOWN = 500; // the newest queued tasks (one page)
const TEAMS_PAGE = 500; // teams by name, at most TEAMS_PAGES pages of them
const TEAMS_PAGES = 2;
const EVENTS_SHOWN = 100;

export class Dashboard {
  /**
   * @param api            an Api holding the token
   * @param may            what the token may do (api.js `grants`): only those buttons are shown
   * @param ask            ({text, reason}) => Promise<{ok, reason}>: the confirmation dialog
   * @param onUnauthorized (error) => void: the token stopped working
   */
  constructor(api, { may, ask, onUnauthorized }) {
    Object.assign(this, { api, ask, onUnauthorized });
    this.held = null; // events arriving while a list is read, or null
    this.stopped = false;

    this.records = new Records({
      may,
      onHostAction: (action, key, button) => this.#act(button, () => this.#hostAction(action, key)),
      onDeviceAction: (action, key, button) => this.#act(button, () => this.#deviceAction(action, key)),
      onCancel: (key, button) => this.#act(button, () => this.#cancel(key)),
    });
    this.rereads = new Rereads({
      reread: (marks) => this.#reread(marks),
      succeeded: () => this.#banner(null),
      failed: (error) => {
        if (error.unauthorized) {
          this.onUnauthorized(error);
          return false;
        }
        this.#banner(`Could not refresh: ${error.message}. Retrying.`);
        return true;
      },
    });
    byId("events").replaceChildren(
      el("li", { class: "empty", text: "No events yet: changes to tasks, hosts and devices show here as they happen." }));
    this.detail = new Detail(api, {
      hostName: (hostId) => this.records.hosts.get(hostId)?.hostname ?? null,
      deviceName: (deviceId) => this.records.deviceRecords.get(deviceId)?.name ?? null,
      onError: (error) => (error.unauthorized ? this.onUnauthorized(error) : this.#banner(`Could not read: ${error.message}`)),
    });
    this.charts = new Charts(api, { waiting: () => this.records.queue.size });
    this.teams = new TeamsPanel(byId("teams"), byId("teams-count"));
    this.runs = new RunsPanel(byId("runs"), byId("runs-count"));
    this.webhooks = may.admin ? new WebhooksPanel(api, byId("webhooks-section"), byId("webhooks"), byId("webhooks-count")) : null;

    this.feed = new Feed({
      headers: () => api.headers(),
      onEvent: (event) => this.#onEvent(event),
      onOpen: (resumed) => resumed && this.rereads.mark("everything"),
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
      const [fleet, tasks, teams, runs] = await Promise.all([
        this.#readFleet(), this.#readTasks(), this.#readTeams(), this.#readRuns(), this.webhooks?.read()]);
      performance.mark("tether:render-start");
      this.records.showFleet(fleet);
      this.records.showTasks(tasks);
      this.#showTeams(teams);
      this.runs.show(runs.runs, runs.next_cursor !== null);
      performance.mark("tether:ready");
      performance.measure("tether:render", "tether:render-start", "tether:ready");
      performance.measure("tether:load", "tether:load-start", "tether:ready");
    } finally {
      this.#release();
    }
    this.resync = setInterval(() => this.rereads.mark("everything"), RESYNC_EVERY_MS);
    this.charts.start();
    this.detail.show(location.hash);
  }

  stop() {
    this.stopped = true;
    this.feed.stop();
    clearInterval(this.resync);
    this.rereads.stop();
    this.records.stop();
    this.detail.stop();
    this.charts.stop();
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

  async #readTeams() {
    // The listing comes in pages (a forgotten team leaves it): the panel shows the first few.
    return (await this.api.all("/api/v1/teams", "teams", { limit: TEAMS_PAGE }, TEAMS_PAGES)).items;
  }

  #readRuns() {
    return this.api.get("/api/v1/runs", { limit: RUNS_SHOWN });
  }

  #showTeams(teams) {
    this.teams.show(teams, this.records.usableDevices());
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
    // A stored screenshot or log changes nothing the tables show, and a run makes one a step:
    // the task view's strip shows them (artifacts.js); the live log would only be flooded.
    if (event.type === "artifact") return;
    this.#log(event);
    const { records, rereads } = this;
    switch (event.type) {
      case "host_online":
      case "host_offline":
        records.hostOnline(event.host_id, event.type === "host_online");
        rereads.mark("hosts", event.host_id);
        if (event.type === "host_online") rereads.mark("hostDevices", event.host_id); // its snapshot
        break;
      case "host_draining": {
        const host = records.hosts.get(event.host_id);
        if (host) records.putHost({ ...host, draining: Boolean(event.draining) });
        rereads.mark("hosts", event.host_id);
        break;
      }
      case "host_revoked":
        rereads.mark("hosts", event.host_id);
        rereads.mark("hostDevices", event.host_id);
        break;
      case "device_disabled":
      case "device_enabled": {
        const device = records.deviceRecords.get(event.device_id);
        if (device) {
          const disabled = event.type === "device_disabled";
          records.setDevice({ ...device, disabled, disabled_reason: disabled ? event.reason ?? null : null });
        }
        rereads.mark("devices", event.device_id);
        break;
      }
      case "result":
        records.resultReported(event.task_id, event.device_id);
        rereads.mark("tasks", event.task_id);
        break;
      default:
        if (event.task_id) rereads.mark("tasks", event.task_id);
    }
    if (event.run_id) rereads.mark("runs", event.run_id); // its counts, or the run itself, moved
  }

  /** A renewal's progress: shown at once on the device running the task. */
  #progress(event) {
    const known = this.records.tasks.get(event.task_id);
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
    if (!known || known.status !== "running" || known.attempt !== event.attempt) this.rereads.mark("tasks", event.task_id);
    this.records.applyTask(task);
  }

  #log(event) {
    const list = byId("events");
    const title = views.actorTitle(event);
    const line = el("li", { dataset: { type: event.type }, ...(title ? { title } : {}) });
    const text = views.eventLine(event, {
      host: (id) => this.records.hosts.get(id)?.hostname ?? null,
      device: (id) => this.records.deviceRecords.get(id)?.name ?? null,
    });
    const at = event.task_id ? text.indexOf(event.task_id) : -1;
    if (at < 0) line.textContent = text;
    else {
      line.append(text.slice(0, at), el("a", { href: views.taskHref(event.task_id), text: event.task_id }),
        text.slice(at + event.task_id.length));
    }
    list.querySelector("li.empty")?.remove();
    list.prepend(line);
    while (list.childElementCount > EVENTS_SHOWN) list.lastElementChild.remove();
  }

  // -- re-reading what events touched ----------------------------------------------------------

  async #reread({ everything, tasks, hosts, devices, hostDevices, runs }) {
    if (this.stopped) return;
    const { records } = this;
    if (everything) {
      await this.#reading(async () => {
        const [fleet, lists, teams, runPage] = await Promise.all([
          this.#readFleet(), this.#readTasks(), this.#readTeams(), this.#readRuns(), this.webhooks?.read()]);
        records.showFleet(fleet);
        records.showTasks(lists);
        this.#showTeams(teams);
        this.runs.show(runPage.runs, runPage.next_cursor !== null);
      });
      return;
    }
    const work = [];
    if (tasks.size > BATCH) work.push(this.#reading(async () => records.showTasks(await this.#readTasks())));
    else for (const id of tasks) work.push(this.#rereadTask(id));
    if (hosts.size > BATCH) work.push(this.api.all("/api/v1/hosts", "hosts", { limit: 1000 }).then((p) => records.replaceHosts(p.items)));
    else for (const id of hosts) work.push(this.#one(`/api/v1/hosts/${enc(id)}`, (h) => records.putHost(h), () => records.removeHost(id)));
    for (const id of devices) {
      work.push(this.#one(`/api/v1/devices/${enc(id)}`, (d) => records.setDevice(d), () => records.dropDevice(id)));
    }
    for (const id of hostDevices) work.push(this.#rereadHostDevices(id));
    // A task's change may move its team's running or queued count: one read of the teams per round.
    if (tasks.size > 0) work.push(this.#readTeams().then((teams) => this.#showTeams(teams)));
    // A run's task moved, or a run began or ended: one read of the runs per round.
    if (runs.size > 0) work.push(this.#readRuns().then((page) => this.runs.show(page.runs, page.next_cursor !== null)));
    await Promise.all(work);
    records.totalsSoon();
  }

  #rereadTask(taskId) {
    return this.#one(`/api/v1/tasks/${enc(taskId)}`, (t) => this.records.applyTask(t), () => this.records.forgetTask(taskId));
  }

  async #rereadHostDevices(hostId) {
    const page = await this.api.all("/api/v1/devices", "devices", { host_id: hostId, limit: 1000 });
    const now = new Set(page.items.map((d) => d.device_id));
    for (const device of [...this.records.deviceRecords.values()]) {
      if (device.host_id === hostId && !now.has(device.device_id)) this.records.dropDevice(device.device_id);
    }
    for (const device of page.items) this.records.setDevice(device);
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
    this.records.putHost(await this.api.post(`/api/v1/hosts/${enc(hostId)}/${action}`));
  }

  async #deviceAction(action, deviceId) {
    if (action === "cancel") {
      const taskId = this.records.deviceTask.get(deviceId);
      if (taskId) await this.#cancel(taskId);
    } else if (action === "disable") {
      const answer = await this.ask({ text: `Disable ${deviceId}? It gets no new work until enabled.`, reason: true });
      if (!answer.ok) return;
      this.records.setDevice(await this.api.post(`/api/v1/devices/${enc(deviceId)}/disable`, { reason: answer.reason }));
    } else if (action === "enable") {
      this.records.setDevice(await this.api.post(`/api/v1/devices/${enc(deviceId)}/enable`));
    }
  }

  async #cancel(taskId) {
    const answer = await this.ask({ text: `Cancel task ${taskId}?`, reason: false });
    if (answer.ok) this.records.applyTask(await this.api.post(`/api/v1/tasks/${enc(taskId)}/cancel`));
  }

  // -- the feed's state, the banner and the action line ------------------------------------------

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
}

const enc = encodeURIComponent;
