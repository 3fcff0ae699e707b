// The runs panel (PROTOCOL.md, "Runs: many tasks as one"): the newest runs, each with its status
// and its tasks counted by status, a click opening the run's grid (runview.js). The counts are the
// run's own, kept by the scripts that change its tasks: the panel reads them, never recounts.

import { KeyedTable } from "./table.js";
import { formatTime as clock } from "./time.js";
import { toneOf } from "./views.js";
import { RunStatus, TaskStatus } from "./wire.js";

export const RUNS_SHOWN = 20;
// The order a run's counts read in: what is over, then what is still to come.
export const COUNT_ORDER = [TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.RUNNING,
  TaskStatus.ASSIGNED, TaskStatus.QUEUED];

export const runHref = (runId) => `#run/${encodeURIComponent(runId)}`;

/** `12 succeeded · 1 failed · 3 running`: the run's tasks by status, the empty ones left out. */
export function countsText(counts) {
  const parts = COUNT_ORDER.filter((status) => counts?.[status]).map((status) => `${counts[status]} ${status}`);
  return parts.length ? parts.join(" · ") : "no tasks";
}

const columns = [
  { title: "Run", value: (r) => r.run_id, id: true, short: true, href: (r) => runHref(r.run_id) },
  { title: "Name", value: (r) => r.name ?? "", wide: true },
  { title: "Status", value: (r) => r.status, tone: (r) => toneOf(r.status) },
  { title: "Tasks", value: (r) => countsText(r.counts), wide: true },
  { title: "Team", value: (r) => r.team ?? "" },
  { title: "Created", value: (r) => clock(r.created_at) },
  { title: "Ended", value: (r) => clock(r.ended_at) },
];

const newestFirst = (a, b) => (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0);

export class RunsPanel {
  constructor(table, count) {
    this.count = count;
    this.table = new KeyedTable(table, {
      key: (r) => r.run_id, columns, compare: newestFirst, empty: "No runs yet.",
    });
  }

  /** Show the newest runs (GET /api/v1/runs): `more` says older ones were left out. */
  show(runs, more) {
    this.table.replaceAll(runs);
    const running = runs.filter((r) => r.status === RunStatus.RUNNING).length;
    this.count.textContent = `${more ? "newest " : ""}${runs.length} · ${running} running`;
  }
}
