// What each table shows: its columns, how a record reads in a cell, and in which order rows go.
// Pure functions of the records; the tables do the DOM work.

import { formatTime as clock } from "./time.js";
import { DeviceStatus, EventType, PRIORITY_DEFAULT, TaskKind, TaskStatus, TERMINAL_STATUSES } from "./wire.js";

const TERMINAL = new Set(TERMINAL_STATUSES);
export const isTerminal = (task) => TERMINAL.has(task.status);

export function hostState(host) {
  if (host.revoked) return "revoked";
  if (!host.online) return "offline";
  return host.draining ? "draining" : "online";
}

const TONES = {
  online: "ok", available: "ok", succeeded: "ok", running: "info",
  draining: "warn", busy: "info", assigned: "info", queued: "warn", cancelled: "muted",
  offline: "bad", revoked: "bad", unavailable: "bad", disabled: "bad", failed: "bad",
  "host offline": "bad",
};
const tone = (word) => TONES[word] || "";
export const toneOf = tone;

export function work(task) {
  if (task.kind === TaskKind.WORKFLOW && task.workflow) return `workflow ${task.workflow.name}`;
  return task.goal ?? task.kind ?? "";
}

export function target(task) {
  if (task.selector) {
    const labels = Object.entries(task.selector.labels || {}).map(([k, v]) => `${k}=${v}`);
    return [`driver ${task.selector.driver}`, ...labels].join(" ");
  }
  return task.device_id ?? "";
}

// The counts a waiting task's `candidates` holds (PROTOCOL.md, "Waiting work"): field names, and how each reads.
const CANDIDATE_WORDS = [
  ["matching", "matching"], ["busy", "busy"], ["unavailable", "unavailable"], // not wire: field names of `candidates`
  ["host_offline", "host offline"], ["host_draining", "host draining"], ["disabled", "disabled"], // not wire: likewise
  ["host_stalled", "host stalled"], ["no_workflow", "no workflow"],
];

export function candidates(counts) {
  if (!counts) return "";
  const parts = CANDIDATE_WORDS.filter(([name]) => counts[name]).map(([name, word]) => `${counts[name]} ${word}`);
  if (parts.length === 0) parts.push("0 matching");
  if (counts.truncated) parts.push("(the first matching devices only: COORDINATOR_CANDIDATES_SCANNED)");
  return parts.join(", ");
}

/** Where a task's view opens (app.js follows the address's hash). */
export const taskHref = (taskId) => (taskId ? `#task/${encodeURIComponent(taskId)}` : null);
/** A live session's own view: its screen and, for its driver, the controls (sessionview.js). */
export const sessionHref = (taskId) => (taskId ? `#sessions?task=${encodeURIComponent(taskId)}` : null);
export const deviceHref = (deviceId) => (deviceId ? `#device/${encodeURIComponent(deviceId)}` : null);

/** `name (id)` when the record has a name people use (a hostname, a device's local name). */
export const named = (name, id) => (name && name !== id ? `${name} (${id})` : id ?? "");

export const labelText = (labels) => Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(" ");

// -- hosts -----------------------------------------------------------------------------------

/** The hosts' columns, with buttons for what `may` (the token's grants, api.js) allows. */
export function hostColumns(may) {
  const actions = (h) => {
    if (h.revoked) return [];
    return [
      ...(may.drain ? [h.draining ? { label: "Undrain", action: "undrain" } : { label: "Drain", action: "drain" }] : []),
      ...(may.revoke ? [{ label: "Revoke", action: "revoke" }] : []),
    ];
  };
  return withActions([
    { title: "Host", value: (h) => named(h.hostname, h.host_id), id: true },
    { title: "State", value: hostState, tone: (h) => tone(hostState(h)) },
    { title: "Kind", value: (h) => h.kind },
    { title: "Devices", value: (h) => String(h.devices ?? "") },
    { title: "Labels", value: (h) => labelText(h.shown_labels ?? h.labels), wide: true },
    { title: "Last seen", value: (h) => clock(h.last_seen) },
    { title: "Agent", value: agentText, tone: (h) => (h.conflicting_agent ? "bad" : ""), wide: true },
  ], may.drain || may.revoke, actions);
}

/** The agent's version, and a second agent heartbeating as the same host when the coordinator
 *  saw two alternate (they replace each other's devices: one must stop). */
export function agentText(host) {
  const other = host.conflicting_agent;
  const version = host.agent_version ?? "";
  if (!other) return version;
  const where = other.hostname ? ` on ${other.hostname}` : "";
  return `${version} · second agent ${other.instance_id}${where}: stop one`.replace(/^ · /, "");
}

