// The dashboard and how it follows the coordinator: one full read of the lists, then the event
// feed. Progress events are applied as they come; any other event marks what it touches (a task,
// a host, a device) to be read again, in rounds (rereads.js). The lists are read again in full
// every RESYNC_EVERY_MS (device status and newly reported devices come with heartbeats, which
// publish no event) and after the feed was reconnected; a task's `result` frees its device on
// screen at once (the agent released it before reporting). While a list is being read, events
// wait and are applied after it, in order. What is shown lives in records.js; the task view and a
// device's history in detail.js; the charts in charts.js; the operator's buttons act here.
// The views and their filters follow the address (nav.js): the queue, the results and the runs
// are read a page at a time with those filters, by the API's cursors (pager.js says what is
// hidden); the fleet and the teams are read whole (every device counts in the totals) and paged
// on the page. The feed starts with the last few events of the deployment, so the log is never
// empty after a quiet spell.

import { Charts } from "./charts.js";
import { Detail } from "./detail.js";
import { byId, el } from "./dom.js";
import { Feed } from "./feed.js";
import { Nav } from "./nav.js";
import { Pager } from "./pager.js";
import { QUEUE_SHOWN, Records, RESULTS_SHOWN } from "./records.js";
import { Rereads } from "./rereads.js";
import { RUNS_SHOWN, RunsPanel } from "./runs.js";
import { SessionsView } from "./sessions.js";
import { TeamsPanel } from "./teams.js";
import { WebhooksPanel } from "./webhooks.js";
import * as views from "./views.js";
import { EventType, TaskKind, TaskStatus } from "./wire.js";

const RESYNC_EVERY_MS = 15_000;
const BATCH = 20; // more changed records of a kind than this in one round: read the list instead
const TEAMS_PAGE = 500; // teams by name, at most TEAMS_PAGES pages of them
const TEAMS_PAGES = 2;
const EVENTS_SHOWN = 100;
const EVENTS_AT_START = 20; // the log opens with the deployment's last few events
const ENDED = [TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED];

/** A server listing read a page at a time: the cursors of the pages seen, and where we are. */
class Paging {
  constructor() {
    this.reset();
  }

  reset() {
    this.cursors = [null];
    this.index = 0;
    this.next = null;
  }

  get cursor() {
    return this.cursors[this.index];
  }

  get first() {
    return this.index === 0;
  }

  older() {
    if (this.next === null) return false;
    this.cursors[this.index + 1] = this.next;
    this.index += 1;
    return true;
  }

  newer() {
    if (this.index === 0) return false;
    this.index -= 1;
    return true;
  }
}

/** The API's query parameters for a view's filters (nav.js). */
function taskQuery({ team, host, run }) {
  return { team, host_id: host, run_id: run };
}

