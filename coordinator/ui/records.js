// What the dashboard shows: its four tables, the tasks they show, each device's record and the
// task it runs, and the totals in the header and section titles. Changes come from the
// Dashboard (dashboard.js), which reads the coordinator and follows its feed.

import { byId } from "./dom.js";
import { tablePager } from "./pager.js";
import { KeyedTable } from "./table.js";
import * as views from "./views.js";
import { DeviceStatus, TaskStatus } from "./wire.js";

export const RESULTS_SHOWN = 50; // a page of results
export const QUEUE_SHOWN = 50; // a page of the queue
const HOSTS_PAGE = 20;
const DEVICES_PAGE = 30; // a free device's row holds two stacked buttons at 1,024 px (Start session, Disable)

// Results whose attempt is remembered against older reads: more than a round of reads can bring.
const RESULTS_REMEMBERED = 1_000;
const ACTIVE = new Set([TaskStatus.ASSIGNED, TaskStatus.RUNNING]);
const WAITING = new Set([TaskStatus.QUEUED, TaskStatus.ASSIGNED]);
const USABLE = new Set([DeviceStatus.AVAILABLE, DeviceStatus.BUSY]);

export class Records {
  /**
   * @param may            what the token may do (api.js `grants`): only those buttons are shown
   * @param onHostAction   (action, host id, button) => void
   * @param onDeviceAction (action, device id, button) => void
   * @param onCancel       (task id, button) => void: a queued task's cancel button
   */
  constructor({ may, onHostAction, onDeviceAction, onCancel }) {
    this.tasks = new Map(); // task id -> task, for every task a table shows
    this.deviceRecords = new Map(); // device id -> device
    this.deviceTask = new Map(); // device id -> id of its assigned or running task
    // task id -> the attempt whose result the feed brought: a read that still finds that attempt
    // assigned or running was sent before the result was stored, and is not applied.
    this.resultHeard = new Map();
    this.queueMore = false;
    this.totalsTimer = null;

    // What the Queue and Results views show (dashboard.js sets it from their filters and page):
    // a task the feed brings joins a table only if it passes the filters, on the first page.
    this.queueScope = { accepts: () => true, first: true };
    this.resultsScope = { accepts: () => true, first: true };
    this.queueTotal = null; // how many tasks wait in all (the teams' counts), when known
    this.deviceFilters = {};

    const hostsPager = tablePager(byId("hosts-pager"), () => this.hosts);
    this.hosts = new KeyedTable(byId("hosts"), {
      key: (h) => h.host_id, columns: views.hostColumns(may), compare: views.byHostId, empty: "No hosts yet.",
      onAction: onHostAction, pageSize: HOSTS_PAGE, onLayout: hostsPager,
    });
    const devicesPager = tablePager(byId("devices-pager"), () => this.devices);
    this.devices = new KeyedTable(byId("devices"), {
      key: (r) => r.device.device_id, columns: views.deviceColumns(may), compare: views.byHostThenDevice,
      empty: "No devices in the pool.",
      onAction: onDeviceAction, pageSize: DEVICES_PAGE, onLayout: devicesPager,
    });
    this.queue = new KeyedTable(byId("queue"), {
      key: (t) => t.task_id, columns: views.queueColumns(may), compare: views.newestFirst, empty: "Nothing waiting.",
      onAction: (action, key, button) => onCancel(key, button),
    });
    this.results = new KeyedTable(byId("results"), {
      key: (t) => t.task_id, columns: views.resultColumns((id) => this.hosts.get(id)?.hostname ?? null,
        (id) => this.deviceRecords.get(id)?.name ?? null), compare: views.finishedNewestFirst,
      empty: "No finished tasks.",
    });
    this.filterInput = byId("device-filter");
    this.filterInput.value = "";
    this.filterInput.oninput = () => this.#filter();
  }

  stop() {
    clearTimeout(this.totalsTimer);
  }

  // -- whole lists ---------------------------------------------------------------------------