export const byHostId = (a, b) => compareText(a.host_id, b.host_id);

// -- devices (a row is {device, task, host}: the device, the task it runs and its host, if known)

/** What a device is to an operator: a draining host's devices take no new work, so they are
 *  "draining", never counted available, whatever their own status; a device with a task
 *  assigned or running is "busy" even before its agent's next heartbeat says so. */
const ACTIVE = new Set([TaskStatus.ASSIGNED, TaskStatus.RUNNING]);
/** What `deviceState` says, in the order the counts and filters show it: what can take work first. */
export const DEVICE_STATES = [DeviceStatus.AVAILABLE, DeviceStatus.BUSY, "draining", DeviceStatus.UNAVAILABLE, "disabled",
  "host offline"];

export function deviceState({ device, host, task }) {
  if (device.disabled) return "disabled";
  if (!device.host_online) return "host offline";
  if (host && host.draining) return "draining";
  if (device.status === DeviceStatus.AVAILABLE && task && ACTIVE.has(task.status)) return DeviceStatus.BUSY;
  return device.status;
}

const progressOf = ({ task }) => (task && task.status === TaskStatus.RUNNING ? task.progress : null);

const deviceFields = [
  { title: "Device", value: (r) => named(r.device.name, r.device.device_id), id: true, href: (r) => deviceHref(r.device.device_id) },
  { title: "Host", value: (r) => named(r.host?.hostname, r.device.host_id), id: true },
  { title: "Driver", value: (r) => r.device.driver },
  { title: "State", value: deviceState, tone: (r) => tone(deviceState(r)) },
  { title: "Disabled because", value: (r) => r.device.disabled_reason ?? "", wide: true },
  { title: "Task", value: (r) => (r.task ? r.task.task_id : ""), id: true, short: true, href: (r) => taskHref(r.task?.task_id) },
  { title: "Team", value: (r) => (r.task ? teamText(r.task) : "") },
  {
    title: "Task status",
    value: (r) => (r.task ? (r.task.cancel_requested ? `${r.task.status} (cancelling)` : r.task.status) : ""),
    tone: (r) => (r.task ? tone(r.task.status) : ""),
  },
  { title: "Step", value: (r) => (progressOf(r) ? String(progressOf(r).step_index ?? "") : "") },
  {
    title: "Step status",
    value: (r) => (progressOf(r) ? progressOf(r).status ?? "" : ""),
    tone: (r) => (progressOf(r) ? tone(progressOf(r).status) : ""),
  },
  { title: "Summary", value: (r) => (progressOf(r) ? progressOf(r).summary ?? "" : ""), wide: true },
];

export function deviceColumns(may) {
  const actions = (r) => [
    // A live session on a free device (PROTOCOL.md, "Live sessions"), for a token that may submit.
    ...(may.submit && !r.task && deviceState(r) === DeviceStatus.AVAILABLE ? [{ label: "Start session", action: "session" }] : []),
    ...(r.task && !r.task.cancel_requested && may.cancel(r.task) ? [{ label: "Cancel task", action: "cancel" }] : []),
    ...(may.disable ? [r.device.disabled ? { label: "Enable", action: "enable" } : { label: "Disable", action: "disable" }] : []),
  ];
  return withActions(deviceFields, may.disable || may.cancelSome || may.submit, actions);
}

/** A task's team and, when not the default 0, its priority: `alpha · p50`. */
export const teamText = (task) => [task.team ?? "", task.priority ? `p${task.priority}` : ""].filter(Boolean).join(" · ");

/** Whether a device's row passes the Fleet view's filters (nav.js): host (its id or name),
 *  driver, status (its state as shown), label (`key=value` of the device's or its host's labels,
 *  or a key alone), team (of the task it runs). */
export function deviceMatches(row, { host, driver, status, label, team }) {
  const { device } = row;
  if (host && device.host_id !== host && row.host?.hostname !== host) return false;
  if (driver && device.driver !== driver) return false;
  if (status && deviceState(row) !== status) return false;
  if (team && row.task?.team !== team) return false;
  if (label) {
    const [key, value] = label.split("=", 2);
    const labels = { ...(row.host?.labels || {}), ...(device.labels || {}) };
    if (!(key in labels) || (value !== undefined && labels[key] !== value)) return false;
  }
  return true;
}

export const byHostThenDevice = (a, b) =>
  compareText(a.device.host_id, b.device.host_id) || compareText(a.device.device_id, b.device.device_id);