export class Dashboard {
  /**
   * @param api            an Api holding the token
   * @param may            what the token may do (api.js `grants`): only those buttons are shown
   * @param ask            ({text, reason}) => Promise<{ok, reason}>: the confirmation dialog
   * @param onUnauthorized (error) => void: the token stopped working
   */
  constructor(api, { may, ask, onUnauthorized }) {
    Object.assign(this, { api, ask, onUnauthorized, may });
    this.held = null; // events arriving while a list is read, or null
    this.stopped = false;
    this.started = false;
    this.filters = { queue: {}, results: {}, runs: {} };
    this.paging = { queue: new Paging(), results: new Paging(), runs: new Paging() };
    this.queuePager = this.#serverPager("queue");
    this.resultsPager = this.#serverPager("results");
    this.runsPager = this.#serverPager("runs");
    this.lastTeams = [];

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
    this.nav = new Nav({ onChange: (route, changed) => this.#route(route, changed) });
    this.sessions = new SessionsView(api, byId("sessions"), {
      may,
      sessions: () => [...this.records.tasks.values()].filter((t) => t.kind === TaskKind.SESSION && (t.status === TaskStatus.RUNNING || t.status === TaskStatus.ASSIGNED)),
      onError: (error) => (error.unauthorized ? this.onUnauthorized(error) : this.#banner(`Could not read: ${error.message}`)),
    });
    this.detail = new Detail(api, {
      back: () => this.nav.href(),
      may,
      hostName: (hostId) => this.records.hosts.get(hostId)?.hostname ?? null,
      deviceName: (deviceId) => this.records.deviceRecords.get(deviceId)?.name ?? null,
      onError: (error) => (error.unauthorized ? this.onUnauthorized(error) : this.#banner(`Could not read: ${error.message}`)),
    });
    this.charts = new Charts(api, { waiting: () => this.records.queue.size });
    this.teams = new TeamsPanel(byId("teams"), byId("teams-count"), byId("teams-pager"));
    this.runs = new RunsPanel(byId("runs"), byId("runs-count"));
    this.webhooks = may.admin ? new WebhooksPanel(api, byId("webhooks-section"), byId("webhooks"), byId("webhooks-count")) : null;

    this.feed = new Feed({
      url: `/api/v1/events?tail=${EVENTS_AT_START}`, // on a reconnect, Last-Event-ID wins
      headers: () => api.headers(),
      onEvent: (event) => this.#onEvent(event),
      onOpen: (resumed) => resumed && this.rereads.mark("everything"),
      onState: (state, detail) => this.#feedState(state, detail),
    });
  }

  /** Connect the feed first (so nothing between the read and the feed is missed), read
   *  everything, show it, then apply what the feed brought meanwhile. A first read that fails
   *  (a coordinator restarting, a 503 under load) is said in the banner and retried as any
   *  failed refresh is: the page never stays on what the events alone brought it. */
  async start() {
    performance.mark("tether:load-start");
    byId("nav").hidden = false;
    this.nav.start(); // the view and filters of the address, before anything is read
    this.#scopes();
    this.held = [];
    this.feed.start();
    try {
      const [fleet, tasks, teams, runs] = await Promise.all([
        this.#readFleet(), this.#readTasks(), this.#readTeams(), this.#readRuns(), this.webhooks?.read()]);
      performance.mark("tether:render-start");
      this.records.showFleet(fleet);
      this.records.showTasks(tasks);
      this.#showTeams(teams);
      this.#showRuns(runs);
      performance.mark("tether:ready");
      performance.measure("tether:render", "tether:render-start", "tether:ready");
      performance.measure("tether:load", "tether:load-start", "tether:ready");
    } catch (error) {
      if (error.unauthorized) throw error;
      this.#banner(`Could not load the dashboard: ${error.message}. Retrying.`);
      this.rereads.mark("everything");
    } finally {
      this.#release();
    }
    this.resync = setInterval(() => this.rereads.mark("everything"), RESYNC_EVERY_MS);
    this.charts.start();
    this.detail.show(location.hash);
    this.started = true;
    if (this.nav.route.view === "sessions" && !this.nav.route.filters.task) this.sessions.show(); // the list, read now
  }

  stop() {
    this.stopped = true;
    this.nav.stop();
    byId("nav").hidden = true;
    this.feed.stop();
    clearInterval(this.resync);
    this.rereads.stop();
    this.records.stop();
    this.detail.stop();
    this.sessions.close();
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
    const every = (status) => this.api.all("/api/v1/tasks", "tasks", { status, limit: 500 }, 20);
    const queue = this.filters.queue;
    const queuePaging = this.paging.queue;
    const queueStatus = queue.status || TaskStatus.QUEUED;
    const [running, assigned, queued, ended] = await Promise.all([
      every(TaskStatus.RUNNING), every(TaskStatus.ASSIGNED),
      this.api.get("/api/v1/tasks", { status: queueStatus, ...taskQuery(queue), limit: QUEUE_SHOWN, cursor: queuePaging.cursor ?? undefined }),
      this.#readEnded(),
    ]);
    queuePaging.next = queued.next_cursor ?? null;
    return {
      active: [...running.items, ...assigned.items],
      queued: queueStatus === TaskStatus.ASSIGNED ? queued.tasks.filter((t) => t.status === TaskStatus.ASSIGNED) : queued.tasks,
      queueMore: queued.next_cursor !== null,
      ended,
    };
  }

  /** The Results view's page: of one outcome, paged by the cursor; of any, the newest of each. */
  async #readEnded() {
    const results = this.filters.results;
    const paging = this.paging.results;
    const query = { ...taskQuery(results), limit: RESULTS_SHOWN };
    if (results.status) {
      const page = await this.api.get("/api/v1/tasks", { ...query, status: results.status, cursor: paging.cursor ?? undefined });
      paging.next = page.next_cursor ?? null;
      return page.tasks;
    }
    const pages = await Promise.all(ENDED.map((status) => this.api.get("/api/v1/tasks", { ...query, status })));
    paging.next = null;
    this.resultsMore = pages.some((page) => page.next_cursor !== null);
    return pages.flatMap((page) => page.tasks).sort(views.finishedNewestFirst).slice(0, RESULTS_SHOWN);
  }

  async #readTeams() {
    // The listing comes in pages (a forgotten team leaves it): the panel shows the first few.
    return (await this.api.all("/api/v1/teams", "teams", { limit: TEAMS_PAGE }, TEAMS_PAGES)).items;
  }

  #readRuns() {
    const { team, status } = this.filters.runs;
    return this.api.get("/api/v1/runs", { team, status, limit: RUNS_SHOWN, cursor: this.paging.runs.cursor ?? undefined });
  }

  #showRuns(page) {
    this.paging.runs.next = page.next_cursor ?? null;
    this.runs.show(page.runs, page.next_cursor !== null);
    const paging = this.paging.runs;
    const first = paging.index * RUNS_SHOWN;
    this.runsPager.show({ first: page.runs.length ? first + 1 : 0, last: first + page.runs.length,
      matching: page.runs.length, total: null, more: paging.next !== null }, { hasNewer: !paging.first, hasOlder: paging.next !== null });
  }

  #showTeams(teams) {
    this.lastTeams = teams;
    this.teams.show(teams, this.records.usableDevices());
    this.#queueTotals();
  }

  /** The queue's size, from the teams' counts (exact when it is filtered by team or not at all),
   *  and the pagers of the Queue and Results views. */
  #queueTotals() {
    const queue = this.filters.queue;
    const byTeam = !queue.host && !queue.run && !queue.status;
    const counted = this.lastTeams.filter((t) => !queue.team || t.team === queue.team);
    const total = byTeam ? counted.reduce((sum, t) => sum + (t.queued ?? 0), 0) : null;
    this.records.queueTotal = total;
    const paging = this.paging.queue;
    const shown = this.records.queue.size;
    const first = paging.index * QUEUE_SHOWN;
    const matching = total === null ? shown : Math.max(total, first + shown);
    this.queuePager.show({ first: shown ? first + 1 : 0, last: first + shown, matching, total: total === null ? null : matching,
      more: paging.next !== null }, { hasNewer: !paging.first, hasOlder: paging.next !== null });
    const results = this.paging.results;
    const ended = this.records.results.size;
    const from = results.index * RESULTS_SHOWN;
    this.resultsPager.show({ first: ended ? from + 1 : 0, last: from + ended, matching: ended, total: null,
      more: results.next !== null || (!this.filters.results.status && this.resultsMore) },
    { hasNewer: !results.first, hasOlder: results.next !== null });
    byId("results-count").textContent = this.filters.results.status ? ""
      : (this.resultsMore ? "the newest of each outcome: choose one to page through older results" : "");
    this.records.totalsSoon();
  }

