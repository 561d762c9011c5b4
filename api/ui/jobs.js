// Jobs: the latest jobs, and one job with its spec, placement, history and log commands.
import { api } from "./app.js";
import { el, table, jobHref, jobLink, when, duration } from "./dom.js";

export const topics = ["jobs"];

export async function render(args) {
  return args.length >= 2 ? detail(args[0], args[1]) : list();
}

async function list() {
  const page = await api("/v1/jobs?limit=100");
  const input = el("input", { id: "job-key", placeholder: "namespace/name", required: "" });
  const form = el("form", { "aria-label": "Open a job" },
    el("label", { for: "job-key" }, "Open job "), input, " ", el("button", { type: "submit" }, "Open"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const [namespace, name] = input.value.trim().split("/");
    if (namespace && name) location.hash = jobHref(`${namespace}/${name}`);
  });
  return el("section", { "aria-labelledby": "jobs-title" },
    el("h1", { id: "jobs-title" }, "Jobs"), form,
    table(`Latest ${page.items.length} of ${page.total} jobs you may read`,
      ["Job", "Tenant", "Tier", "Gang", "Phase", "Submitted", "Why"],
      page.items.map((j) => [
        el("span", {}, jobLink(`${j.namespace}/${j.name}`), j.scaleUp
          ? el("span", { class: "muted" }, ` scale-up of ${j.scaleUp.job}: ${replicaRange(j)}`)
          : ""),
        j.tenant, j.tier, `${j.replicas} × ${j.devicesPerReplica}`, j.phase, when(j.submittedAt),
        j.reason ? j.reason.message : ""])));
}

async function detail(namespace, name) {
  let body;
  try {
    body = await api(`/v1/jobs/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`);
  } catch (failure) {
    if (failure.status === 404) {
      return el("section", {}, el("h1", {}, `${namespace}/${name}`),
        el("p", { class: "error", role: "alert" }, failure.message));
    }
    throw failure;
  }
  const job = body.job;
  const p = body.prediction || {};
  const scaleUps = body.scaleUps || [];
  const live = scaleUps.filter((g) => !FINISHED.includes(g.job.phase));
  const added = live.reduce((sum, g) => sum + g.job.replicas, 0);
  const jobName = job.scaleUp ? job.scaleUp.job : job.name;
  const first = job.scaleUp ? job.scaleUp.firstReplica : 0;
  const root = el("section", { "aria-labelledby": "job-title" },
    el("h1", { id: "job-title" }, job.scaleUp
      ? `Scale-up gang ${job.namespace}/${job.name}` : `Job ${job.namespace}/${job.name}`),
    job.scaleUp ? el("p", {}, `It adds ${replicaRange(job)} to job `,
      jobLink(`${job.namespace}/${jobName}`), " as a gang of its own.") : "",
    el("dl", { class: "spec" },
      ...pair("Phase", job.phase + (job.evictBy
        ? ` (checkpoint requested at ${when(job.checkpointRequestedAt)}, ` +
          `${job.shrinkingTo == null ? "evicting" : `shrinking to ${job.shrinkingTo} replicas`} ` +
          `by ${when(job.evictBy)})`
        : job.evicting && job.shrinkingTo == null ? " (being evicted)" : "")),
      ...pair("Tenant / tier", `${job.tenant} / ${job.tier} (priority ${job.priority})`),
      ...pair("Gang", `${job.replicas} replicas × ${job.devicesPerReplica} ${job.deviceClassName}` +
        (added ? ` (+ ${added} in scale-up gangs)` : "")),
      ...pair("Size", size(job)),
      ...pair("Why it waits", job.reason ? job.reason.message : "—"),
      ...pair("Queue position", job.queuePosition ?? "—"),
      ...pair("Reserved start", job.reservedStartAt
        ? `${when(job.reservedStartAt)} (in ${duration(job.etaSeconds)}) on ` +
          `${(job.reservedNodes || []).join(", ")}` : "—"),
      ...pair("Submitted / admitted / started / finished",
        [job.submittedAt, job.admittedAt, job.startedAt, job.finishedAt].map(when).join(" / ")),
      ...pair("Attempts, preemptions, restarts",
        `${job.attempts}, ${job.preemptions}, ${job.restarts}`),
      ...pair("Borrowed devices", job.borrowed),
      ...pair("Predicted runtime", duration(p.runtimeSeconds)),
      ...pair("Lost by an eviction now", p.lostWorkDeviceSeconds == null ? "—"
        : `${(p.lostWorkDeviceSeconds / 3600).toFixed(2)} device-h`),
    ));
  root.append(el("h2", {}, "Placement"));
  root.append(...placement(body, live));
  if (scaleUps.length) {
    root.append(el("h2", {}, "Scale-up gangs"));
    root.append(table("Replicas added while it ran, each admitted as a gang of its own",
      ["Gang", "Replicas", "Phase", "Submitted", "Admitted", "Finished", "Why"],
      scaleUps.map(({ job: g }) => [g.name, replicaRange(g), g.phase, when(g.submittedAt),
        when(g.admittedAt), when(g.finishedAt), g.reason ? g.reason.message : ""])));
  }
  const groups = body.podGroups || [];
  if (groups.length) {
    root.append(el("h2", {}, "Pod groups"));
    root.append(table("kube-scheduler binds each group's pods together, or none of them",
      ["Pod group", "Min count", "Scheduled", "Since", "Message"],
      groups.map((g) => [el("code", {}, g.name), g.minCount, g.scheduled, when(g.since),
        g.message || g.reason || "—"])));
  }
  root.append(el("h2", {}, "Logs"));
  const last = Math.max(first + (job.size ?? job.replicas),
    ...live.map((g) => g.job.scaleUp.firstReplica + g.job.replicas));
  const replicas = [...Array(Math.max(last - first, 1)).keys()].map((i) => first + i);
  root.append(el("pre", { "aria-label": "Commands for the logs of its pods" },
    replicas.map((i) =>
      `kubectl logs -n ${job.namespace} ${jobName}-${i}\n` +
      `gangq logs ${job.namespace}/${jobName} --replica ${i}\n`).join("")));
  root.append(el("h2", {}, "History"));
  const entries = [
    ...body.history.map((e) => ({ e, gang: null, offset: first })),
    ...scaleUps.flatMap((g) => g.history.map((e) =>
      ({ e, gang: g.job.name, offset: g.job.scaleUp.firstReplica }))),
  ].sort((a, b) => Date.parse(a.e.at) - Date.parse(b.e.at));
  root.append(el("ol", { class: "timeline", "aria-label": "History, oldest first" },
    entries.map(({ e, gang, offset }) => el("li", { class: e.kind },
      el("strong", {}, e.kind), " ", el("time", { datetime: e.at }, when(e.at)),
      gang ? el("span", {}, ` of scale-up gang ${gang}`) : "",
      e.actor ? el("span", { class: "muted" }, ` by ${e.actor}`) : "",
      e.reason ? el("div", {}, e.reason) : "",
      details(e.details, offset)))));
  return root;
}

