// Queue page: per tier and tenant, the queued jobs in order, why each waits and what is ahead;
// then a timeline of the starts that backfill reservations hold.
import { api } from "./app.js";
import { el, table, jobLink, when, duration } from "./dom.js";

export const topics = ["jobs"];

export async function render() {
  const page = await api("/v1/queues/pending");
  const root = el("section", { "aria-labelledby": "queue-title" },
    el("h1", { id: "queue-title" }, "Queue"),
    el("p", {}, `${page.total} queued job${page.total === 1 ? "" : "s"} you may read` +
      (page.items.length < page.total ? `; the first ${page.items.length} are listed.` : ".")));
  const byTier = new Map();
  for (const item of page.items) {
    const tier = item.job.tier;
    if (!byTier.has(tier)) byTier.set(tier, new Map());
    const byTenant = byTier.get(tier);
    if (!byTenant.has(item.job.tenant)) byTenant.set(item.job.tenant, []);
    byTenant.get(item.job.tenant).push(item);
  }
  if (!page.items.length) root.append(el("p", { class: "muted" }, "Nothing is waiting."));
  for (const [tier, byTenant] of byTier) {
    root.append(el("h2", {}, `Tier ${tier}`));
    for (const [tenant, items] of [...byTenant].sort()) {
      root.append(table(`${tenant}: ${items.length} waiting`, [
        { label: "Position", num: true }, "Job", "Gang", "Why it waits", "Reserved start / ETA",
        "Ahead of it",
      ], items.map(row)));
    }
  }
  root.append(timeline(page.items));
  return root;
}

function row(item) {
  const job = item.job;
  const start = job.reservedStartAt
    ? `${when(job.reservedStartAt)} (in ${duration(job.etaSeconds)}) on ${nodes(job.reservedNodes)}`
    : "—";
  const ahead = item.ahead === 0 ? "none: next in its device class"
    : el("span", {}, `${item.ahead}: `, ...item.blockers.flatMap((key, i) =>
      [i ? ", " : "", key.includes("/") ? jobLink(key) : key]),
    item.ahead > item.blockers.length ? ", …" : "");
  return [
    job.queuePosition ?? "—",
    jobLink(`${job.namespace}/${job.name}`),
    `${job.replicas} × ${job.devicesPerReplica} ${job.deviceClassName}`,
    job.reason ? job.reason.message : "not ranked yet",
    start,
    ahead,
  ];
}

function nodes(names) {
  if (!names || !names.length) return "nodes not named";
  return names.length > 6 ? `${names.slice(0, 6).join(", ")} and ${names.length - 6} more`
    : names.join(", ");
}

function timeline(items) {
  const held = items.filter((i) => i.job.reservedStartAt)
    .sort((a, b) => a.job.etaSeconds - b.job.etaSeconds);
  const section = el("section", { "aria-labelledby": "timeline-title" },
    el("h2", { id: "timeline-title" }, "Backfill reservations"));
  if (!held.length) {
    section.append(el("p", { class: "muted" }, "No reservation is held now."));
    return section;
  }
  const horizon = Math.max(...held.map((i) => i.job.etaSeconds), 60);
  const grid = el("div", { class: "gantt", role: "list" });
  for (const item of held) {
    const job = item.job;
    const mark = el("span", { "aria-hidden": "true" });
    mark.style.setProperty("--l", `calc(${(100 * job.etaSeconds) / horizon}% - .6rem)`);
    grid.append(
      el("div", { role: "listitem" }, jobLink(`${job.namespace}/${job.name}`),
        ` ${job.replicas} × ${job.devicesPerReplica}: starts ${when(job.reservedStartAt)}` +
        ` (in ${duration(job.etaSeconds)})`,
        el("div", { class: "muted" }, `on ${nodes(job.reservedNodes)}`)),
      el("div", { class: "track", "aria-hidden": "true" }, mark));
  }
  section.append(el("p", { class: "muted" }, `now → ${duration(horizon)} from now`), grid);
  return section;
}
