// The live event feed, GET /api/v1/events, read with fetch() so it can carry the Authorization
// header (an EventSource cannot). Server-sent events are parsed here; the last event id is kept
// and sent as Last-Event-ID when the stream is opened again after it ended or failed.

const FIRST_RETRY_MS = 500;
const MAX_RETRY_MS = 10_000;

/** Incremental server-sent-events parser: feed it text chunks, get whole events back. */
export class SseParser {
  #buffer = "";
  #data = [];
  #id = null;

  /** The events completed by this chunk: `{id, data}`, `id` null when the event named none. */
  push(chunk) {
    this.#buffer += chunk;
    const events = [];
    let start = 0;
    for (;;) {
      const end = this.#lineEnd(start);
      if (end < 0) break;
      const line = this.#buffer.slice(start, end);
      start = end + (this.#buffer[end] === "\r" && this.#buffer[end + 1] === "\n" ? 2 : 1);
      const event = this.#line(line);
      if (event) events.push(event);
    }
    this.#buffer = this.#buffer.slice(start);
    return events;
  }

  #lineEnd(from) {
    for (let i = from; i < this.#buffer.length; i++) {
      const c = this.#buffer[i];
      if (c === "\n") return i;
      // A lone CR ends a line too; wait for the next chunk to know whether LF follows.
      if (c === "\r") return i + 1 < this.#buffer.length ? i : -1;
    }
    return -1;
  }

  #line(line) {
    if (line === "") {
      if (this.#data.length === 0) return null;
      const event = { id: this.#id, data: this.#data.join("\n") };
      this.#data = [];
      this.#id = null;
      return event;
    }
    if (line.startsWith(":")) return null; // a comment: keepalive or a notice
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.#data.push(value);
    else if (field === "id" && !value.includes("\0")) this.#id = value;
    return null;
  }
}

/**
 * Follows the feed until `stop()`. Callbacks:
 *  - onEvent(event): each event's JSON object, in order;
 *  - onState(state, detail): "connecting", "live", "reconnecting" (detail: the delay in ms),
 *    "stopped" (detail: the ApiError-like reason, a 401 for a refused token);
 *  - onOpen(resumed): a stream was opened; `resumed` is true from the second one on.
 */
export class Feed {
  constructor({ url = "/api/v1/events", headers, onEvent, onState = () => {}, onOpen = () => {} }) {
    Object.assign(this, { url, headers, onEvent, onState, onOpen });
    this.lastEventId = null;
    this.controller = null;
    this.stopped = false;
    this.opened = 0;
  }

  start() {
    this.#run();
  }

  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
  }

  async #run() {
    let delay = FIRST_RETRY_MS;
    while (!this.stopped) {
      this.onState("connecting");
      try {
        const gotEvents = await this.#follow();
        if (gotEvents) delay = FIRST_RETRY_MS;
      } catch (error) {
        if (this.stopped) return;
        if (error.status === 401) {
          this.stopped = true;
          this.onState("stopped", error);
          return;
        }
      }
      if (this.stopped) return;
      const wait = delay / 2 + Math.random() * (delay / 2); // jitter: a restart is not a stampede
      this.onState("reconnecting", Math.round(wait));
      await new Promise((resolve) => setTimeout(resolve, wait));
      delay = Math.min(delay * 2, MAX_RETRY_MS);
    }
  }

  /** One stream, read to its end. True when it delivered anything (so the backoff resets). */
  async #follow() {
    this.controller = new AbortController();
    const headers = this.headers();
    if (this.lastEventId !== null) headers["Last-Event-ID"] = this.lastEventId;
    const response = await fetch(this.url, {
      headers: { Accept: "text/event-stream", ...headers },
      cache: "no-store",
      credentials: "omit",
      signal: this.controller.signal,
    });
    if (!response.ok) {
      throw Object.assign(new Error(`the feed answered ${response.status}`), { status: response.status });
    }
    this.onOpen(this.opened++ > 0);
    this.onState("live");
    const parser = new SseParser();
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let delivered = false;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return delivered;
      delivered = true;
      for (const { id, data } of parser.push(value)) {
        if (id !== null) this.lastEventId = id;
        let event;
        try {
          event = JSON.parse(data);
        } catch {
          continue; // not ours to show; the id still counts as read
        }
        if (event && typeof event === "object") this.onEvent(event);
      }
      if (this.stopped) return delivered;
    }
  }
}
