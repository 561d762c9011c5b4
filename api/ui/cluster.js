// Cluster page: every device as a cell, by device class, rack and node. Racks are summarised
// and expanded on demand (all expanded for small clusters), so 2,000 nodes stay readable and
// only the cells of open racks are in the page.
import { api } from "./app.js";
import { el, tenantColour, tierShade, jobLink, swatch } from "./dom.js";

export const topics = ["cluster", "jobs"];
const OPEN_ALL_UP_TO_NODES = 32;
const open = new Set();
const STATE_WORDS = {
  free: "free", reserved: "reserved", held_by_others: "held by others (not gangq)",
  unavailable: "unavailable", tainted: "on tainted nodes",
};
const STATE_COLOURS = {
  free: "#ffffff", reserved: "#2563eb", held_by_others: "#4b5563", unavailable: "#111827",
  tainted: "#d97706",
};

export async function render() {
  const data = await api("/v1/cluster");
  const root = el("section", { "aria-labelledby": "cluster-title" },
    el("h1", { id: "cluster-title" }, "Cluster"), legend(data));
  for (const group of data.deviceClasses) root.append(deviceClass(group, data));
  root.addEventListener("mouseover", tip);
  root.addEventListener("focusin", tip);
  root.addEventListener("mouseout", hideTip);
  root.addEventListener("focusout", hideTip);
  return root;
}

function legend(data) {
  const tenants = [...new Set(data.jobs.map((j) => j.tenant))].sort();
  return el("div", { class: "legend", "aria-label": "Legend" },
    el("span", {}, el("span", { class: "cell free", "aria-hidden": "true" }), "free"),
    ...tenants.map((t) => swatch(tenantColour(t), `tenant ${t}`)),
    el("span", {}, el("span", { class: "cell reserved other", "aria-hidden": "true" }),
      "reserved by another tenant"),
    el("span", {}, el("span", { class: "cell held_by_others", "aria-hidden": "true" }),
      "held by others"),
    el("span", {}, el("span", { class: "cell unavailable", "aria-hidden": "true" }),
      "unavailable (tainted device, NotReady, cordoned)"),
    el("span", {}, el("span", { class: "cell tainted", "aria-hidden": "true" }),
      "on a tainted node (only jobs tolerating its taints)"),
    el("span", { class: "muted" }, "shade: prod-inference darkest, training, small lightest"),
  );
}

function counts(nodes) {
  const total = { free: 0, reserved: 0, held_by_others: 0, unavailable: 0, tainted: 0 };
  for (const node of nodes) for (const [, state] of node.devices) total[state] += 1;
  return total;
}

// Parts of a bar: free, each readable tenant's reserved devices, another tenant's, held, down.
function segments(nodes, data) {
  const parts = new Map();
  const add = (key, colour, label) => {
    const part = parts.get(key) || { colour, label, n: 0 };
    part.n += 1;
    parts.set(key, part);
  };
  for (const node of nodes) {
    for (const [, state, index] of node.devices) {
      if (state === "reserved" && index >= 0) {
        const tenant = data.jobs[index].tenant;
        add(`t:${tenant}`, tenantColour(tenant), `tenant ${tenant}`);
      } else if (state === "reserved") {
        add("other", "#9ca3af", "another tenant");
      } else {
        add(state, STATE_COLOURS[state], STATE_WORDS[state]);
      }
    }
  }
  return [...parts.values()];
}

function bar(parts, label) {
  const sum = parts.reduce((n, p) => n + p.n, 0) || 1;
  const box = el("span", { class: "bar", role: "img", "aria-label": label });
  for (const part of parts) {
    const piece = el("span", {});
    piece.style.setProperty("--w", `${(100 * part.n) / sum}%`);
    piece.style.background = part.colour;
    box.append(piece);
  }
  return box;
}

function words(total) {
  return Object.entries(total).map(([s, n]) => `${n} ${STATE_WORDS[s]}`).join(", ");
}

function cellCount(nodes) {
  return nodes.reduce((sum, node) => sum + node.devices.length, 0);
}

// The summary counts GPU-equivalents (a GPU split into partitions or shares counts once); it
// names the devices drawn below when they differ.
function amount(gpus, cells) {
  return gpus === cells ? `${gpus} devices` : `${gpus} GPU-equivalents in ${cells} devices`;
}

