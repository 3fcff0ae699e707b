// A device's history (#device/<id>): the device as the pool has it, and who ran what on it,
// newest first (GET /api/v1/devices/{id}/history), each task id opening its task view.

import { el } from "./dom.js";
import { formatTime } from "./time.js";
import * as views from "./views.js";
import { TaskStatus } from "./wire.js";

export class DeviceHistory {
  constructor(api, root, deviceId, { hostName = () => null, onError = () => {} } = {}) {
    Object.assign(this, { api, root, deviceId, hostName, onError });
  }

  async open() {
    const id = encodeURIComponent(this.deviceId);
    this.root.replaceChildren(el("p", { class: "muted", text: `Loading ${this.deviceId}…` }));
    let device;
    let history;
    try {
      [device, history] = await Promise.all([
        this.api.get(`/api/v1/devices/${id}`), this.api.get(`/api/v1/devices/${id}/history`, { limit: 100 }),
      ]);
    } catch (error) {
      if (error.status === 404) {
        this.root.replaceChildren(el("p", { class: "error", text: `No device ${this.deviceId} in the pool.` }));
        return;
      }
      this.onError(error);
      return;
    }
    const runs = history.runs;
    this.root.replaceChildren(
      el("dl", { class: "facts" },
        el("dt", { text: "Device" }), el("dd", { text: views.named(device.name, device.device_id) }),
        el("dt", { text: "Host" }), el("dd", { text: views.named(this.hostName(device.host_id), device.host_id) }),
        el("dt", { text: "Driver" }), el("dd", { text: device.driver }),
        el("dt", { text: "Status" }), el("dd", { text: device.disabled ? `disabled (${device.disabled_reason ?? ""})` : device.status }),
        el("dt", { text: "Labels" }), el("dd", { text: views.labelText(device.labels) })),
      el("h3", { text: `Runs (${runs.length}${history.runs.length >= 100 ? "+" : ""})` }),
      runs.length === 0 ? el("p", { class: "muted", text: "Nothing ran here yet." }) :
        el("table", { id: "device-runs" },
          el("thead", {}, el("tr", {}, ...["Task", "Attempt", "Host", "Started", "Ended", "Outcome"].map((t) => el("th", { text: t })))),
          el("tbody", {}, ...runs.map((r) => el("tr", {},
            el("td", { class: "id" }, el("a", { href: views.taskHref(r.task_id), text: r.task_id })),
            el("td", { text: String(r.attempt) }),
            el("td", { class: "id", text: r.host_id ? views.named(this.hostName(r.host_id), r.host_id) : "" }),
            el("td", { text: formatTime(r.started_at) }),
            el("td", { text: formatTime(r.ended_at) }),
            el("td", { text: r.outcome ?? TaskStatus.RUNNING, class: views.toneOf(r.outcome ?? TaskStatus.RUNNING) })))),
        ),
    );
  }

  close() {}
}
