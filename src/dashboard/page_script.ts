/**
 * The dashboard page's script, as text the page inlines (the page loads nothing else, from
 * anywhere: no CDN, no second request).
 *
 * What it does, in order:
 * 1. **Login.** The client token is kept in `sessionStorage` for the tab (per app path), asked
 *    for with a password field when missing, refused (401), expired or revoked.
 * 2. **Live stream.** `fetch` of `GET <base>/events` with `Authorization: Bearer <token>`, its
 *    body read as server-sent events by hand (an `EventSource` cannot send a header, and a
 *    token in a URL ends up in access logs). On a drop it reconnects with backoff (1 s doubling
 *    to 30 s); on `end` (expired, revoked) it asks for a new token.
 * 3. **Rendering** every `snapshot`: counts, a throughput chart drawn as SVG polylines, the
 *    workers, recent failures and dead letters. Rows are updated in place, keyed by name or
 *    MessageID, and every text goes through `textContent` (nothing the server sends is parsed
 *    as HTML).
 * 4. **Retry buttons** call `POST <base>/dead-letters/:id/retry` with the same token; the
 *    **pause button** of a job queue calls `POST <base>/pause` or `POST <base>/resume`.
 *
 * It is plain ES2020 for evergreen browsers; the Chromium test (`tests/dashboard_browser`)
 * drives it.
 *
 * @module
 */

