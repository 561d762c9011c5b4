// Tenants page: quotas against use, device-hours, and the preemption ledger.
import { api } from "./app.js";
import { el, table } from "./dom.js";

export const topics = ["jobs"];

export async function render() {
  const report = await api("/v1/usage");
  const root = el("section", { "aria-labelledby": "tenants-title" },
    el("h1", { id: "tenants-title" }, "Tenants"));
  const num = (label) => ({ label, num: true });
  root.append(table("Quotas and use per device class", [
    "Tenant", "Device class", num("Nominal"), num("Borrowing limit"), num("In use"),
    num("Borrowed"), num("Waiting jobs"), num("Waiting devices"),
  ], report.tenants.flatMap((t) => t.deviceClasses.map((c) => [
    t.name, c.deviceClassName, c.nominal, c.borrowingLimit, c.inUse, c.borrowed, c.waitingJobs,
    c.waitingDevices,
  ]))));
  root.append(table("Device-hours used", ["Tenant", num("Last 24 h"), num("Last 7 days")],
    report.tenants.map((t) => [t.name, t.deviceHoursLastDay.toFixed(2), t.deviceHoursLastWeek.toFixed(2)])));
  root.append(el("h2", {}, "Preemption ledger (last 7 days)"));
  root.append(report.ledger.length ? table("Evictions suffered and caused", [
    "Evicted tenant", "Evicted tier", "For tenant", "For tier", num("Evictions"),
    num("Shrinks"), num("Device-hours lost"),
  ], report.ledger.map((r) => [
    r.victimTenant ?? "another tenant", r.victimTier, r.byTenant ?? "another tenant",
    r.byTier ?? "—", r.evictions, r.shrinks, r.lostDeviceHours.toFixed(3),
  ])) : el("p", { class: "muted" }, "No eviction in the last 7 days."));
  return root;
}
