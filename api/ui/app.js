// The shell of the web UI: sign-in, hash routing, authenticated JSON requests and the live
// stream. The token lives only in this tab's session storage and travels only in the
// Authorization header, never in a URL.
import * as cluster from "./cluster.js";
import * as queue from "./queue.js";
import * as jobs from "./jobs.js";
import * as tenants from "./tenants.js";
import { el, clear } from "./dom.js";

const TOKEN_KEY = "gangq.token";
const PAGES = { cluster, queue, jobs, tenants };
const main = document.getElementById("main");
const liveLabel = document.getElementById("live");
let current = null;
let stream = null;

export class Unauthorized extends Error {}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export async function api(path) {
  const answer = await fetch(path, { headers: { Authorization: `Bearer ${token()}` } });
  if (answer.status === 401) {
    signOut("Your token is unknown or expired: sign in again.");
    throw new Unauthorized();
  }
  const body = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    const error = new Error(problem(answer.status, body.detail));
    error.status = answer.status;
    throw error;
  }
  return body;
}

// The API's errors say what is wrong in `detail`: a sentence, or (FastAPI's 422) a list of
// {loc, msg} objects, one per refused field. A body without one (a proxy's page) is named by
// its status alone.
function problem(status, detail) {
  if (typeof detail === "string" && detail) return detail;
  if (Array.isArray(detail) && detail.length) {
    return detail.map((item) => {
      if (!item || typeof item !== "object") return String(item);
      const where = Array.isArray(item.loc) ? item.loc.join(" ") : "";
      return where ? `${where}: ${item.msg}` : String(item.msg);
    }).join("; ");
  }
  return `HTTP ${status}`;
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (stream) stream.abort();
  stream = null;
  showLogin(message);
}

function showLogin(message) {
  document.getElementById("logout").hidden = true;
  document.getElementById("who").textContent = "";
  liveLabel.textContent = "offline";
  clear(main);
  const input = el("input", {
    id: "token", type: "password", autocomplete: "off", required: "", spellcheck: "false",
  });
  const error = el("p", { id: "login-error", class: "error", role: "alert" }, message || "");
  const form = el("form", { class: "login", "aria-labelledby": "login-title" },
    el("h1", { id: "login-title" }, "Sign in to gangq"),
    el("label", { for: "token" }, "Bearer token (from the token file, or a Kubernetes token)"),
    input,
    el("button", { type: "submit" }, "Sign in"),
    error,
    el("p", { class: "muted" }, "The token is kept in this tab only and sent in a header."),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    try {
      await api("/v1/queues");
    } catch (failure) {
      if (!(failure instanceof Unauthorized)) {
        sessionStorage.removeItem(TOKEN_KEY);
        error.textContent = failure.message;
      }
      return;
    }
    input.value = "";
    start();
  });
  main.append(form);
  input.focus();
}

function route() {
  const [name, ...rest] = (location.hash.replace(/^#\/?/, "") || "cluster").split("/");
  const page = PAGES[name] ? name : "cluster";
  return { page, args: rest.map(decodeURIComponent) };
}

async function show() {
  if (!token()) return showLogin();
  const { page, args } = route();
  for (const link of document.querySelectorAll("header nav a")) {
    if (link.getAttribute("href") === `#/${page}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  current = { page, args, module: PAGES[page] };
  await draw(true);
}

async function draw(first) {
  const view = current;
  try {
    const node = await view.module.render(view.args);
    if (view !== current) return;
    clear(main);
    main.append(node);
    main.dataset.page = view.page;
    main.dataset.drawn = String(Number(main.dataset.drawn || 0) + 1);
    if (first) main.focus({ preventScroll: true });
  } catch (failure) {
    if (failure instanceof Unauthorized) return;
    clear(main);
    main.append(el("p", { class: "error", role: "alert" }, failure.message));
    main.dataset.drawn = String(Number(main.dataset.drawn || 0) + 1);
  }
}

async function follow(controller) {
  // Server-sent events read with fetch, so that the token goes in a header.
  const answer = await fetch("/v1/stream", {
    headers: { Authorization: `Bearer ${token()}`, Accept: "text/event-stream" },
    signal: controller.signal,
  });
  if (answer.status === 401) return signOut("Your token is unknown or expired: sign in again.");
  if (!answer.ok) throw new Error(`stream HTTP ${answer.status}`);
  liveLabel.textContent = "live";
  const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const lines = block.split("\n");
      const kind = (lines.find((l) => l.startsWith("event: ")) || "").slice(7);
      const data = (lines.find((l) => l.startsWith("data: ")) || "").slice(6);
      if (kind === "change") changed(JSON.parse(data));
      if (kind === "ready") document.getElementById("who").textContent = JSON.parse(data);
    }
  }
}

function changed(topics) {
  document.body.dataset.changes = String(Number(document.body.dataset.changes || 0) + 1);
  liveLabel.textContent = `live · updated ${new Date().toLocaleTimeString()}`;
  if (current && current.module.topics.some((topic) => topics.includes(topic))) draw(false);
}

async function live() {
  while (token()) {
    const controller = new AbortController();
    stream = controller;
    try {
      await follow(controller);
    } catch (failure) {
      if (controller.signal.aborted) return;
    }
    liveLabel.textContent = "reconnecting";
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function start() {
  const logout = document.getElementById("logout");
  logout.hidden = false;
  api("/v1/queues").catch(() => {});
  if (!stream) live();
  show();
}

document.getElementById("logout").addEventListener("click", () => signOut("Signed out."));
window.addEventListener("hashchange", () => token() && show());
if (token()) start(); else showLogin();