/** The script (run with the page's nonce; `document.body.dataset.base` is the app's path). */
export const DASHBOARD_SCRIPT = String.raw`
(() => {
  "use strict";
  const base = document.body.dataset.base || "";
  const KEY = "workpull.token:" + (base || "/");
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(KEY);
  let live;
  let retryTimer;
  let retryDelay = 1000;
  const retried = new Set();
  const buttons = new Map();

  const number = (n) => (n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  const ago = (ms) => ms < 1000 ? "now" : ms < 60000 ? Math.round(ms / 1000) + " s ago"
    : ms < 3600000 ? Math.round(ms / 60000) + " min ago" : Math.round(ms / 3600000) + " h ago";
  const clock = (at) => new Date(at).toLocaleTimeString("en-GB");
  // A date and time, for what may be days away (a schedule's next run).
  const when = (at) => new Date(at).toLocaleString("en-GB");

  function setLive(state, text) {
    const badge = $("live");
    badge.textContent = text;
    badge.className = "badge " + state;
  }

  function showLogin(message) {
    stop();
    $("board").hidden = true;
    $("logout").hidden = true;
    $("pause").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    setLive("off", "signed out");
    $("token").focus();
  }

  function logout(message) {
    sessionStorage.removeItem(KEY);
    token = null;
    showLogin(message);
  }

  function stop() {
    if (live) live.abort();
    live = undefined;
    clearTimeout(retryTimer);
  }

  function start() {
    stop();
    $("login").hidden = true;
    $("board").hidden = false;
    $("logout").hidden = false;
    connect();
  }

  async function connect() {
    const abort = new AbortController();
    live = abort;
    setLive("wait", "connecting");
    try {
      const response = await fetch(base + "/events", {
        headers: { authorization: "Bearer " + token, accept: "text/event-stream" },
        cache: "no-store",
        signal: abort.signal,
      });
      if (response.status === 401) {
        const body = await response.json().catch(() => ({}));
        return logout("The token was refused (" + (body.reason || "unauthorized") + ").");
      }
      if (!response.ok || !response.body) throw new Error("HTTP " + response.status);
      retryDelay = 1000;
      setLive("on", "live");
      await readEvents(response.body);
    } catch (error) {
      if (abort.signal.aborted) return;
    }
    if (abort.signal.aborted || live !== abort) return;
    setLive("wait", "reconnecting");
    retryTimer = setTimeout(connect, retryDelay);
    retryDelay = Math.min(retryDelay * 2, 30000);
  }

  async function readEvents(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      if (buffer.length > 8 * 1024 * 1024) throw new Error("an event is too large");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let event = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length === 0) continue;
        const payload = JSON.parse(data.join("\n"));
        if (event === "snapshot") render(payload);
        else if (event === "end") return ended(payload.reason);
      }
    }
  }

  function ended(reason) {
    if (reason === "expired") logout("The token expired: enter a new one.");
    else if (reason === "revoked") logout("The token is no longer valid: enter a new one.");
    else if (reason === "closed") setLive("off", "flow closed");
  }

  function cells(tr, values) {
    while (tr.cells.length < values.length) tr.insertCell();
    while (tr.cells.length > values.length) tr.deleteCell(-1);
    values.forEach((value, i) => {
      const td = tr.cells[i];
      if (value instanceof Node) {
        if (td.firstChild !== value) td.replaceChildren(value);
      } else if (td.textContent !== String(value)) {
        td.textContent = String(value);
        td.title = String(value); // the whole text where an ellipsis cuts it
      }
    });
  }

  /** Update a table body in place: one row per item, keyed, in order. */
  function syncRows(tbody, items, keyOf, fill, empty) {
    const existing = new Map();
    for (const tr of Array.from(tbody.rows)) existing.set(tr.dataset.key, tr);
    let previous = null;
    const rows = items.length === 0 ? [{ empty }] : items;
    for (const item of rows) {
      const key = item.empty === undefined ? "k:" + keyOf(item) : "empty";
      let tr = existing.get(key);
      if (tr) existing.delete(key);
      else {
        tr = document.createElement("tr");
        tr.dataset.key = key;
        if (item.empty !== undefined) tr.className = "empty";
      }
      if (item.empty === undefined) fill(tr, item);
      else {
        cells(tr, [item.empty]);
        tr.cells[0].colSpan = 9;
      }
      const next = previous ? previous.nextSibling : tbody.firstChild;
      if (tr !== next) tbody.insertBefore(tr, next);
      previous = tr;
    }
    for (const tr of existing.values()) tr.remove();
  }

  function render(s) {
    $("flow").textContent = s.flow;
    const state = $("state");
    // A paused job queue runs, but starts no new try: say so where the state is.
    state.textContent = s.paused ? s.state + ", paused" : s.state;
    state.className = "badge " + (s.state === "running" && !s.paused ? "on" : "off");
    const pause = $("pause");
    pause.hidden = s.paused === undefined; // a plain controller has no pause
    if (!pausing) pause.textContent = s.paused ? "Resume" : "Pause";
    pause.dataset.paused = String(Boolean(s.paused));
    const counts = s.counts;
    for (const name of ["waiting", "scheduled", "retrying", "active", "dead", "pending", "inFlight"]) {
      const card = $("count-" + name);
      card.hidden = counts[name] === undefined;
      card.querySelector(".value").textContent = number(counts[name]);
    }
    $("count-workers").querySelector(".value").textContent = number(
      s.workers.filter((w) => w.connected).length,
    );
    const t = s.totals;
    $("totals").textContent = "Since start: " + number(t.submitted) + " submitted · " +
      number(t.completed) + " completed · " + number(t.failed) + " failed tries · " +
      (s.deadLetters ? number(t.dead) + " dead · " : "") + number(t.requeued) + " requeued";
    drawChart(s.rate);
    $("worker-count").textContent = s.workerCount > s.workers.length
      ? "(" + s.workers.length + " of " + s.workerCount + " shown)" : "";
    syncRows($("workers").tBodies[0], s.workers, (w) => w.name, (tr, w) => {
      tr.className = w.connected ? "" : "gone";
      cells(tr, [
        w.name,
        w.runtime || "unknown",
        number(w.window),
        number(w.inFlight),
        number(w.confirmed),
        w.lastSeen === undefined ? "disconnected" : ago(Math.max(0, s.at - w.lastSeen)),
      ]);
    }, "No worker connected.");
    // Schedules: shown once a job queue has one.
    $("schedules-panel").hidden = !s.schedules || s.schedules.length === 0;
    if (s.schedules && s.schedules.length > 0) {
      syncRows($("schedules").tBodies[0], s.schedules, (r) => r.key, (tr, r) => {
        cells(tr, [r.key, r.rule, r.next === undefined ? "" : when(r.next)]);
      }, "");
    }
    $("failures-panel").hidden = s.failures === undefined;
    $("dead-panel").hidden = s.deadLetters === undefined;
    if (s.failures) {
      syncRows($("failures").tBodies[0], s.failures, (f) => f.id + "@" + f.at + "#" + f.attempt,
        (tr, f) => {
          tr.className = f.state;
          cells(tr, [clock(f.at), f.id, String(f.attempt), f.state, f.worker || "",
            f.error ? f.error.name + ": " + f.error.message : ""]);
        }, "No failure yet.");
    }
    if (s.deadLetters) {
      $("dead-count").textContent = counts.dead > s.deadLetters.length
        ? "(oldest " + s.deadLetters.length + " of " + number(counts.dead) + ")" : "";
      const shown = new Set(s.deadLetters.map((d) => d.id));
      for (const id of Array.from(buttons.keys())) if (!shown.has(id)) buttons.delete(id);
      for (const id of Array.from(retried)) if (!shown.has(id)) retried.delete(id);
      syncRows($("dead").tBodies[0], s.deadLetters, (d) => d.id, (tr, d) => {
        cells(tr, [d.id, String(d.attempts), d.error ? d.error.name + ": " + d.error.message : "",
          d.finishedAt ? clock(d.finishedAt) : "", retryButton(d.id)]);
      }, "No dead letter.");
    }
  }

  function retryButton(id) {
    let button = buttons.get(id);
    if (!button) {
      button = document.createElement("button");
      button.type = "button";
      button.className = "retry";
      button.dataset.id = id;
      button.textContent = "Retry";
      button.addEventListener("click", () => retry(id, button));
      buttons.set(id, button);
    }
    if (retried.has(id)) {
      button.disabled = true;
      button.textContent = "Retried";
    }
    return button;
  }

  async function retry(id, button) {
    button.disabled = true;
    button.textContent = "Retrying";
    let response;
    try {
      response = await fetch(base + "/dead-letters/" + encodeURIComponent(id) + "/retry", {
        method: "POST",
        headers: { authorization: "Bearer " + token },
      });
    } catch (error) {
      response = undefined;
    }
    if (response && response.status === 401) return logout("The token was refused.");
    if (response && response.ok) {
      retried.add(id);
      button.textContent = "Retried";
      return;
    }
    button.disabled = false;
    button.textContent = "Retry";
    $("notice").textContent = "Retrying " + id + " failed" +
      (response ? " (HTTP " + response.status + ")" : "") + ".";
  }

  let pausing = false;

  async function togglePause() {
    const button = $("pause");
    const resume = button.dataset.paused === "true";
    pausing = true;
    button.disabled = true;
    let response;
    try {
      response = await fetch(base + (resume ? "/resume" : "/pause"), {
        method: "POST",
        headers: { authorization: "Bearer " + token },
      });
    } catch (error) {
      response = undefined;
    }
    pausing = false;
    button.disabled = false;
    if (response && response.status === 401) return logout("The token was refused.");
    if (response && response.ok) {
      const body = await response.json();
      button.dataset.paused = String(body.paused);
      button.textContent = body.paused ? "Resume" : "Pause";
      return;
    }
    $("notice").textContent = (resume ? "Resuming" : "Pausing") + " failed" +
      (response ? " (HTTP " + response.status + ")" : "") + ".";
  }

  function svg(name, attributes, text) {
    const element = document.createElementNS(SVG, name);
    for (const key in attributes) element.setAttribute(key, attributes[key]);
    if (text !== undefined) element.textContent = text;
    return element;
  }

  function niceCeiling(value) {
    if (value <= 1) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
    return 10 * power;
  }

  function drawChart(rate) {
    const chart = $("chart");
    // One unit a pixel, so the labels keep their size whatever the width.
    const W = Math.max(320, Math.round(chart.clientWidth || 640)), H = 190;
    const L = 48, R = 12, T = 10, B = 24;
    chart.setAttribute("viewBox", "0 0 " + W + " " + H);
    const series = [["submitted", "s-submitted"], ["completed", "s-completed"], ["failed", "s-failed"]];
    let max = 0;
    for (const [key] of series) for (const v of rate.values[key]) if (v > max) max = v;
    const top = niceCeiling(max);
    const n = rate.seconds;
    const x = (i) => L + (W - L - R) * (i / (n - 1));
    const y = (v) => T + (H - T - B) * (1 - v / top);
    const parts = [];
    for (const f of [0, 0.5, 1]) {
      parts.push(svg("line", { x1: L, x2: W - R, y1: y(top * f), y2: y(top * f), class: "grid" }));
      parts.push(svg("text", { x: L - 6, y: y(top * f) + 4, class: "axis", "text-anchor": "end" },
        number(Math.round(top * f * 100) / 100)));
    }
    const minutes = Math.round(n / 60);
    for (let m = 0; m <= minutes; m++) {
      const i = n - 1 - m * 60;
      if (i < 0) break;
      parts.push(svg("text", { x: x(i), y: H - 6, class: "axis", "text-anchor": m === 0 ? "end" : "middle" },
        m === 0 ? "now" : "−" + m + " min"));
    }
    for (const [key, css] of series) {
      const points = rate.values[key].map((v, i) => x(i).toFixed(1) + "," + y(v).toFixed(1));
      parts.push(svg("polyline", { points: points.join(" "), class: "line " + css }));
      const recent = rate.values[key].slice(-10);
      const average = recent.reduce((a, b) => a + b, 0) / recent.length;
      $("rate-" + key).textContent = number(Math.round(average * 10) / 10) + "/s";
    }
    chart.replaceChildren(...parts);
  }

  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("token").value.trim();
    if (!value) return;
    token = value;
    sessionStorage.setItem(KEY, value);
    $("token").value = "";
    start();
  });
  $("logout").addEventListener("click", () => logout(""));
  $("pause").addEventListener("click", togglePause);
  if (token) start();
  else showLogin("");
})();
`;
