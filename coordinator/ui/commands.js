// A live session's commands as the page speaks of them (PROTOCOL.md, "Live sessions"): an action
// in a few words, the point on the device a point on its screen's picture stands for, and whether
// a press and a release make a tap or a swipe. Pure functions; sessionview.js and recording.js
// draw with them.

/** A command's `status` (PROTOCOL.md, "Live sessions"): wire names no such enum, so the words are here once. */
export const CommandStatus = Object.freeze({ PENDING: "pending", FAILED: "failed" }); // not wire: see above

const TEXT_SHOWN = 40; // a typed text longer than this shows its start only

/** An action object ({action: "tap", x, y} …) in a few words: `tap 540, 365`, `key back`. */
export function actionText(action) {
  if (!action || typeof action !== "object") return "";
  const kind = action.action ?? "";
  if (kind === "tap") {
    if (action.text !== undefined) return `tap "${clip(action.text)}"`;
    if (action.id !== undefined) return `tap #${clip(action.id)}`;
    return `tap ${action.x}, ${action.y}`;
  }
  if (kind === "type") return `type "${clip(action.text ?? "")}"`;
  if (kind === "swipe") return `swipe ${action.x1}, ${action.y1} → ${action.x2}, ${action.y2}`;
  if (kind === "key") return `key ${action.key}`;
  if (kind === "launch") return `launch ${action.app}`;
  if (kind === "wait") return `wait ${action.ms} ms`;
  return kind;
}

function clip(text) {
  const value = String(text);
  return value.length > TEXT_SHOWN ? `${value.slice(0, TEXT_SHOWN)}…` : value;
}

/**
 * The device's pixel under a point of its picture: `(x, y)` in CSS pixels from the picture's
 * top left corner, the picture drawn `shown` ({width, height}, CSS pixels) large, the device
 * `device` ({width, height}) pixels large: the pixel the point falls in, kept on the screen.
 */
export function devicePoint(x, y, shown, device) {
  const scale = (value, from, to) => Math.min(to - 1, Math.max(0, Math.floor((value / from) * to)));
  return { x: scale(x, shown.width, device.width), y: scale(y, shown.height, device.height) };
}

/** A press and its release further apart than this (CSS pixels) are a swipe, else a tap. */
export const SWIPE_MIN_PX = 12;

export function isSwipe(from, to) {
  return Math.hypot(to.x - from.x, to.y - from.y) >= SWIPE_MIN_PX;
}

/** The middle of an element's bounds ([x1, y1, x2, y2], device pixels): where a click on it taps. */
export function middle(bounds) {
  const [x1, y1, x2, y2] = bounds;
  return { x: Math.round((x1 + x2) / 2), y: Math.round((y1 + y2) / 2) };
}

/** `4:05` for 245 s; `0:00` once past. */
export function countdown(ms) {
  const seconds = Math.max(0, Math.ceil(ms / 1000));
  return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}`;
}
