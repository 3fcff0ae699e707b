// The task view's strip of artifacts (issue 30), under its timeline: a thumbnail per screenshot
// and a tile per log, ordered by attempt, then step (the artifacts of no step, a log or a final
// screen, after their attempt's steps). It starts from GET /api/v1/tasks/{id}/artifacts and
// grows with the feed's `artifact` events while the view is open (the view passes them on).
//
// The bytes are the hosts' and need the token: an <img src> cannot send it, so each is fetched
// as a Blob (once it is near the strip's visible part) and shown through an object URL; every URL
// made is revoked when the view closes, and fetches still running are aborted. A click opens the
// artifact whole in the viewer (artifactviewer.js): an image at full size, a log as text.

import { ArtifactViewer } from "./artifactviewer.js";
import { el } from "./dom.js";

const FETCHES_AT_ONCE = 4; // thumbnails read in parallel: a long run's strip does not flood the coordinator
// A thumbnail is read once it comes within a strip's width of the strip's visible part: a run of
// hundreds of steps costs the tab the screenshots looked at, not all of them.
const READ_AHEAD = "0px 100%";
// An upload describes its artifact (and the feed announces it) before its bytes are committed
// under their name (coordinator/blobs/artifacts.py): a read in between answers 404. A
// thumbnail read so is read again after these waits before it is shown as failed.
const RETRY_MISSING_MS = [250, 1_000, 3_000];

/** Strip order: attempt, then step (no step last), then upload time, then name. */
export function compareArtifacts(a, b) {
  const step = (x) => (x.step_index === null ? Infinity : x.step_index);
  return a.attempt - b.attempt || step(a) - step(b) ||
    compareText(a.created_at ?? "", b.created_at ?? "") || compareText(a.name, b.name);
}

/** A listed artifact or an `artifact` event of the feed, as the strip keeps it. */
export function describe(item) {
  return {
    name: item.name,
    attempt: item.attempt,
    step_index: item.step_index ?? null, // the feed leaves it out when the artifact is no step's
    size: item.size,
    content_type: item.content_type,
    created_at: item.created_at ?? item.at ?? null,
  };
}

const isImage = (artifact) => artifact.content_type.startsWith("image/");
const isText = (artifact) => artifact.content_type === "text/plain" || artifact.content_type === "application/json";

export class ArtifactStrip {
  /** @param onError (error) => void: opening an artifact failed */
  constructor(api, taskId, { onError = () => {} } = {}) {
    Object.assign(this, { api, taskId, onError });
    this.entries = []; // {artifact, node, img, bytes}, in strip order
    this.keys = new Set();
    this.urls = new Set(); // every object URL made: revoked by close()
    this.waiting = []; // thumbnails to fetch
    this.fetching = 0;
    this.closed = false;
    this.aborts = new AbortController();
    this.viewer = new ArtifactViewer();
    this.count = el("span", { class: "count" });
    this.list = el("ol", { class: "artifact-strip" });
    // One element for the view's life: the view draws itself again on every event, and puts this
    // same element back, thumbnails and all.
    this.element = el("div", { id: "task-artifacts", class: "artifacts", hidden: "" },
      el("h3", { text: "Artifacts " }, this.count), this.list);
    this.byNode = new Map(); // a thumbnail's node -> its entry, until it is read
    this.near = new IntersectionObserver((records) => {
      for (const record of records) {
        const entry = this.byNode.get(record.target);
        if (!record.isIntersecting || !entry) continue;
        this.near.unobserve(record.target);
        this.byNode.delete(record.target);
        this.#fetchSoon(entry);
      }
    }, { root: this.list, rootMargin: READ_AHEAD });
  }

  /** The artifacts stored so far (the feed brings the ones that follow). */
  async load() {
    try {
      const listing = await this.api.get(`/api/v1/tasks/${enc(this.taskId)}/artifacts`);
      for (const artifact of listing.artifacts) this.add(artifact);
    } catch (error) {
      if (!this.closed && error.status !== 404) this.onError(error); // 404: the view says the task is gone
    }
  }