const FINISHED = ["Succeeded", "Failed"];

// The replicas it holds devices for of the most it runs at, an elastic job's range and the size
// it is growing or shrinking to (PRODUCT rule 13): the same words as `gangq job`.
function size(job) {
  const placed = job.size == null ? "—" : `${job.size}/${job.maxReplicas} replicas`;
  const range = job.minReplicas < job.maxReplicas
    ? `${placed} (elastic, ${job.minReplicas} to ${job.maxReplicas})` : placed;
  if (job.growingTo != null) return `${range}, growing to ${job.growingTo}`;
  return job.shrinkingTo == null ? range : `${range}, shrinking to ${job.shrinkingTo}`;
}

function replicaRange(job) {
  const first = job.scaleUp ? job.scaleUp.firstReplica : 0;
  const last = first + job.replicas - 1;
  return last > first ? `replicas ${first}–${last}` : `replica ${first}`;
}

// The devices the job holds now, its own gang's and its scale-up gangs' together; when it
// holds none, where its last attempt ran (a finished job's answer to "where did it run").
function placement(body, live) {
  const held = [body, ...live].flatMap((gang) =>
    gang.placement.map((r) => ({ r, gang: gang === body ? "" : gang.job.name })));
  if (held.length) {
    held.sort((a, b) => a.r.replica - b.r.replica);
    const withGang = live.length > 0;
    return [table("Replicas and the devices they hold",
      ["Replica", "Node", "Devices", ...(withGang ? ["Gang"] : [])],
      held.map(({ r, gang }) => [r.replica, r.node, el("code", {}, r.devices.join(" ")),
        ...(withGang ? [gang ? `scale-up ${gang}` : "the job's own"] : [])]))];
  }
  const ran = body.lastPlacement || [];
  if (!ran.length) return [el("p", { class: "muted" }, "Holds no devices now, and never held any.")];
  const nodes = [...new Set(ran.map((r) => r.node))];
  return [
    el("p", {}, `Holds no devices now. Its last attempt ran on ${nodes.join(", ")} ` +
      `(${ran.reduce((sum, r) => sum + r.devices.length, 0)} devices):`),
    table("Where its last attempt ran: replicas and the devices they held",
      ["Replica", "Node", "Devices"],
      ran.map((r) => [r.replica, r.node, el("code", {}, r.devices.join(" "))])),
  ];
}

function pair(term, value) {
  return [el("dt", {}, term), el("dd", {}, value)];
}

// `first`: an admission records a scale-up gang's replicas from 0; its job counts them from
// the gang's first replica, as the placement tables and the pods' names do.
function details(values, first) {
  const entries = Object.entries(values || {});
  if (!entries.length) return "";
  return el("div", { class: "muted mono" },
    entries.map(([k, v]) => `${k}: ${shown(k, v, first)}`).join(" · "));
}

function shown(key, value, first) {
  if (key === "placement" && Array.isArray(value)) {
    return value.map((r) =>
      `replica ${first + r.replica} on ${r.node} (${r.devices.length} devices)`).join("; ");
  }
  return typeof value === "object" ? JSON.stringify(value) : value;
}