  /** A pager of a server listing: its buttons move the listing's cursor and read it again. */
  #serverPager(name) {
    const move = (step) => {
      if (!this.paging[name][step]()) return;
      this.#readListing(name);
    };
    return new Pager(byId(`${name}-pager`), { newer: () => move("newer"), older: () => move("older") });
  }

  /** Read a paged view again (its filters or page changed). */
  #readListing(name) {
    if (!this.started || this.stopped) return;
    const failed = (error) => (error.unauthorized ? this.onUnauthorized(error) : this.#banner(`Could not read: ${error.message}`));
    if (name === "runs") {
      this.#readRuns().then((page) => this.#showRuns(page)).catch(failed);
      return;
    }
    this.#scopes();
    this.#reading(async () => {
      this.records.showTasks(await this.#readTasks());
      this.#queueTotals();
    }).catch(failed);
  }

  /** Which tasks the feed may add to the Queue and Results tables: those their filters pass,
   *  on their first page. */
  #scopes() {
    const passes = ({ team, host, run, status }) => (task) =>
      (!team || task.team === team) && (!host || task.host_id === host) && (!run || task.run_id === run) &&
      (!status || task.status === status);
    this.records.queueScope = { accepts: passes(this.filters.queue), first: this.paging.queue.first };
    this.records.resultsScope = { accepts: passes(this.filters.results), first: this.paging.results.first };
  }

  /** The address named a view and its filters (nav.js). */
  #route({ view, filters }, changed) {
    if (view === "sessions") this.sessions.show(filters.task ?? null);
    else this.sessions.close(); // a live view follows the feed only while it shows
    if (view === "fleet") {
      this.records.setDeviceFilters(filters);
      return;
    }
    if (!changed || !(view in this.filters) || JSON.stringify(this.filters[view]) === JSON.stringify(filters)) return;
    this.filters[view] = filters;
    this.paging[view].reset();
    this.#scopes();
    this.#readListing(view);
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
    if (event.type === EventType.PROGRESS) {
      this.#progress(event);
      return;
    }
    // A stored screenshot or log changes nothing the tables show, and a run makes one a step:
    // the task view's strip shows them (artifacts.js); the live log would only be flooded. So
    // with a live session's commands and answers (one each per command, at an agent's pace):
    // its own view and its recording show them (sessionview.js, recording.js).
    if ([EventType.ARTIFACT, EventType.COMMAND, EventType.COMMAND_ANSWERED].includes(event.type)) return;
    this.#log(event);
    const { records, rereads } = this;
    switch (event.type) {
      case EventType.HOST_ONLINE:
      case EventType.HOST_OFFLINE:
        records.hostOnline(event.host_id, event.type === EventType.HOST_ONLINE);
        rereads.mark("hosts", event.host_id);
        if (event.type === EventType.HOST_ONLINE) rereads.mark("hostDevices", event.host_id); // its snapshot
        break;
      case EventType.HOST_DRAINING: {
        const host = records.hosts.get(event.host_id);
        if (host) records.putHost({ ...host, draining: Boolean(event.draining) });
        rereads.mark("hosts", event.host_id);
        break;
      }
      case EventType.HOST_REVOKED:
        rereads.mark("hosts", event.host_id);
        rereads.mark("hostDevices", event.host_id);
        break;
      case EventType.DEVICE_DISABLED:
      case EventType.DEVICE_ENABLED: {
        const device = records.deviceRecords.get(event.device_id);
        if (device) {
          const disabled = event.type === EventType.DEVICE_DISABLED;
          records.setDevice({ ...device, disabled, disabled_reason: disabled ? event.reason ?? null : null });
        }
        rereads.mark("devices", event.device_id);
        break;
      }
      case EventType.RESULT:
        records.resultReported(event.task_id, event.device_id, event.attempt);
        rereads.mark("tasks", event.task_id);
        // and the device: a read of it sent before the result was stored (a host's devices,
        // after its host_online) can answer after this event, busy, and nothing else rereads it.
        if (event.device_id) rereads.mark("devices", event.device_id);
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
      status: TaskStatus.RUNNING,
      attempt: event.attempt,
      device_id: event.device_id ?? known?.device_id,
      host_id: event.host_id ?? known?.host_id,
      progress,
    };
    if (!known || known.status !== TaskStatus.RUNNING || known.attempt !== event.attempt) this.rereads.mark("tasks", event.task_id);
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
        this.#showRuns(runPage);
      });
      return;
    }
    const work = [];
    if (tasks.size > BATCH) {
      work.push(this.#reading(async () => {
        records.showTasks(await this.#readTasks());
        this.#queueTotals();
      }));
    }
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
    if (runs.size > 0) work.push(this.#readRuns().then((page) => this.#showRuns(page)));
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
    if (action === "session") {
      // A live session on this device; its view opens at once and shows it waiting, then live.
      const task = await this.api.post("/api/v1/tasks", { kind: TaskKind.SESSION, device_id: deviceId });
      this.records.applyTask(task);
      location.hash = views.sessionHref(task.task_id);
    } else if (action === "cancel") {
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
