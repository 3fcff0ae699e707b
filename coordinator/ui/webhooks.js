// The webhooks panel, for admin tokens only (PROTOCOL.md, "Webhooks": every webhook route is the
// admin's): each registered endpoint, what it hears, and how its recent deliveries stand (from
// GET /api/v1/webhooks/{id}/deliveries, the last 100): delivered, pending (its next attempt
// due), failed, and the last failure's status or error. Deliveries publish no feed events, so
// the panel is read with the lists, at the start and at each resync. Never a secret: the listing
// has none.

import { KeyedTable } from "./table.js";
import { formatTime as clock } from "./time.js";
import { DeliveryState } from "./wire.js";

/** `12 delivered · 1 pending · 2 failed`: a webhook's recent deliveries by state. */
export function deliveriesText(deliveries) {
  const by = Object.fromEntries(Object.values(DeliveryState).map((state) => [state, 0]));
  for (const d of deliveries) by[d.state] = (by[d.state] ?? 0) + 1;
  const parts = Object.entries(by).filter(([, n]) => n).map(([state, n]) => `${n} ${state}`);
  return parts.length ? parts.join(" · ") : "none yet";
}

/** The newest delivery's trouble, if it had any: `503 at 10:02:11 +01:00, next at 10:02:15 …`. */
export function lastTrouble(deliveries) {
  const troubled = deliveries.find((d) => d.state !== DeliveryState.DELIVERED && (d.last_status !== null || d.last_error));
  if (!troubled) return "";
  const what = troubled.last_error ?? `HTTP ${troubled.last_status}`;
  const next = troubled.state === DeliveryState.PENDING && troubled.next_attempt_at ? `, next ${clock(troubled.next_attempt_at)}` : "";
  return `${what} at ${clock(troubled.last_attempt_at)}${next}${troubled.state === DeliveryState.FAILED ? " (gave up)" : ""}`;
}

const columns = [
  { title: "Webhook", value: (w) => w.id, id: true },
  { title: "URL", value: (w) => w.url, id: true },
  { title: "Events", value: (w) => w.events.join(" "), wide: true },
  { title: "Team", value: (w) => w.team ?? "any" },
  { title: "Recent deliveries", value: (w) => deliveriesText(w.deliveries),
    tone: (w) => (w.deliveries.some((d) => d.state === DeliveryState.FAILED) ? "bad" : w.deliveries.some((d) => d.state === DeliveryState.PENDING) ? "warn" : "") },
  { title: "Last trouble", value: (w) => lastTrouble(w.deliveries), wide: true },
];

export class WebhooksPanel {
  constructor(api, section, table, count) {
    Object.assign(this, { api, section, count });
    this.table = new KeyedTable(table, {
      key: (w) => w.id, columns, compare: (a, b) => (a.created_at < b.created_at ? -1 : 1),
      empty: "No webhooks registered (tether webhooks add URL --event task.ended).",
    });
  }

  /** Read every webhook and its recent deliveries, and show them. */
  async read() {
    const { webhooks } = await this.api.get("/api/v1/webhooks");
    const withDeliveries = await Promise.all(webhooks.map(async (webhook) => {
      const { deliveries } = await this.api.get(`/api/v1/webhooks/${encodeURIComponent(webhook.id)}/deliveries`);
      return { ...webhook, deliveries };
    }));
    this.section.hidden = false;
    this.table.replaceAll(withDeliveries);
    const failing = withDeliveries.filter((w) => w.deliveries.some((d) => d.state === DeliveryState.FAILED)).length;
    this.count.textContent = `${webhooks.length}${failing ? ` · ${failing} with failed deliveries` : ""}`;
  }
}
