// The operator API, with the operator token held by this object only; and what a token's scopes
// let it do (`grants`), so the page offers only those actions.

import { OperatorScope } from "./wire.js";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }

  get unauthorized() {
    return this.status === 401;
  }
}

/**
 * What the token described by `me` (GET /api/v1/me: {name, scopes, expires_at}) may do, as
 * PROTOCOL.md's operator-scopes table says: `read` watches; `submit` creates tasks and cancels
 * the ones it created; `control` cancels any task, drains and undrains hosts, disables and
 * enables devices; `admin` does everything. The coordinator decides every call; this only keeps
 * the buttons of forbidden actions off the page.
 */
export function grants(me) {
  const scopes = new Set(me.scopes || []);
  const admin = scopes.has(OperatorScope.ADMIN);
  const control = admin || scopes.has(OperatorScope.CONTROL);
  const submit = admin || scopes.has(OperatorScope.SUBMIT);
  return {
    name: me.name,
    tokenId: me.token_id ?? null,
    admin, // the webhooks, and every route of theirs, are the admin's
    read: admin || scopes.has(OperatorScope.READ),
    drain: control,
    disable: control,
    revoke: admin,
    cancelSome: control || submit, // whether any Cancel button can ever show
    submit, // creates tasks: a live session on a free device too
    /** A live session is driven by the token that created it (its `created` event's actor_id)
     *  or an admin (PROTOCOL.md, "Live sessions"); any other token watches. */
    drive: (creatorId) => admin || (submit && me.token_id != null && creatorId === me.token_id),
    /** A task's Cancel: any task with `control`; with only `submit`, the tasks this token created. */
    cancel: (task) => control || (submit && createdBy(task) === me.name),
  };
}

/** Who created the task: the `actor` of its creation, as the task view carries it. */
function createdBy(task) {
  return task.created_by ?? null;
}

export class Api {
  #token;

  constructor(token) {
    this.#token = token;
  }

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.#token}`, ...extra };
  }

  get(path, params = {}) {
    return this.#request("GET", withQuery(path, params));
  }

  /** A task and its history, read together: `[task, {events}]` (a task's view and a session's). */
  taskWithEvents(taskId) {
    const id = encodeURIComponent(taskId);
    return Promise.all([this.get(`/api/v1/tasks/${id}`), this.get(`/api/v1/tasks/${id}/events`)]);
  }

  post(path, body) {
    const init = body === undefined ? {} : { body: JSON.stringify(body) };
    return this.#request("POST", path, init);
  }

  /** The bytes of a GET as a Blob (an artifact: an <img src> cannot carry the token, so the
   *  page fetches the bytes and shows them through an object URL). `signal` aborts it. */
  async blob(path, params = {}, signal = undefined) {
    let response;
    try {
      response = await fetch(withQuery(path, params), { headers: this.headers(), cache: "no-store", credentials: "omit", signal });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new ApiError(0, "network", `the coordinator did not answer (${error.message})`);
    }
    if (!response.ok) throw await errorOf(response);
    return response.blob();
  }

  /** Every item of a paged listing, following `next_cursor` for at most `maxPages` pages.
   *  Resolves to `{items, more}`, `more` true when pages were left. */
  async all(path, key, params = {}, maxPages = 10) {
    const items = [];
    let cursor = null;
    for (let page = 0; page < maxPages; page++) {
      const answer = await this.get(path, cursor === null ? params : { ...params, cursor });
      items.push(...answer[key]);
      cursor = answer.next_cursor;
      if (cursor === null || cursor === undefined) return { items, more: false };
    }
    return { items, more: true };
  }

  async #request(method, path, init = {}) {
    let response;
    try {
      response = await fetch(path, {
        method,
        headers: this.headers(init.body ? { "Content-Type": "application/json" } : {}),
        cache: "no-store",
        credentials: "omit",
        ...init,
      });
    } catch (error) {
      throw new ApiError(0, "network", `the coordinator did not answer (${error.message})`);
    }
    if (!response.ok) throw await errorOf(response);
    return response.json().catch(() => null);
  }
}

/** The contract's `{"error": {code, message}}` of a refused call, as an ApiError. */
async function errorOf(response) {
  const body = await response.json().catch(() => null);
  const error = body && body.error ? body.error : { code: "http", message: response.statusText };
  return new ApiError(response.status, error.code, error.message);
}

function withQuery(path, params) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null) query.set(name, String(value));
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}
