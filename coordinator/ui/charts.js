// Two small charts in plain SVG: tasks waiting (queued or assigned) and tasks finished per
// minute, over the last hour. Their data is the feed's last hour (activity.js): a stream of its
// own, opened at the stream id of an hour ago, replays the hour and then stays live.

import { Activity } from "./activity.js";
import { byId } from "./dom.js";
import { Feed } from "./feed.js";

const HOUR_MS = 3_600_000;
const DRAW_EVERY_MS = 5_000;
const H = 64; // the plot's height in px; its width is the chart's, read at each drawing
const SVG = "http://www.w3.org/2000/svg";

export class Charts {
  /** @param waiting () => the number of tasks the dashboard shows waiting now */
  constructor(api, { waiting }) {
    this.waiting = waiting;
    this.activity = new Activity();
    this.drawSoon = null;
    this.feed = new Feed({
      headers: () => api.headers(),
      onEvent: (event) => {
        this.activity.add(event);
        this.#soon();
      },
    });
    this.feed.lastEventId = `${Date.now() - HOUR_MS}-0`; // stream ids are milliseconds
  }

  start() {
    this.feed.start();
    this.draw();
    this.timer = setInterval(() => this.draw(), DRAW_EVERY_MS);
    this.onResize = () => this.#soon();
    window.addEventListener("resize", this.onResize);
  }

  stop() {
    this.feed.stop();
    clearInterval(this.timer);
    clearTimeout(this.drawSoon);
    window.removeEventListener("resize", this.onResize);
  }

  #soon() {
    if (this.drawSoon) return;
    this.drawSoon = setTimeout(() => {
      this.drawSoon = null;
      this.draw();
    }, 500);
  }

  draw() {
    const now = Date.now();
    this.activity.prune(now);
    const steps = this.activity.waitingOverHour(this.waiting(), now);
    drawSteps(byId("chart-waiting"), steps, now);
    drawBars(byId("chart-finished"), this.activity.finishedPerMinute(now));
  }
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

/** The chart of `figure` cleared to its axis and labels, in user units of one px each: a
 *  viewBox of another width would stretch its text as the window widens. */
function frame(figure, max, label) {
  const chart = figure.querySelector("svg");
  const W = Math.max(120, Math.round(chart.getBoundingClientRect().width));
  chart.setAttribute("viewBox", `0 0 ${W} ${H + 14}`);
  chart.replaceChildren(
    svg("line", { x1: 0, y1: H, x2: W, y2: H, class: "axis" }),
    Object.assign(svg("text", { x: 2, y: 10, class: "tick" }), { textContent: String(max) }),
    Object.assign(svg("text", { x: 2, y: H + 12, class: "tick" }), { textContent: "−60 min" }),
    Object.assign(svg("text", { x: W - 2, y: H + 12, class: "tick", "text-anchor": "end" }), { textContent: "now" }),
  );
  figure.querySelector("figcaption .value").textContent = label;
  return { chart, W };
}

function drawSteps(figure, points, now) {
  const max = Math.max(1, ...points.map((p) => p.n));
  const { chart, W } = frame(figure, max, `${points.at(-1).n} now, at most ${max}`);
  const x = (t) => ((t - (now - HOUR_MS)) / HOUR_MS) * W;
  const y = (n) => H - (n / max) * (H - 12);
  let d = `M ${x(points[0].t).toFixed(1)} ${y(points[0].n).toFixed(1)}`;
  for (let i = 1; i < points.length; i++) d += ` H ${x(points[i].t).toFixed(1)} V ${y(points[i].n).toFixed(1)}`;
  chart.append(svg("path", { d, class: "line" }));
  chart.dataset.now = String(points.at(-1).n);
  chart.dataset.max = String(max);
}

function drawBars(figure, counts) {
  const max = Math.max(1, ...counts);
  const total = counts.reduce((a, b) => a + b, 0);
  const { chart, W } = frame(figure, max, `${total} in the hour, ${counts.at(-1)} this minute`);
  const width = W / counts.length;
  counts.forEach((n, i) => {
    if (n === 0) return;
    const height = (n / max) * (H - 12);
    const bar = svg("rect", { x: (i * width + 0.5).toFixed(1), y: (H - height).toFixed(1), width: (width - 1).toFixed(1),
      height: height.toFixed(1), class: "bar" });
    bar.append(Object.assign(svg("title"), { textContent: `${n} finished, ${59 - i} min ago` }));
    chart.append(bar);
  });
  chart.dataset.total = String(total);
  chart.dataset.max = String(max);
}