export const deviceSearchText = (r) =>
  [r.device.device_id, r.device.name ?? "", r.device.host_id, r.host?.hostname ?? "", labelText(r.host?.labels),
    labelText(r.device.labels), r.device.driver, deviceState(r), r.task ? `${r.task.task_id} ${r.task.status}` : ""]
    .join(" ");

// -- the queue (queued and assigned tasks) ------------------------------------------------------

const queueFields = [
  { title: "Task", value: (t) => t.task_id, id: true, short: true, href: (t) => taskHref(t.task_id) },
  { title: "Work", value: work, wide: true },
  { title: "Target", value: target },
  { title: "Status", value: (t) => t.status, tone: (t) => tone(t.status) },
  { title: "Priority", value: (t) => String(t.priority ?? PRIORITY_DEFAULT) },
  { title: "Team", value: (t) => t.team ?? "" },
  {
    title: "Waiting reason",
    value: (t) => (t.status === TaskStatus.ASSIGNED ? `assigned to ${t.host_id}, waiting for its claim` : t.waiting_reason ?? ""),
    wide: true,
  },
  { title: "Candidates", value: (t) => candidates(t.candidates), wide: true },
  { title: "Attempt", value: (t) => `${t.attempt}/${t.max_attempts}` },
  { title: "Created", value: (t) => clock(t.created_at) },
  { title: "By", value: (t) => t.created_by ?? "" },
];

export function queueColumns(may) {
  return withActions(queueFields, may.cancelSome, (t) => (may.cancel(t) ? [{ label: "Cancel", action: "cancel" }] : []));
}

/** `columns`, and a last column of buttons only when the token may take some action there: a
 *  token that may only watch sees no control at all, not even an empty column. */
function withActions(columns, any, actions) {
  return any ? [...columns, { title: "", actions }] : columns;
}

export const newestFirst = (a, b) =>
  compareText(b.created_at ?? "", a.created_at ?? "") || compareText(b.task_id, a.task_id);

// -- recent results ----------------------------------------------------------------------------

/** @param hostName (host id) => the host's name people use, or null
 *  @param deviceName (device id) => the device's local name (its serial), or null */
export const resultColumns = (hostName, deviceName) => [
  { title: "Finished", value: (t) => clock(t.finished_at) },
  { title: "Task", value: (t) => t.task_id, id: true, short: true, href: (t) => taskHref(t.task_id) },
  { title: "Work", value: work, wide: true },
  { title: "Outcome", value: (t) => t.status, tone: (t) => tone(t.status) },
  { title: "Team", value: (t) => t.team ?? "" },
  { title: "Priority", value: (t) => String(t.priority ?? PRIORITY_DEFAULT) },
  { title: "Failure reason", value: (t) => t.failure_reason ?? (t.result && t.result.failure_reason) ?? "", wide: true },
  { title: "Device", value: (t) => (t.device_id ? named(deviceName(t.device_id), t.device_id) : ""), id: true,
    href: (t) => deviceHref(t.device_id) },
  { title: "Host", value: (t) => (t.host_id ? named(hostName(t.host_id), t.host_id) : ""), id: true },
  { title: "Attempt", value: (t) => `${t.attempt}/${t.max_attempts}` },
  { title: "By", value: (t) => t.created_by ?? "" },
];

export const finishedNewestFirst = (a, b) =>
  compareText(b.finished_at ?? "", a.finished_at ?? "") || compareText(b.task_id, a.task_id);

// -- the event log -----------------------------------------------------------------------------

const EVENT_IDS = ["task_id", "host_id", "device_id", "token_id"];

/** An event as one line; `names` ({host, device}: id => the name people use, or null) puts a
 *  host's or device's name before its id. */
export function eventLine(event, names = { host: () => null, device: () => null }) {
  const nameOf = { host_id: names.host, device_id: names.device };
  const ids = EVENT_IDS.filter((name) => event[name])
    .map((name) => (nameOf[name] ? named(nameOf[name](event[name]), event[name]) : event[name]));
  const extra = [];
  if (event.attempt) extra.push(`attempt ${event.attempt}`);
  if (event.status) extra.push(event.status);
  if (event.reason) extra.push(`(${event.reason})`);
  if (event.type === EventType.HOST_DRAINING) extra.push(event.draining ? "on" : "off");
  if (event.actor) extra.push(`by ${event.actor}`); // the operator token whose action caused it
  return [clock(event.at), event.type, ...ids, ...extra].filter(Boolean).join("  ");
}

/** The tooltip of an event an operator caused: its token's id, as two live tokens may share the
 *  name the line shows (a rotation makes two). */
export function actorTitle(event) {
  return event.actor_id ? `actor_id ${event.actor_id}` : null;
}

function compareText(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}