function deviceClass(group, data) {
  const u = group.usage;
  const gang = u.largestPlaceableGang;
  const id = `class-${u.deviceClassName.replace(/[^a-z0-9]/gi, "-")}`;
  const nodes = group.racks.flatMap((r) => r.nodes);
  const total = { free: u.free, reserved: u.reserved, held_by_others: u.heldByOthers,
    unavailable: u.unavailable, tainted: u.tainted };
  const section = el("section", { "aria-labelledby": id },
    el("h2", { id }, u.deviceClassName),
    el("div", { class: "summary" },
      el("div", { "data-summary": u.deviceClassName },
        `${amount(u.total, cellCount(nodes))} on ${nodes.length} nodes: ${words(total)}. `,
        el("strong", {}, `Largest placeable gang: ${gang.replicas} × ${gang.devicesPerReplica}`),
        ` (${gang.devices} devices); most free on one node: ${u.largestReplica}.`),
      bar(segments(nodes, data), words(total))),
  );
  if (nodes.length <= OPEN_ALL_UP_TO_NODES) {
    for (const rack of group.racks) {
      const rackTotal = counts(rack.nodes);
      section.append(el("div", { class: "rack" },
        el("h3", {}, `${data.rackLabel || "rack"} ${rack.name || "(none)"}: ` +
          `${rack.nodes.length} nodes, ${cellCount(rack.nodes)} devices: ${words(rackTotal)}`),
        el("div", { class: "nodes" }, rack.nodes.map((node) => nodeCells(node, data)))));
    }
    return section;
  }
  // Large clusters: a tile per rack; open racks are drawn below the tiles.
  const openPanel = el("div", { class: "open-racks", id: `${id}-open`, "aria-live": "polite" });
  const drawOpen = () => openPanel.replaceChildren(...group.racks
    .filter((rack) => open.has(`${u.deviceClassName}|${rack.name}`))
    .map((rack) => el("div", { class: "rack" },
      el("h3", {}, `${data.rackLabel || "rack"} ${rack.name || "(none)"}`),
      el("div", { class: "nodes" }, rack.nodes.map((node) => nodeCells(node, data))))));
  const tiles = el("div", { class: "rack-tiles", role: "list",
    "aria-label": `racks of ${u.deviceClassName}; choose one to show its devices` });
  for (const rack of group.racks) {
    const key = `${u.deviceClassName}|${rack.name}`;
    const rackTotal = counts(rack.nodes);
    const tile = el("button", { type: "button", class: "tile", "aria-expanded": String(open.has(key)),
      "aria-controls": `${id}-open`, "aria-label": `${rack.name}: ${rack.nodes.length} nodes, ${words(rackTotal)}` },
    el("span", { class: "tile-name" }, rack.name || "(none)"),
    el("span", { class: "tile-free" }, `${rackTotal.free}/${rack.nodes.reduce((n, x) => n + x.devices.length, 0)} free`),
    bar(segments(rack.nodes, data), ""));
    tile.addEventListener("click", () => {
      if (open.has(key)) open.delete(key); else open.add(key);
      tile.setAttribute("aria-expanded", String(open.has(key)));
      drawOpen();
    });
    tiles.append(el("div", { role: "listitem" }, tile));
  }
  drawOpen();
  section.append(tiles, openPanel);
  return section;
}

function describe(node, device, data) {
  const [name, state, index] = device;
  const where = `${node.name}/${name}`;
  if (state === "reserved" && index >= 0) {
    const job = data.jobs[index];
    return `${where}: ${job.key} (tenant ${job.tenant}, tier ${job.tier})`;
  }
  if (state === "reserved") return `${where}: reserved by a job of another tenant`;
  if (state === "unavailable") {
    const why = node.status === "Ready" ? "device tainted" : `node ${node.status}`;
    return `${where}: unavailable (${why})`;
  }
  if (state === "tainted") return `${where}: free to jobs tolerating ${node.taints.join(", ")}`;
  return `${where}: ${STATE_WORDS[state]}`;
}

function nodeCells(node, data) {
  const cells = el("div", { class: "cells", role: "group", "aria-label": `devices of ${node.name}` });
  for (const device of node.devices) {
    const [, state, index] = device;
    const label = describe(node, device, data);
    // One tab stop per node (its first cell); arrow keys move between the node's cells.
    const first = !cells.firstChild;
    const cell = el("span", { class: `cell ${state}`, tabindex: first ? "0" : "-1", role: "img",
      "aria-label": label, "data-tip": label });
    if (state === "reserved" && index >= 0) {
      const job = data.jobs[index];
      cell.classList.add("mine");
      cell.dataset.job = job.key;
      cell.style.setProperty("--c", tenantColour(job.tenant));
      cell.style.setProperty("--shade", tierShade(job.tier));
    } else if (state === "reserved") {
      cell.classList.add("other");
    }
    cells.append(cell);
  }
  cells.addEventListener("keydown", move);
  cells.addEventListener("click", (event) => {
    const key = event.target.dataset && event.target.dataset.job;
    if (key) location.hash = jobLink(key).getAttribute("href");
  });
  return el("div", { class: `node ${node.status}` },
    el("span", { class: "name" }, node.name, node.status === "Ready" ? "" : ` (${node.status})`),
    cells,
    node.taints.length ? el("span", { class: "taints" }, `tainted ${node.taints.join(", ")}`) : null);
}

function move(event) {
  const steps = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: 8, ArrowUp: -8 };
  if (event.key === "Enter" && event.target.dataset.job) {
    location.hash = jobLink(event.target.dataset.job).getAttribute("href");
    return;
  }
  if (!(event.key in steps)) return;
  const all = [...event.currentTarget.children];
  const next = all[all.indexOf(event.target) + steps[event.key]];
  if (next) {
    event.preventDefault();
    event.target.setAttribute("tabindex", "-1");
    next.setAttribute("tabindex", "0");
    next.focus();
  }
}

function tip(event) {
  const text = event.target.dataset && event.target.dataset.tip;
  const box = document.getElementById("tip");
  if (!text) return;
  box.textContent = text;
  box.hidden = false;
  const at = event.target.getBoundingClientRect();
  box.style.left = `${Math.min(at.left, window.innerWidth - 300)}px`;
  box.style.top = `${at.bottom + 6}px`;
}

function hideTip() {
  document.getElementById("tip").hidden = true;
}
