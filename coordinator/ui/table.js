// A table whose rows are built once per key and then updated cell by cell: putting an item
// again writes only the cells whose text, tone or buttons changed, so a live update touches a
// few text nodes, not the table. A filter and a page (`pageSize` rows from `page * pageSize` of
// the rows that match) decide which rows show; `onLayout({first, last, matching, total})` hears
// what they are after each change, for the view's pager (pager.js) to say what is hidden.
//
// A column is one of
//   {title, value: item => string, tone?: item => class name, wide?: bool, id?: bool,
//    href?: item => string | null}   (with href, the text is a link there: a task's view)
//   {title, actions: item => [{label, action}]}   (buttons; clicks go to onAction(action, key))

import { el } from "./dom.js";

export class KeyedTable {
  /**
   * @param table   the <table> element to fill
   * @param options {key: item => string, columns, compare?: (a, b) => number,
   *                 empty: text shown without rows, onAction?: (action, key, button) => void}
   */
  constructor(table, { key, columns, compare = null, empty = "Nothing here.", onAction = () => {},
    pageSize = Infinity, onLayout = () => {} }) {
    this.key = key;
    this.pageSize = pageSize;
    this.page = 0;
    this.onLayout = onLayout;
    this.layoutSoon = false;
    this.matching = 0;
    this.columns = columns;
    this.compare = compare;
    this.rows = new Map(); // key -> {tr, cells, shown: [{text, tone}], item}
    this.order = []; // keys in display order (kept sorted by `compare` when given)
    this.matches = null; // the filter: rows whose item does not match are hidden
    table.replaceChildren(
      el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", { text: c.title, class: c.actions ? "actions" : "" })))),
      (this.body = el("tbody")),
    );
    this.emptyRow = el("tr", { class: "empty" }, el("td", { text: empty, colspan: columns.length }));
    this.body.append(this.emptyRow);
    this.body.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (button) onAction(button.dataset.action, button.closest("tr").dataset.key, button);
    });
  }

  get size() {
    return this.rows.size;
  }

  has(key) {
    return this.rows.has(key);
  }

  get(key) {
    const row = this.rows.get(key);
    return row ? row.item : undefined;
  }

  items() {
    return this.order.map((key) => this.rows.get(key).item);
  }

  /** Add or update one item, keeping the order. */
  put(item) {
    const key = this.key(item);
    const row = this.rows.get(key);
    if (row) {
      const matched = this.#matches(row.item);
      this.#update(row, item);
      if (this.compare && !this.#inOrder(key)) this.#move(key, row);
      else if (matched === this.#matches(item)) return; // the same rows show: no layout
      this.#relayout();
      return;
    }
    const fresh = this.#build(key, item);
    const index = this.#position(item);
    this.order.splice(index, 0, key);
    const next = this.order[index + 1];
    this.body.insertBefore(fresh.tr, next === undefined ? null : this.rows.get(next).tr);
    this.emptyRow.remove();
    this.#relayout();
  }

  remove(key) {
    const row = this.rows.get(key);
    if (!row) return;
    row.tr.remove();
    this.rows.delete(key);
    this.order.splice(this.order.indexOf(key), 1);
    if (this.rows.size === 0) this.body.append(this.emptyRow);
    this.#relayout();
  }

  /** Make the table show exactly `items` (already in display order when there is no `compare`):
   *  existing rows are updated in place, new ones built in one fragment, missing ones removed. */
  replaceAll(items) {
    const keys = items.map(this.key);
    const wanted = new Set(keys);
    for (const key of [...this.rows.keys()]) if (!wanted.has(key)) this.remove(key);
    const order = this.compare ? [...items].sort(this.compare).map(this.key) : keys;
    const byKey = new Map(items.map((item, i) => [keys[i], item]));
    for (const [key, item] of byKey) {
      const row = this.rows.get(key);
      if (row) this.#update(row, item);
      else this.rows.set(key, this.#build(key, item));
    }
    const sameOrder = order.length === this.order.length && order.every((k, i) => k === this.order[i]);
    this.order = order;
    if (!sameOrder) {
      const fragment = document.createDocumentFragment();
      for (const key of order) fragment.append(this.rows.get(key).tr);
      this.body.append(fragment); // moves existing rows, appends new ones, in one go
    }
    if (this.rows.size === 0) this.body.append(this.emptyRow);
    else this.emptyRow.remove();
    this.layout();
  }

  /** Show only the rows whose item `matches` (null: every row), now and as rows change; back
   *  to the first page. */
  filter(matches) {
    this.matches = matches;
    this.page = 0;
    this.layout();
  }

  /** Show page `page` (from 0) of the matching rows. */
  showPage(page) {
    this.page = Math.max(0, page);
    this.layout();
  }

  /** Hide every row but the matching ones of the page, and tell `onLayout` what shows. */
  layout() {
    this.layoutSoon = false;
    const pages = Math.max(1, Math.ceil(this.#countMatching() / this.pageSize));
    if (this.page >= pages) this.page = pages - 1;
    const first = this.page * this.pageSize;
    const last = first + this.pageSize;
    let n = 0;
    for (const key of this.order) {
      const row = this.rows.get(key);
      const match = this.#matches(row.item);
      const hidden = !match || n < first || n >= last;
      if (match) n += 1;
      if (row.tr.hidden !== hidden) row.tr.hidden = hidden;
    }
    this.matching = n;
    this.onLayout({ first: n ? first + 1 : 0, last: Math.min(last, n), matching: n, total: this.rows.size,
      page: this.page, pages });
  }

  #countMatching() {
    if (this.matches === null) return this.rows.size;
    let n = 0;
    for (const row of this.rows.values()) if (this.matches(row.item)) n += 1;
    return n;
  }

  #matches(item) {
    return this.matches === null || this.matches(item);
  }

  /** A layout after this turn's changes: a burst of puts costs one pass over the rows. */
  #relayout() {
    if (this.layoutSoon) return;
    this.layoutSoon = true;
    queueMicrotask(() => this.layoutSoon && this.layout());
  }

  #build(key, item) {
    const cells = this.columns.map((column) => el("td", { class: column.actions ? "actions" : cellClass(column, "") }));
    const tr = el("tr", { dataset: { key } }, ...cells);
    const row = { tr, cells, shown: this.columns.map(() => ({ text: null, tone: null })), item: null };
    this.rows.set(key, row);
    this.#update(row, item);
    return row;
  }

  #update(row, item) {
    row.item = item;
    this.columns.forEach((column, i) => {
      const shown = row.shown[i];
      const cell = row.cells[i];
      if (column.actions) {
        const buttons = column.actions(item);
        const signature = buttons.map((b) => `${b.action}:${b.label}`).join("|");
        if (signature !== shown.text) {
          shown.text = signature;
          cell.replaceChildren(
            ...buttons.map((b) => el("button", { type: "button", text: b.label, dataset: { action: b.action } })),
          );
        }
        return;
      }
      const text = column.value(item) ?? "";
      const href = column.href && text ? column.href(item) : null;
      const signature = href ? `${href}\n${text}` : text;
      if (signature !== shown.text) {
        shown.text = signature;
        // An id's words never break inside (`lab-1.example (h_3f…)` wraps at its space only), and
        // the whole shows on hover where a narrow column cuts it short.
        const content = column.id ? words(text) : [text];
        if (href) cell.replaceChildren(el("a", { href }, ...content));
        else cell.replaceChildren(...content);
        if (column.id) cell.title = text;
      }
      if (column.hint) {
        const hint = column.hint(item);
        if (cell.title !== hint) cell.title = hint;
      }
      const tone = column.tone ? column.tone(item) || "" : "";
      if (tone !== shown.tone) {
        shown.tone = tone;
        cell.className = cellClass(column, tone);
      }
    });
  }

  #position(item) {
    if (!this.compare) return this.order.length;
    let low = 0;
    let high = this.order.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (this.compare(this.rows.get(this.order[mid]).item, item) <= 0) low = mid + 1;
      else high = mid;
    }
    return low;
  }

  #inOrder(key) {
    const i = this.order.indexOf(key);
    const item = this.rows.get(key).item;
    const before = this.order[i - 1];
    const after = this.order[i + 1];
    return (before === undefined || this.compare(this.rows.get(before).item, item) <= 0) &&
      (after === undefined || this.compare(item, this.rows.get(after).item) <= 0);
  }

  #move(key, row) {
    this.order.splice(this.order.indexOf(key), 1);
    const index = this.#position(row.item);
    this.order.splice(index, 0, key);
    const next = this.order[index + 1];
    this.body.insertBefore(row.tr, next === undefined ? null : this.rows.get(next).tr);
  }
}

function cellClass(column, tone) {
  const kind = column.wide ? "wrap" : column.id ? (column.short ? "id short" : "id") : "";
  return [kind, tone].filter(Boolean).join(" ");
}

/** The words of `text`, each kept whole, with the spaces between them left free to wrap. */
function words(text) {
  return text.split(" ").flatMap((word, i) => [...(i ? [" "] : []), el("span", { class: "word", text: word })]);
}
