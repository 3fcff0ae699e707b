// What events touched, to be read again: marks (a task, a host, a device, a host's devices, a run,
// or everything) gathered into rounds at most FLUSH_EVERY_MS apart, one round at a time. A round
// that fails marks everything and the next one waits RETRY_AFTER_FAILURE_MS.

const FLUSH_EVERY_MS = 250;
const RETRY_AFTER_FAILURE_MS = 2_000;

export class Rereads {
  /**
   * @param reread    ({everything, tasks, hosts, devices, hostDevices, runs}) => Promise: one round's reads
   * @param succeeded () => void: a round read everything it was asked to
   * @param failed    (error) => boolean: a round failed; true to retry everything, false to give up
   *                  until the next mark
   */
  constructor({ reread, succeeded, failed }) {
    this.reread = reread;
    this.succeeded = succeeded;
    this.failed = failed;
    this.pending = emptyMarks();
    this.timer = null;
    this.flushing = false;
    this.lastFlush = -Infinity;
    this.stopped = false;
  }

  mark(kind, id) {
    if (kind === "everything") this.pending.everything = true;
    else this.pending[kind].add(id);
    this.#schedule(FLUSH_EVERY_MS);
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  #schedule(spacing) {
    if (this.timer !== null || this.flushing || this.stopped) return;
    const wait = Math.max(0, this.lastFlush + spacing - performance.now());
    this.timer = setTimeout(() => this.#flush(), wait);
  }

  async #flush() {
    this.timer = null;
    this.flushing = true;
    this.lastFlush = performance.now();
    const marks = this.pending;
    this.pending = emptyMarks();
    let spacing = FLUSH_EVERY_MS;
    try {
      await this.reread(marks);
      this.succeeded();
    } catch (error) {
      if (!this.failed(error)) return;
      this.pending.everything = true;
      spacing = RETRY_AFTER_FAILURE_MS;
    } finally {
      this.flushing = false;
    }
    if (!isEmpty(this.pending)) this.#schedule(spacing);
  }
}

function emptyMarks() {
  return { everything: false, tasks: new Set(), hosts: new Set(), devices: new Set(), hostDevices: new Set(), runs: new Set() };
}

function isEmpty(marks) {
  return !marks.everything && !marks.tasks.size && !marks.hosts.size && !marks.devices.size && !marks.hostDevices.size &&
    !marks.runs.size;
}
