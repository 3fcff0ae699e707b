// The artifact viewer: the page's one <dialog id="artifact-viewer"> (index.html), showing one
// artifact whole: an image at full size, a log or JSON as text, a video with its controls. It
// only shows what it is given (an object URL, or text, which goes in through textContent); the
// strip (artifacts.js) fetches the bytes and owns, and revokes, every object URL.

import { byId, el } from "./dom.js";

export class ArtifactViewer {
  constructor() {
    this.dialog = byId("artifact-viewer");
    byId("artifact-viewer-close").onclick = () => this.close();
    // A click on the backdrop (the dialog itself, outside its content) closes it too.
    this.dialog.onclick = (event) => event.target === this.dialog && this.close();
  }

  /** @param artifact  its description (name, attempt, step_index, size, content_type)
   *  @param url       an object URL of its bytes (the Save link's, and the image's or video's)
   *  @param text      its text, for a log or JSON; null for an image or a video */
  show(artifact, url, text = null) {
    byId("artifact-viewer-title").textContent = title(artifact);
    const save = byId("artifact-viewer-save");
    save.href = url;
    save.download = artifact.name;
    let content;
    if (text !== null) content = el("pre", { class: "artifact-text", text });
    else if (artifact.content_type.startsWith("video/")) content = el("video", { src: url, controls: "" });
    else content = el("img", { src: url, alt: title(artifact), class: "artifact-full" });
    byId("artifact-viewer-body").replaceChildren(content);
    this.dialog.dataset.name = artifact.name;
    this.dialog.dataset.attempt = String(artifact.attempt);
    if (!this.dialog.open) this.dialog.showModal();
  }

  close() {
    if (this.dialog.open) this.dialog.close();
    byId("artifact-viewer-body").replaceChildren(); // drops the last reference to its URL
    byId("artifact-viewer-save").removeAttribute("href");
  }
}

function title(artifact) {
  const step = artifact.step_index === null ? "" : ` · step ${artifact.step_index}`;
  return `${artifact.name} · attempt ${artifact.attempt}${step}`;
}
