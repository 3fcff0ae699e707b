// The teams panel (PROTOCOL.md, "Sharing the fleet"): each team's devices held against its share,
// its weight, what it has queued and its quota. The share is the weighted max-min fair share of
// the devices that can take work now, the point placement converges to under saturation: a team
// wanting less than its weight's part (its running and queued tasks, or its quota) keeps what it
// wants, and the rest is split among the others by weight. Placement shares each pool (a driver,
// a device) on its own; this one figure over the whole fleet is the person's first look.

import { tablePager } from "./pager.js";
import { KeyedTable } from "./table.js";

const PAGE = 50;

const want = (team) => Math.min(team.running + team.queued, team.max_devices ?? Infinity);

/** Map of team -> its weighted max-min fair share of `devices` (water-filling by weight). */
export function fairShares(teams, devices) {
  const shares = new Map(teams.map((t) => [t.team, 0]));
  let open = teams.filter((t) => want(t) > 0);
  let left = devices;
  while (open.length > 0 && left > 1e-9) {
    const perWeight = left / open.reduce((sum, t) => sum + t.weight, 0);
    const sated = open.filter((t) => want(t) - shares.get(t.team) <= perWeight * t.weight);
    if (sated.length === 0) {
      for (const t of open) shares.set(t.team, shares.get(t.team) + perWeight * t.weight);
      break;
    }
    for (const t of sated) {
      left -= want(t) - shares.get(t.team);
      shares.set(t.team, want(t));
    }
    open = open.filter((t) => !sated.includes(t));
  }
  return shares;
}

/** 5⅓ reads as "5.3"; whole numbers stay whole. */
const amount = (n) => (Number.isInteger(n) ? String(n) : n.toFixed(1));
const atQuota = (t) => t.max_devices !== null && t.running >= t.max_devices;

const columns = [
  { title: "Team", value: (t) => t.team, id: true },
  // "2 of 1.7": the devices the team's tasks hold now, of its fair share now (the page says so
  // above the table; the cell's tooltip too).
  { title: "Held", value: (t) => `${t.running} of ${amount(t.share)}`, tone: (t) => (t.running > t.share + 1 ? "warn" : ""),
    hint: (t) => `${t.running} devices held now, of a fair share now of ${amount(t.share)}` },
  { title: "Weight", value: (t) => String(t.weight) },
  { title: "Queued", value: (t) => String(t.queued), tone: (t) => (t.queued && atQuota(t) ? "warn" : "") },
  { title: "Quota", value: (t) => (t.max_devices === null ? "none" : `${t.max_devices}${atQuota(t) ? " (at quota)" : ""}`) },
  { title: "Device time, last hour", value: (t) => `${amount(Math.round(t.device_seconds_1h / 6) / 10)} min` },
];

export class TeamsPanel {
  constructor(table, count, pager) {
    this.count = count;
    this.table = new KeyedTable(table, {
      key: (t) => t.team, columns, compare: (a, b) => (a.team < b.team ? -1 : a.team > b.team ? 1 : 0),
      empty: "No teams yet.", pageSize: PAGE, onLayout: tablePager(pager, () => this.table),
    });
  }

  /** Show `teams` (GET /api/v1/teams) against the `devices` that can take work now. */
  show(teams, devices) {
    const shares = fairShares(teams, devices);
    this.table.replaceAll(teams.map((t) => ({ ...t, share: shares.get(t.team) })));
    const running = teams.reduce((sum, t) => sum + t.running, 0);
    this.count.textContent = `${teams.length} · ${running} of ${devices} devices held`;
  }
}
