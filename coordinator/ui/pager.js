// A view's pager: which rows show of how many, how many are hidden (by the page or the filter),
// and buttons to the newer and older pages. It only draws and reports clicks: the table pages
// what it holds (table.js), a server listing pages by its cursors (dashboard.js).

import { el } from "./dom.js";

const number = (n) => n.toLocaleString("en");

/** `1–50 of 1,000 · 950 hidden`, from what a table's layout or a listing's page shows. `total`
 *  null: the listing's size is not known, only that `more` pages follow. */
export function pagerText({ first, last, matching, total = null, more = false }) {
  if (matching === 0 && !more) return total ? `none of ${number(total)} match` : "";
  const shown = `${number(first)}–${number(last)}`;
  if (total === null) return more ? `${shown} · more older` : `${shown} of ${number(matching)}`;
  const hidden = total - (last - first + 1);
  const of = matching === total ? `of ${number(total)}` : `of ${number(matching)} matching (${number(total)} in all)`;
  return `${shown} ${of}${hidden > 0 ? ` · ${number(hidden)} hidden` : ""}`;
}

export class Pager {
  /**
   * @param root    the element to draw in (it gets a text and two buttons)
   * @param newer   () => void: the page before
   * @param older   () => void: the page after
   */
  constructor(root, { newer, older }) {
    this.root = root;
    this.text = el("span", { class: "pager-text" });
    this.newerButton = el("button", { type: "button", class: "newer", text: "‹ Newer" });
    this.olderButton = el("button", { type: "button", class: "older", text: "Older ›" });
    this.newerButton.onclick = newer;
    this.olderButton.onclick = older;
    root.replaceChildren(this.text, this.newerButton, this.olderButton);
  }

  /** Show `pagerText(state)`; the buttons are offered only where there is a page to go to. */
  show(state, { hasNewer, hasOlder }) {
    this.text.textContent = pagerText(state);
    this.newerButton.hidden = !hasNewer;
    this.olderButton.hidden = !hasOlder;
  }

  clear() {
    this.text.textContent = "";
    this.newerButton.hidden = true;
    this.olderButton.hidden = true;
  }
}

/** A table's pager: the table's own pages (`onLayout` of table.js). */
export function tablePager(root, table) {
  const pager = new Pager(root, { newer: () => table().showPage(table().page - 1), older: () => table().showPage(table().page + 1) });
  return (layout) => pager.show(layout, { hasNewer: layout.page > 0, hasOlder: layout.page < layout.pages - 1 });
}
