// The dashboard's views and its address. Each view is a <section data-view="…"> of the page and
// an entry of VIEWS; the address names the view and its filters (`#queue?team=alpha&status=queued`),
// so a link to what one person sees shows another the same. `#task/<id>`, `#device/<id>` and
// `#run/<id>` open the panel of detail.js over the view shown before. A new view is one entry
// here, one section in index.html and the module that fills it.

import { byId, el } from "./dom.js";
import { DEVICE_STATES } from "./views.js";
import { RunStatus, TaskStatus } from "./wire.js";

const TASK_STATES = {
  queue: [TaskStatus.QUEUED, TaskStatus.ASSIGNED],
  results: [TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED],
};

/** The filter fields: their label, and the values a `status` may take in each view. */
const FIELDS = {
  team: { label: "Team", placeholder: "any team" },
  status: { label: "Status" },
  host: { label: "Host", placeholder: "host id" },
  driver: { label: "Driver", placeholder: "sim, adb…" },
  label: { label: "Label", placeholder: "key=value" },
  run: { label: "Run", placeholder: "run id" },
  task: { label: "Session", placeholder: "task id" },
};

export const VIEWS = [
  { name: "fleet", title: "Fleet", filters: ["host", "driver", "status", "label", "team"], states: DEVICE_STATES },
  { name: "queue", title: "Queue", filters: ["team", "status", "host", "run"], states: TASK_STATES.queue },
  { name: "runs", title: "Runs", filters: ["team", "status"], states: Object.values(RunStatus) },
  { name: "teams", title: "Teams", filters: [] },
  { name: "sessions", title: "Sessions", filters: ["task"] }, // #sessions?task=<id>: that session, live
  { name: "results", title: "Results", filters: ["team", "status", "host", "run"], states: TASK_STATES.results },
  { name: "events", title: "Events", filters: [] },
];
const DEFAULT_VIEW = "fleet";
const byName = new Map(VIEWS.map((view) => [view.name, view]));
const DETAIL = /^#(task|device|run)\//;

/** The view and filters an address names; `detail` when it opens the panel instead. */
export function parseHash(hash) {
  if (DETAIL.test(hash)) return { detail: true };
  const [name, query = ""] = hash.replace(/^#/, "").split("?", 2);
  const view = byName.get(name) ?? byName.get(DEFAULT_VIEW);
  const params = new URLSearchParams(query);
  const filters = {};
  for (const field of view.filters) {
    const value = (params.get(field) ?? "").trim();
    if (value) filters[field] = value;
  }
  return { detail: false, view: view.name, filters };
}

/** The address of a view with its filters (the empty ones left out). */
export function viewHref(view, filters = {}) {
  const query = new URLSearchParams(Object.entries(filters).filter(([, value]) => value)).toString();
  return `#${view}${query ? `?${query}` : ""}`;
}

export class Nav {
  /** @param onChange ({view, filters}) => void: the view or its filters changed */
  constructor({ onChange }) {
    this.onChange = onChange;
    this.route = { view: DEFAULT_VIEW, filters: {} };
    this.forms = new Map();
    byId("nav").replaceChildren(...VIEWS.map((view) => el("a", { href: `#${view.name}`, text: view.title, dataset: { view: view.name } })));
    for (const view of VIEWS) {
      const form = document.querySelector(`section[data-view="${view.name}"] form.filters`);
      if (!form) continue;
      form.replaceChildren(...view.filters.map((field) => this.#field(view, field)),
        el("button", { type: "submit", text: "Filter" }),
        el("button", { type: "reset", text: "Clear" }));
      form.onsubmit = (event) => {
        event.preventDefault();
        location.hash = viewHref(view.name, this.#values(form));
      };
      form.onreset = (event) => {
        event.preventDefault();
        location.hash = viewHref(view.name);
      };
      this.forms.set(view.name, form);
    }
    this.onHash = () => this.#follow();
    window.addEventListener("hashchange", this.onHash);
  }

  /** Show the view the address names (or the last one, under a detail panel). */
  start() {
    this.#follow(true);
  }

  stop() {
    window.removeEventListener("hashchange", this.onHash);
  }

  /** The address of the view now shown: where closing a detail panel returns. */
  href() {
    return viewHref(this.route.view, this.route.filters);
  }

  #follow(first = false) {
    const parsed = parseHash(location.hash);
    if (parsed.detail) {
      if (first) this.#show(this.route);
      return;
    }
    this.#show(parsed);
  }

  #show(route) {
    const changed = route.view !== this.route.view || JSON.stringify(route.filters) !== JSON.stringify(this.route.filters);
    this.route = { view: route.view, filters: route.filters };
    for (const section of document.querySelectorAll("#dashboard section[data-view]")) {
      section.hidden = section.dataset.view !== route.view;
    }
    for (const link of byId("nav").children) {
      if (link.dataset.view === route.view) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    const form = this.forms.get(route.view);
    if (form) {
      for (const input of form.querySelectorAll("[name]")) input.value = route.filters[input.name] ?? "";
    }
    this.onChange(this.route, changed);
  }

  #field(view, field) {
    const { label, placeholder } = FIELDS[field];
    const name = `${view.name}-${field}`;
    const input = field === "status"
      ? el("select", { name: field, id: name }, el("option", { value: "", text: "any" }),
        ...view.states.map((state) => el("option", { value: state, text: state })))
      : el("input", { name: field, id: name, type: "search", placeholder, autocomplete: "off", spellcheck: "false" });
    return el("label", { for: name }, `${label} `, input);
  }

  #values(form) {
    return Object.fromEntries([...form.querySelectorAll("[name]")].map((input) => [input.name, input.value.trim()]));
  }
}
