// A run's view (#run/<id>): its status and counts, and its matrix as a grid, work items down and
// devices across, each cell one task coloured by its status, with a thumbnail of its final
// screen once it has one; a click opens the task's view. It starts from the run and its JSON
// report (every task in its place, reruns in the place of what they replaced) and follows the
// feed's events of the run (`?run_id=`): a task's event recolours its cell at once, and the run's
// counts are read again once the events pause. A cell's thumbnail is read only when the cell
// comes into view, a few at a time, so a run of a thousand tasks costs what is looked at.
// The view takes the whole window (13 devices across fit at 1,600 px), with a legend of the
// colours, a mark on each rerun's cell, and the run's buttons: Cancel and Rerun failed for a
// token that may (control, or submit for its own runs), and the JUnit report for anyone.

import { el } from "./dom.js";
import { Feed } from "./feed.js";
import { COUNT_ORDER, countsText } from "./runs.js";
import { formatTime } from "./time.js";
import * as views from "./views.js";
import { EventType, RunStatus } from "./wire.js";

const REREAD_AFTER_MS = 300; // a run's events come in bursts (a cancel ends them all): one read after
const THUMBNAILS_AT_ONCE = 4;
const IMAGE = /\.(png|jpe?g|webp|gif)$/i;

/** The name of the task's final screen among its artifacts: `final.png` if it has one, else its
 *  last image; null when it has none. */
export function finalScreen(names) {
  const images = (names || []).filter((name) => IMAGE.test(name));
  return images.find((name) => /^final\./i.test(name)) ?? images.at(-1) ?? null;
}

/** The grid of a JSON report: work items (rows), devices (columns, in order), and the case of
 *  each (work, device) pair. */
export function gridOf(report) {
  const devices = new Set();
  const cells = new Map();
  for (const suite of report.suites) {
    for (const item of suite.cases) {
      const device = item.device_id ?? "unplaced";
      devices.add(device);
      cells.set(`${suite.work}\n${device}`, item);
    }
  }
  return { work: report.suites.map((s) => s.work), devices: [...devices].sort(), cells };
}

