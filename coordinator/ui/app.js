// The page: asks for an operator token, learns who it is (GET /api/v1/me), and runs the
// dashboard with the actions that token may take. The token lives in this tab only: in memory and
// in sessionStorage (so a reload keeps the session), never in a cookie, localStorage or a URL.
// Signing out forgets it.

import { Api, grants } from "./api.js";
import { Dashboard } from "./dashboard.js";
import { byId } from "./dom.js";
import { formatTime } from "./time.js";

const TOKEN_KEY = "tether.token";
let dashboard = null;

async function signIn(token) {
  const api = new Api(token);
  showLoginError(null);
  let me;
  try {
    me = await api.get("/api/v1/me"); // the token is checked before anything is shown
  } catch (error) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLoginError(error.unauthorized ? "The coordinator refused this token." : `Could not sign in: ${error.message}`);
    return;
  }
  const may = grants(me);
  if (!may.read) {
    // The dashboard is a view of the fleet: without `read` every list would be refused.
    sessionStorage.removeItem(TOKEN_KEY);
    showLoginError(`The token ${me.name} may not watch the fleet: it holds ${scopeList(me)}, and the dashboard needs read.`);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  showWho(me);
  byId("login").hidden = true;
  byId("dashboard").hidden = false;
  byId("sign-out").hidden = false;
  dashboard = new Dashboard(api, { may, ask, onUnauthorized: () => signOut("The coordinator no longer accepts this token.") });
  try {
    await dashboard.start();
  } catch (error) {
    if (error.unauthorized) signOut("The coordinator no longer accepts this token.");
    else showBanner(`Could not load the dashboard: ${error.message}`);
  }
}

function scopeList(me) {
  return (me.scopes || []).join(", ") || "no scope";
}

/** The header says who is signed in, with which scopes (and, on hover, until when). */
function showWho(me) {
  const who = byId("who");
  if (me === null) {
    who.hidden = true;
    who.textContent = "";
    who.title = "";
    return;
  }
  who.hidden = false;
  who.textContent = `${me.name} · ${scopeList(me)}`;
  who.title = me.expires_at ? `expires ${formatTime(me.expires_at)}` : "does not expire";
}

function signOut(message = null) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (dashboard) dashboard.stop();
  dashboard = null;
  for (const id of ["hosts", "devices", "teams", "runs", "queue", "results", "webhooks", "events"]) byId(id).replaceChildren();
  byId("webhooks-section").hidden = true;
  for (const id of ["hosts-count", "devices-count", "teams-count", "runs-count", "queue-count", "results-count",
    "webhooks-count", "totals", "hosts-pager", "devices-pager", "queue-pager", "results-pager", "runs-pager",
    "teams-pager", "sessions"]) {
    byId(id).textContent = "";
  }
  const pill = byId("feed-state");
  pill.dataset.state = "idle";
  pill.textContent = "not connected";
  byId("dashboard").hidden = true;
  byId("sign-out").hidden = true;
  byId("login").hidden = false;
  byId("token").value = "";
  byId("action-error").hidden = true;
  showWho(null);
  showLoginError(message);
}

function showBanner(message) {
  const banner = byId("banner");
  banner.hidden = false;
  banner.textContent = message;
}

function showLoginError(message) {
  const error = byId("login-error");
  error.hidden = message === null;
  error.textContent = message ?? "";
}

/** The confirmation dialog: resolves to {ok, reason}. */
function ask({ text, reason }) {
  const dialog = byId("confirm");
  byId("confirm-text").textContent = text;
  byId("confirm-reason-label").hidden = !reason;
  const input = byId("confirm-reason");
  input.value = "";
  input.required = reason;
  dialog.returnValue = "";
  dialog.showModal();
  (reason ? input : byId("confirm-ok")).focus();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve({ ok: dialog.returnValue === "ok", reason: input.value.trim() }), { once: true });
  });
}

byId("login").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = byId("token").value.trim();
  if (token) signIn(token);
});
byId("sign-out").addEventListener("click", () => signOut());

const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) signIn(saved);