  showFleet({ hosts, devices }) {
    this.deviceRecords = new Map(devices.map((d) => [d.device_id, d])); // first: a host shows its devices' labels
    this.replaceHosts(hosts);
    this.devices.replaceAll(devices.map((d) => this.#row(d)));
    this.totalsSoon();
  }

  showTasks({ active: read, queued, queueMore, ended }) {
    const active = read.filter((t) => !this.#older(t));
    this.tasks = new Map([...active, ...queued, ...ended].map((t) => [t.task_id, t]));
    const before = this.deviceTask;
    this.deviceTask = new Map(active.filter((t) => t.device_id).map((t) => [t.device_id, t.task_id]));
    const listed = new Set(queued.map((t) => t.task_id));
    const assigned = this.queueScope.first
      ? active.filter((t) => t.status === TaskStatus.ASSIGNED && !listed.has(t.task_id) && this.queueScope.accepts(t)) : [];
    for (const deviceId of new Set([...before.keys(), ...this.deviceTask.keys()])) {
      if (before.get(deviceId) !== this.deviceTask.get(deviceId) || this.deviceTask.has(deviceId)) {
        this.#putDevice(deviceId);
      }
    }
    this.queueMore = queueMore;
    this.queue.replaceAll([...queued, ...assigned]);
    this.results.replaceAll(ended);
    this.totalsSoon();
  }

  // -- one record ----------------------------------------------------------------------------

  applyTask(task) {
    if (this.#older(task)) return;
    if (!ACTIVE.has(task.status)) this.resultHeard.delete(task.task_id);
    const old = this.tasks.get(task.task_id);
    const active = ACTIVE.has(task.status);
    this.tasks.set(task.task_id, task);
    if (WAITING.has(task.status) && (this.queue.has(task.task_id) || (this.queueScope.first && this.queueScope.accepts(task)))) {
      this.queue.put(task);
      this.#trim(this.queue, QUEUE_SHOWN);
    } else this.queue.remove(task.task_id);
    if (views.isTerminal(task) && (this.results.has(task.task_id) || (this.resultsScope.first && this.resultsScope.accepts(task)))) {
      this.#addResult(task);
    } else this.results.remove(task.task_id);
    for (const deviceId of new Set([old?.device_id, task.device_id])) {
      if (!deviceId) continue;
      if (active && deviceId === task.device_id) this.deviceTask.set(deviceId, task.task_id);
      else if (this.deviceTask.get(deviceId) === task.task_id) this.deviceTask.delete(deviceId);
      this.#putDevice(deviceId);
    }
    if (!active && !this.queue.has(task.task_id) && !this.results.has(task.task_id)) this.tasks.delete(task.task_id);
    this.totalsSoon();
  }

  forgetTask(taskId) {
    const task = this.tasks.get(taskId);
    this.tasks.delete(taskId);
    this.queue.remove(taskId);
    this.results.remove(taskId);
    if (task && this.deviceTask.get(task.device_id) === taskId) {
      this.deviceTask.delete(task.device_id);
      this.#putDevice(task.device_id);
    }
  }

  /** A host's record: its row, and its devices' rows when what they show of it changed (a
   *  draining host's devices are shown draining, with its hostname). */
  putHost(host) {
    const before = this.hosts.get(host.host_id);
    this.hosts.put(this.#withDeviceLabels(host, this.#labelsOfDevices().get(host.host_id)));
    if (!before || before.draining !== host.draining || before.hostname !== host.hostname ||
        before.online !== host.online || JSON.stringify(before.labels) !== JSON.stringify(host.labels)) {
      this.#putHostDevices(host.host_id);
    }
    this.totalsSoon();
  }

  replaceHosts(hosts) {
    const labels = this.#labelsOfDevices();
    this.hosts.replaceAll(hosts.map((h) => this.#withDeviceLabels(h, labels.get(h.host_id))));
    for (const device of this.deviceRecords.values()) this.devices.put(this.#row(device));
    this.totalsSoon();
  }

  removeHost(hostId) {
    this.hosts.remove(hostId);
    this.#putHostDevices(hostId);
  }

  /** The task's result event: its device is free from now (the agent released it before
   *  reporting), as the coordinator frees it, unless another task holds it now. The device may
   *  show no task: a read of the task (sent as the result was stored, answered before the feed
   *  brought the result) found it ended, and that read freed no device. */
  resultReported(taskId, deviceId, attempt) {
    this.resultHeard.delete(taskId);
    this.resultHeard.set(taskId, attempt);
    if (this.resultHeard.size > RESULTS_REMEMBERED) this.resultHeard.delete(this.resultHeard.keys().next().value);
    if (!deviceId || (this.deviceTask.get(deviceId) ?? taskId) !== taskId) return;
    this.deviceTask.delete(deviceId);
    const device = this.deviceRecords.get(deviceId);
    if (device) {
      const free = device.status === DeviceStatus.BUSY ? { status: DeviceStatus.AVAILABLE } : {};
      this.setDevice({ ...device, ...free, reserved_by: null });
    }
  }

  hostOnline(hostId, online) {
    const host = this.hosts.get(hostId);
    if (host) this.putHost({ ...host, online });
    for (const device of this.deviceRecords.values()) {
      if (device.host_id === hostId && device.host_online !== online) this.setDevice({ ...device, host_online: online });
    }
  }

  setDevice(device) {
    this.deviceRecords.set(device.device_id, device);
    this.devices.put(this.#row(device));
    this.totalsSoon();
  }

  dropDevice(deviceId) {
    this.deviceRecords.delete(deviceId);
    this.devices.remove(deviceId);
  }

  #addResult(task) {
    this.results.put(task);
    this.#trim(this.results, RESULTS_SHOWN);
  }

  /** A page of `table` at most: the oldest rows past it leave (the next read pages anew). */
  #trim(table, size) {
    while (table.size > size) {
      const oldest = table.items().at(-1);
      table.remove(oldest.task_id);
      if (!this.queue.has(oldest.task_id) && !this.results.has(oldest.task_id) &&
          !ACTIVE.has(oldest.status)) this.tasks.delete(oldest.task_id);
    }
  }

  /** Host id -> the labels every one of its devices carries: an agent's HOST_AGENT_LABELS label
   *  each device it reports, and so read as the host's own (one pass over the devices). */
  #labelsOfDevices() {
    const common = new Map();
    for (const device of this.deviceRecords.values()) {
      const labels = device.labels || {};
      const seen = common.get(device.host_id);
      if (seen === undefined) common.set(device.host_id, { ...labels });
      else for (const key of Object.keys(seen)) if (labels[key] !== seen[key]) delete seen[key];
    }
    return common;
  }

  #withDeviceLabels(host, deviceLabels) {
    return { ...host, shown_labels: { ...(deviceLabels || {}), ...(host.labels || {}) } };
  }

  /** A read of the task older than its result event: the attempt the feed saw end, still active. */
  #older(task) {
    return ACTIVE.has(task.status) && (this.resultHeard.get(task.task_id) ?? 0) >= task.attempt;
  }

  #row(device) {
    const taskId = this.deviceTask.get(device.device_id);
    return { device, task: taskId ? this.tasks.get(taskId) ?? null : null, host: this.hosts.get(device.host_id) ?? null };
  }

  #putHostDevices(hostId) {
    for (const device of this.deviceRecords.values()) {
      if (device.host_id === hostId) this.devices.put(this.#row(device));
    }
  }

  #putDevice(deviceId) {
    const device = this.deviceRecords.get(deviceId);
    if (device) this.devices.put(this.#row(device));
  }

  /** How many devices can take work now (available or busy): what the teams share. */
  usableDevices() {
    let usable = 0;
    for (const device of this.deviceRecords.values()) {
      if (USABLE.has(views.deviceState(this.#row(device)))) usable += 1;
    }
    return usable;
  }

  // -- the device filter and the totals ---------------------------------------------------------

  /** The Fleet view's filters (nav.js): host, driver, status, label, team. */
  setDeviceFilters(filters) {
    this.deviceFilters = filters;
    this.#filter();
  }

  #filter() {
    const needle = this.filterInput.value.trim().toLowerCase();
    const filters = this.deviceFilters;
    const any = needle || Object.keys(filters).length > 0;
    this.devices.filter(any ? (row) => views.deviceMatches(row, filters) &&
      (!needle || views.deviceSearchText(row).toLowerCase().includes(needle)) : null);
  }

  /** The totals cost a pass over every device: computed at most ten times a second. */
  totalsSoon() {
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
      const state = views.deviceState(this.#row(device));
      states.set(state, (states.get(state) || 0) + 1);
    }
    const running = [...this.deviceTask.values()].filter((id) => this.tasks.get(id)?.status === TaskStatus.RUNNING).length;
    byId("hosts-count").textContent = `${online} online of ${hosts.length}`;
    const order = (state) => (views.DEVICE_STATES.includes(state) ? views.DEVICE_STATES.indexOf(state) : views.DEVICE_STATES.length);
    byId("devices-count").textContent = [
      `${this.deviceRecords.size}`,
      ...[...states].sort(([a], [b]) => order(a) - order(b) || (a < b ? -1 : 1)).map(([state, n]) => `${n} ${state}`),
    ].join(" · ");
    const waiting = this.queueTotal ?? this.queue.size;
    byId("queue-count").textContent = `${waiting.toLocaleString("en")}${this.queueTotal === null && this.queueMore ? "+" : ""} waiting`;
    byId("totals").textContent = `${this.deviceRecords.size} devices · ${running} running · ${waiting.toLocaleString("en")} waiting`;
  }
}
