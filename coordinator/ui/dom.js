// Building DOM nodes. Text only ever goes in through textContent: nothing the coordinator
// returns (summaries, reasons, labels come from hosts) is ever parsed as HTML.

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === "text") node.textContent = value;
    else if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

export function byId(id) {
  return document.getElementById(id);
}
