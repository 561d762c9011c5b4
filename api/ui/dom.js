// Small DOM helpers shared by the pages: elements built from data, never from HTML strings.

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined && value !== false) node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
}

export function table(caption, headings, rows) {
  return el("table", {},
    el("caption", {}, caption),
    el("thead", {}, el("tr", {}, headings.map((h) =>
      el("th", { scope: "col", class: h.num ? "num" : null }, h.label || h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((cell, i) =>
      el("td", { class: headings[i].num ? "num" : null }, cell))))),
  );
}

// A scale-up gang (`ns/<job>+<first replica>`, PRODUCT §5) is part of its job: its links open
// the job's page, which shows the job's gangs together.
export function jobHref(key) {
  const [namespace, entry] = key.split("/");
  const job = entry.split("+")[0];
  return `#/jobs/${encodeURIComponent(namespace)}/${encodeURIComponent(job)}`;
}

export function jobLink(key) {
  const [namespace, name] = key.split("/");
  if (!namespace || !name) return key;
  return el("a", { href: jobHref(key) }, key);
}

export function when(iso) {
  if (!iso) return "—";
  return new Date(iso).toLocaleString();
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const s = Math.round(seconds);
  if (s < 90) return `${s} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

const PALETTE = ["#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d",
  "#dc2626", "#4f46e5", "#ca8a04"];

export function tenantColour(tenant) {
  let hash = 0;
  for (const ch of tenant) hash = (hash * 31 + ch.charCodeAt(0)) >>> 0;
  return PALETTE[hash % PALETTE.length];
}

const SHADES = { "prod-inference": "100%", training: "70%", small: "42%" };

export function tierShade(tier) {
  return SHADES[tier] || "55%";
}

export function swatch(colour, label) {
  const box = el("span", { class: "cell reserved", "aria-hidden": "true" });
  box.style.setProperty("--c", colour);
  box.style.setProperty("--shade", "100%");
  return el("span", {}, box, label);
}