export class RunView {
  /**
   * @param deviceName (device id) => the device's local name (its serial), or null
   * @param onError    (error) => void: a read failed
   */
  constructor(api, root, runId, { deviceName = () => null, onError = () => {}, may = null } = {}) {
    Object.assign(this, { api, root, runId, deviceName, onError, may });
    this.run = null;
    this.closed = false;
    this.timer = null;
    this.cellOf = new Map(); // task id -> its cell
    this.queue = []; // cells whose thumbnail is to be read
    this.reading = 0;
    this.urls = [];
    this.watch = new IntersectionObserver((seen) => this.#seen(seen), { root: null, rootMargin: "200px" });
    this.feed = new Feed({
      url: `/api/v1/events?run_id=${encodeURIComponent(runId)}`,
      headers: () => api.headers(),
      onEvent: (event) => this.#onEvent(event),
    });
  }

  async open() {
    this.root.replaceChildren(el("p", { class: "muted", text: `Loading ${this.runId}…` }));
    this.feed.start(); // before the read: nothing between the two is missed
    await this.#read(true);
  }

  close() {
    this.closed = true;
    this.feed.stop();
    this.watch.disconnect();
    clearTimeout(this.timer);
    for (const url of this.urls) URL.revokeObjectURL(url);
  }

  async #read(whole) {
    const id = encodeURIComponent(this.runId);
    let run;
    let report;
    try {
      [run, report] = await Promise.all([
        this.api.get(`/api/v1/runs/${id}`),
        whole ? this.api.get(`/api/v1/runs/${id}/report`, { format: "json" }) : null,
      ]);
    } catch (error) {
      if (this.closed) return;
      if (error.status === 404) {
        this.root.replaceChildren(el("p", { class: "error", text: `No run ${this.runId}.` }));
        return;
      }
      this.onError(error);
      return;
    }
    if (this.closed) return;
    if (!whole) this.#facts(run);
    else if (!this.#refresh(run, report)) this.#render(run, report);
  }

  #onEvent(event) {
    if (this.closed || event.run_id !== this.runId) return;
    const cell = event.task_id ? this.cellOf.get(event.task_id) : null;
    if (cell && event.status) this.#paint(cell, event.status);
    // A task the grid does not have is a rerun taking a failed task's place, and an ended task
    // may have left its final screen: the report again, not only the run.
    const whole = this.whole || (event.type === EventType.CREATED && !cell) || views.isTerminal(event);
    this.whole = whole;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.whole = false;
      this.#read(whole);
    }, REREAD_AFTER_MS);
  }

  #facts(run) {
    this.run = run;
    const facts = this.root.querySelector(".facts");
    if (!facts) return;
    facts.replaceWith(this.#factList(run));
    this.#showButtons();
  }

  /** Cancel and Rerun failed where the token may and the run allows; the report always. */
  #buttons() {
    this.bar = el("div", { class: "run-actions", id: "run-actions" });
    this.cancelButton = el("button", { type: "button", text: "Cancel run", dataset: { action: "cancel" } });
    this.rerunButton = el("button", { type: "button", text: "Rerun failed", dataset: { action: "rerun-failed" } });
    this.junitButton = el("button", { type: "button", text: "JUnit report", dataset: { action: "junit" } });
    this.saved = el("a", { class: "saved", hidden: "" });
    this.cancelButton.onclick = () => this.#act(this.cancelButton, "cancel");
    this.rerunButton.onclick = () => this.#act(this.rerunButton, "rerun-failed");
    this.junitButton.onclick = () => this.#junit();
    this.actionError = el("span", { class: "error", role: "alert" });
    this.bar.append(this.cancelButton, this.rerunButton, this.junitButton, this.saved, this.actionError);
    this.#showButtons();
    return this.bar;
  }

  #showButtons() {
    if (!this.bar || !this.run) return;
    const mine = this.may ? this.may.cancel({ created_by: this.run.created_by ?? null }) : false;
    this.cancelButton.hidden = !mine || this.run.status !== RunStatus.RUNNING;
    this.rerunButton.hidden = !mine || !(this.run.counts?.failed > 0);
  }

  async #act(button, action) {
    button.disabled = true;
    this.actionError.textContent = "";
    try {
      await this.api.post(`/api/v1/runs/${encodeURIComponent(this.runId)}/${action}`);
      this.#read(true);
    } catch (error) {
      if (error.unauthorized) this.onError(error);
      else this.actionError.textContent = `That did not work: ${error.message}`;
    } finally {
      button.disabled = false;
    }
  }

  /** The run as JUnit XML, saved as a file through an object URL (the request carries the token). */
  async #junit() {
    this.actionError.textContent = "";
    try {
      const blob = await this.api.blob(`/api/v1/runs/${encodeURIComponent(this.runId)}/report`, { format: "junit" });
      const url = URL.createObjectURL(blob);
      this.urls.push(url);
      Object.assign(this.saved, { href: url, download: `${this.runId}.xml`, textContent: `${this.runId}.xml`, hidden: false });
      this.saved.click();
    } catch (error) {
      if (error.unauthorized) this.onError(error);
      else this.actionError.textContent = `No report: ${error.message}`;
    }
  }

  #legend() {
    return el("ul", { class: "run-legend", id: "run-legend" },
      ...COUNT_ORDER.map((status) => el("li", {}, el("span", { class: "swatch", dataset: { status } }), status)),
      el("li", {}, el("span", { class: "swatch rerun" }), "rerun (replaces a failed task)"));
  }

  #factList(run) {
    const fact = (name, value, tone = "", key = null) =>
      [el("dt", { text: name }), el("dd", { text: value ?? "", class: tone, ...(key ? { dataset: { key } } : {}) })];
    return el("dl", { class: "facts" },
      ...fact("Name", run.name ?? ""),
      ...fact("Status", run.status, views.toneOf(run.status), "status"),
      ...fact("Tasks", countsText(run.counts), "", "counts"),
      ...fact("Team", `${run.team ?? "default"} · priority ${run.priority ?? 0}`),
      ...fact("Created", `${formatTime(run.created_at)}${run.created_by ? ` by ${run.created_by}` : ""}`),
      ...(run.ended_at ? fact("Ended", formatTime(run.ended_at)) : []));
  }

  /** The same grid again with the report's statuses and screens, read in place; false when the
   *  report's tasks are not the grid's (a rerun took a place), and the grid must be drawn anew. */
  #refresh(run, report) {
    const cases = report.suites.flatMap((suite) => suite.cases);
    if (cases.length !== this.cellOf.size || !cases.every((c) => this.cellOf.has(c.task_id))) return false;
    for (const found of cases) {
      const cell = this.cellOf.get(found.task_id);
      this.#paint(cell, found.status);
      this.#screen(cell, found);
    }
    this.#facts(run);
    return true;
  }

  #render(run, report) {
    performance.mark("tether:run-grid-start");
    this.watch.disconnect();
    this.cellOf.clear();
    this.queue = [];
    const { work, devices, cells } = gridOf(report);
    const grid = el("div", { id: "run-grid", class: "run-grid", role: "grid" });
    // Through the CSSOM: the page's Content-Security-Policy allows no inline style attribute.
    grid.style.gridTemplateColumns = `minmax(8rem, 16rem) repeat(${devices.length}, 4.5rem)`;
    grid.append(el("div", { class: "corner" }),
      ...devices.map((d) => el("div", { class: "device", title: d, text: views.named(this.deviceName(d), d) })));
    for (const item of work) {
      grid.append(el("div", { class: "work", title: item, text: item }));
      for (const device of devices) {
        const found = cells.get(`${item}\n${device}`);
        if (!found) {
          grid.append(el("div", { class: "cell none" }));
          continue;
        }
        const rerun = found.rerun_of ? ` · rerun of ${found.rerun_of}` : "";
        const cell = el("a", {
          class: found.rerun_of ? "cell rerun" : "cell", href: views.taskHref(found.task_id),
          title: `${item} · ${device}: ${found.status}${found.failure_reason ? ` (${found.failure_reason})` : ""}${rerun}`,
          dataset: { task: found.task_id, work: item, device, ...(found.rerun_of ? { rerunOf: found.rerun_of } : {}) },
        });
        this.#paint(cell, found.status);
        this.cellOf.set(found.task_id, cell);
        this.#screen(cell, found);
        grid.append(cell);
      }
    }
    this.run = run;
    this.root.replaceChildren(this.#factList(run), this.#buttons(),
      el("h3", { text: `Matrix: ${work.length} × ${devices.length}` }), this.#legend(),
      el("div", { class: "run-grid-scroll" }, grid));
    performance.mark("tether:run-grid-ready");
    performance.measure("tether:run-grid", "tether:run-grid-start", "tether:run-grid-ready");
  }

  /** Watch for `cell` to come into view once its task has a final screen, to read it then. */
  #screen(cell, found) {
    const screen = finalScreen(found.artifacts);
    if (!screen || cell.dataset.screen === screen) return;
    cell.dataset.screen = screen;
    cell.dataset.attempt = String(found.result?.attempt ?? 1);
    this.watch.observe(cell);
  }

  #paint(cell, status) {
    cell.dataset.status = status;
    cell.setAttribute("aria-label", status);
  }

  #seen(entries) {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      this.watch.unobserve(entry.target);
      this.queue.push(entry.target);
    }
    this.#readThumbnails();
  }

  #readThumbnails() {
    while (this.reading < THUMBNAILS_AT_ONCE && this.queue.length > 0 && !this.closed) {
      const cell = this.queue.shift();
      this.reading += 1;
      const path = `/api/v1/tasks/${encodeURIComponent(cell.dataset.task)}/artifacts/${encodeURIComponent(cell.dataset.screen)}`;
      this.api.blob(path, { attempt: cell.dataset.attempt })
        .then((blob) => {
          if (this.closed) return;
          const url = URL.createObjectURL(blob);
          this.urls.push(url);
          cell.replaceChildren(el("img", { src: url, alt: `${cell.dataset.screen} of ${cell.dataset.task}` }));
        })
        .catch(() => {}) // a thumbnail that cannot be read leaves its cell's colour, which says it all
        .finally(() => {
          this.reading -= 1;
          this.#readThumbnails();
        });
    }
  }
}
