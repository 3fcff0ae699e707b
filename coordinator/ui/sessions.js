// The Sessions view (PROTOCOL.md, "Live sessions"): `#sessions?task=<id>` shows that session live
// (sessionview.js: its screen, its elements and, for its driver, the controls); `#sessions` alone
// lists the sessions running or about to, each a link to its live view, and says how to start one.

import { el } from "./dom.js";
import { SessionView } from "./sessionview.js";
import * as views from "./views.js";

export class SessionsView {
  /**
   * @param api      the Api
   * @param root     the element the view fills
   * @param may      what the token may do (api.js `grants`)
   * @param sessions () => the session tasks the dashboard knows running or assigned
   * @param onError  (error) => void: a read failed
   */
  constructor(api, root, { may, sessions, onError }) {
    Object.assign(this, { api, root, may, sessions, onError });
    this.live = null;
  }

  /** Show the session `taskId` live, or (null) the list. */
  show(taskId = null) {
    if (this.live && this.live.taskId === taskId) return;
    this.close();
    if (taskId) {
      this.live = new SessionView(this.api, this.root, taskId, { may: this.may, onError: this.onError });
      this.live.open();
      return;
    }
    const running = this.sessions();
    const start = this.may.submit
      ? "Start one with the Start session button of a free device in the Fleet view, or "
      : "A token that may submit starts one from a free device in the Fleet view, or with ";
    this.root.replaceChildren(
      el("p", { class: "muted" }, "A live session drives one pooled device by hand or by an agent. ", start,
        el("code", { text: "tether session start --driver sim" }), ", or the MCP server at ", el("code", { text: "/mcp" }), "."),
      running.length === 0
        ? el("p", { class: "muted", id: "sessions-none", text: "No session is running." })
        : el("ul", { id: "sessions-list" }, ...running.map((task) => el("li", { dataset: { task: task.task_id } },
          el("a", { href: views.sessionHref(task.task_id), text: task.task_id }),
          ` on ${task.device_id ?? views.target(task)} · ${task.status}${task.created_by ? ` · by ${task.created_by}` : ""}`))),
    );
  }

  close() {
    if (this.live) this.live.close();
    this.live = null;
  }
}
