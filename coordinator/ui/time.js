// The one time format of every Tether surface (the `tether` command prints the same): local
// time with its explicit UTC offset, `2026-12-03 16:04:24 +01:00`, the date left out when it is
// today's, `16:04:24 +01:00`. The API and the feed give RFC 3339 UTC strings.

const pad = (n, width = 2) => String(n).padStart(width, "0");

/** `+01:00`: the offset of local time from UTC at that moment (getTimezoneOffset is UTC - local). */
export function offset(date) {
  const minutes = -date.getTimezoneOffset();
  const sign = minutes < 0 ? "-" : "+";
  return `${sign}${pad(Math.floor(Math.abs(minutes) / 60))}:${pad(Math.abs(minutes) % 60)}`;
}

function parse(at) {
  if (at === null || at === undefined || at === "") return null;
  const date = new Date(at);
  return Number.isNaN(date.getTime()) ? null : date;
}

/** The time in the one format ("" when unknown); `now` decides what "today" is. */
export function formatTime(at, now = new Date()) {
  const date = parse(at);
  if (date === null) return "";
  const time = `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  const day = `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
  const today = now.toDateString() === date.toDateString();
  return `${today ? "" : `${day} `}${time} ${offset(date)}`;
}

/** A duration in ms as a person reads it: `850 ms`, `42 s`, `3 min 05 s`, `2 h 04 min`. */
export function formatDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms) || ms < 0) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const seconds = Math.floor(ms / 1000);
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${pad(seconds % 60)} s`;
  return `${Math.floor(minutes / 60)} h ${pad(minutes % 60)} min`;
}
