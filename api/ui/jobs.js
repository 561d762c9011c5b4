// Jobs: the latest jobs, and one job with its spec, placement, history and log commands.
import { api } from "./app.js";
import { el, table, jobLink, when, duration } from "./dom.js";

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
    if (namespace && name) location.hash = `#/jobs/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`;
  });
  return el("section", { "aria-labelledby": "jobs-title" },
    el("h1", { id: "jobs-title" }, "Jobs"), form,
    table(`Latest ${page.items.length} of ${page.total} jobs you may read`,
      ["Job", "Tenant", "Tier", "Gang", "Phase", "Submitted", "Why"],
      page.items.map((j) => [jobLink(`${j.namespace}/${j.name}`), j.tenant, j.tier,
        `${j.replicas} × ${j.devicesPerReplica}`, j.phase, when(j.submittedAt),
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
  const root = el("section", { "aria-labelledby": "job-title" },
    el("h1", { id: "job-title" }, `Job ${job.namespace}/${job.name}`),
    el("dl", { class: "spec" },
      ...pair("Phase", job.phase + (job.evicting ? " (being evicted)" : "")),
      ...pair("Tenant / tier", `${job.tenant} / ${job.tier} (priority ${job.priority})`),
      ...pair("Gang", `${job.replicas} replicas × ${job.devicesPerReplica} ${job.deviceClassName}`),
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
  root.append(body.placement.length
    ? table("Replicas and their devices", ["Replica", "Node", "Devices"],
      body.placement.map((r) => [r.replica, r.node, el("code", {}, r.devices.join(" "))]))
    : el("p", { class: "muted" }, "Holds no devices now."));
  root.append(el("h2", {}, "Logs"));
  const replicas = Math.max(job.replicas, 1);
  root.append(el("pre", { "aria-label": "Commands for the logs of its pods" },
    [...Array(replicas).keys()].map((i) =>
      `kubectl logs -n ${job.namespace} ${job.name}-${i}\n` +
      `gangq logs ${job.namespace}/${job.name} --replica ${i}\n`).join("")));
  root.append(el("h2", {}, "History"));
  root.append(el("ol", { class: "timeline", "aria-label": "History, oldest first" },
    body.history.map((e) => el("li", { class: e.kind },
      el("strong", {}, e.kind), " ", el("time", { datetime: e.at }, when(e.at)),
      e.actor ? el("span", { class: "muted" }, ` by ${e.actor}`) : "",
      e.reason ? el("div", {}, e.reason) : "",
      details(e.details)))));
  return root;
}

function pair(term, value) {
  return [el("dt", {}, term), el("dd", {}, value)];
}

function details(values) {
  const entries = Object.entries(values || {});
  if (!entries.length) return "";
  return el("div", { class: "muted mono" }, entries.map(([k, v]) => `${k}: ${shown(k, v)}`)
    .join(" · "));
}

function shown(key, value) {
  if (key === "placement" && Array.isArray(value)) {
    return value.map((r) => `replica ${r.replica} on ${r.node} (${r.devices.length} devices)`)
      .join("; ");
  }
  return typeof value === "object" ? JSON.stringify(value) : value;
}
