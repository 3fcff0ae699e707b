// The panel beside the tables that the address's hash opens: #task/<id> (the task view),
// #device/<id> (the device's history) or #run/<id> (the run's grid); an empty hash closes it. Links anywhere on the page are
// plain <a href="#task/…">, so the back button and a shared address work too.

import { byId } from "./dom.js";
import { DeviceHistory } from "./devicehistory.js";
import { RunView } from "./runview.js";
import { TaskView } from "./taskview.js";

const TITLES = { task: "Task", device: "Device", run: "Run" };

export class Detail {
  /** @param back () => the address of the view under the panel: where Close goes */
  constructor(api, { back, hostName, deviceName, onError, may }) {
    Object.assign(this, { api, back, hostName, deviceName, onError, may });
    this.view = null;
    this.onHash = () => this.show(location.hash);
    window.addEventListener("hashchange", this.onHash);
    byId("detail-close").onclick = (event) => {
      event.preventDefault();
      location.hash = this.back(); // the view again; its hashchange closes the panel
    };
  }

  show(hash) {
    if (this.view) this.view.close();
    this.view = null;
    const match = /^#(task|device|run)\/(.+)$/.exec(hash);
    const panel = byId("detail");
    if (!match) {
      panel.hidden = true;
      return;
    }
    const [, kind, raw] = match;
    const id = decodeURIComponent(raw);
    const body = byId("detail-body");
    byId("detail-title").textContent = `${TITLES[kind]} ${id}`;
    panel.dataset.kind = kind;
    panel.dataset.id = id;
    panel.hidden = false;
    const { api, hostName, deviceName, onError, may } = this;
    if (kind === "task") this.view = new TaskView(api, body, id, { hostName, deviceName, onError });
    else if (kind === "run") this.view = new RunView(api, body, id, { deviceName, onError, may });
    else this.view = new DeviceHistory(api, body, id, { hostName, onError });
    this.view.open();
  }

  stop() {
    window.removeEventListener("hashchange", this.onHash);
    if (this.view) this.view.close();
    this.view = null;
    byId("detail").hidden = true;
    byId("detail-body").replaceChildren();
  }
}
