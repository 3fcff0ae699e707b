// The Sessions view (PROTOCOL.md, "Live sessions"): for now, how to start one. The live view of
// a session replaces this module (its screen, its elements and its commands), the rest of the
// page unchanged: nav.js lists the view, index.html holds its section.

import { el } from "./dom.js";

export class SessionsView {
  constructor(root) {
    this.root = root;
  }

  show() {
    this.root.replaceChildren(el("p", { class: "muted" },
      "A live session drives one pooled device by hand or by an agent: ",
      el("code", { text: "tether session start --driver sim" }), ", or the MCP server at ",
      el("code", { text: "/mcp" }), ". Running sessions show in the Fleet view as their device's task."));
  }
}