  /** One artifact, listed or announced; again is a no-op (the listing and the feed overlap). */
  add(item) {
    if (this.closed) return;
    const artifact = describe(item);
    const key = `${artifact.attempt}/${artifact.name}`;
    if (this.keys.has(key)) return;
    this.keys.add(key);
    const entry = this.#entry(artifact);
    const at = this.entries.findIndex((other) => compareArtifacts(artifact, other.artifact) < 0);
    if (at < 0) {
      this.entries.push(entry);
      this.list.append(entry.node);
    } else {
      this.list.insertBefore(entry.node, this.entries[at].node);
      this.entries.splice(at, 0, entry);
    }
    this.element.hidden = false;
    this.count.textContent = String(this.entries.length);
    if (entry.img) {
      this.byNode.set(entry.node, entry);
      this.near.observe(entry.node);
    }
  }

  /** `draw()`, which takes the strip out of the page and puts it back (the task view draws
   *  itself again on every event): the strip stays scrolled where a person left it, since an
   *  element out of the page forgets its scroll, and the thumbnails in reach are read. */
  keepingScroll(draw) {
    const left = this.list.scrollLeft;
    draw();
    this.list.scrollLeft = left;
  }

  close() {
    this.closed = true;
    this.aborts.abort();
    this.near.disconnect();
    this.byNode.clear();
    this.waiting = [];
    this.viewer.close();
    for (const url of this.urls) URL.revokeObjectURL(url);
    this.urls.clear();
  }

  #entry(artifact) {
    const caption = [artifact.attempt > 1 ? `attempt ${artifact.attempt}` : "",
      artifact.step_index === null ? artifact.name : `step ${artifact.step_index}`].filter(Boolean).join(" · ");
    const img = isImage(artifact) ? el("img", { alt: caption }) : null;
    const face = img ?? el("span", { class: "artifact-kind", text: isText(artifact) ? "text" : artifact.content_type });
    const button = el("button", { type: "button", title: `${artifact.name} · ${artifact.content_type} · ${size(artifact.size)}` },
      face, el("span", { class: "caption", text: caption }));
    const node = el("li", {
      class: "artifact", // not wire: a CSS class
      dataset: {
        name: artifact.name, attempt: String(artifact.attempt), step: artifact.step_index ?? "",
        type: artifact.content_type,
      },
    }, button);
    const entry = { artifact, node, img, bytes: null, missing: 0 }; // missing: reads answered 404 so far
    button.onclick = () => this.#open(entry);
    return entry;
  }

  /** The entry's bytes as an object URL, fetched once. */
  #url(entry) {
    entry.bytes ??= this.api.blob(
      `/api/v1/tasks/${enc(this.taskId)}/artifacts/${enc(entry.artifact.name)}`,
      { attempt: entry.artifact.attempt }, this.aborts.signal,
    ).then((blob) => {
      if (this.closed) return null;
      const url = URL.createObjectURL(blob);
      this.urls.add(url);
      return { url, blob };
    });
    return entry.bytes;
  }

  #fetchSoon(entry) {
    this.waiting.push(entry);
    this.#pump();
  }

  #pump() {
    while (this.fetching < FETCHES_AT_ONCE && this.waiting.length > 0) {
      const entry = this.waiting.shift();
      this.fetching += 1;
      this.#url(entry)
        .then((got) => {
          if (got) entry.img.src = got.url;
        })
        .catch((error) => {
          if (error.name === "AbortError") return;
          entry.bytes = null; // a click tries again
          const wait = error.status === 404 ? RETRY_MISSING_MS[entry.missing] : undefined;
          if (wait !== undefined) {
            entry.missing += 1;
            setTimeout(() => this.closed || this.#fetchSoon(entry), wait);
            return;
          }
          entry.node.dataset.state = "failed"; // not wire: its bytes could not be read
          entry.node.title = `Could not read ${entry.artifact.name}: ${error.message}`;
        })
        .finally(() => {
          this.fetching -= 1;
          this.#pump();
        });
    }
  }

  async #open(entry) {
    try {
      const got = await this.#url(entry);
      if (!got || this.closed) return;
      const text = isText(entry.artifact) ? await got.blob.text() : null;
      if (this.closed) return;
      delete entry.node.dataset.state;
      this.viewer.show(entry.artifact, got.url, text);
    } catch (error) {
      if (error.name === "AbortError") return;
      entry.bytes = null;
      this.onError(error);
    }
  }
}

function size(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MiB`;
}

function compareText(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

const enc = encodeURIComponent;
