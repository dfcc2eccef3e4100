/**
 * The dashboard page: one self-contained HTML document with its style and script inline (the
 * script is `page_script.ts`), about 20 KB, loading nothing from anywhere.
 *
 * The page itself holds no data and needs no credential; everything it shows comes over the
 * authenticated live stream. It is served with a strict Content-Security-Policy: only the
 * inline script and style carrying this response's nonce run, the page may only talk to its
 * own origin, and it cannot be framed.
 *
 * @module
 */

import { DASHBOARD_SCRIPT } from "./page_script.ts";

const STYLE = `
:root { color-scheme: light dark; --bg: #f6f8fa; --panel: #fff; --text: #1f2328; --muted: #636c76;
  --line: #d0d7de; --green: #1a7f37; --red: #cf222e; --blue: #0969da; --amber: #9a6700; }
@media (prefers-color-scheme: dark) { :root { --bg: #0d1117; --panel: #161b22; --text: #e6edf3;
  --muted: #8d96a0; --line: #30363d; --green: #3fb950; --red: #f85149; --blue: #4493f8;
  --amber: #d29922; } }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  background: var(--bg); color: var(--text); }
header { display: flex; align-items: center; gap: 10px; padding: 12px 20px;
  border-bottom: 1px solid var(--line); background: var(--panel); }
header h1 { font-size: 17px; margin: 0 auto 0 0; font-weight: 600; }
header h1 span { color: var(--muted); font-weight: 400; }
.badge { font-size: 12px; padding: 2px 8px; border-radius: 10px; border: 1px solid var(--line);
  color: var(--muted); }
.badge.on { color: var(--green); border-color: var(--green); }
.badge.wait { color: var(--amber); border-color: var(--amber); }
.badge.off { color: var(--red); border-color: var(--red); }
button { font: inherit; padding: 3px 10px; border-radius: 6px; border: 1px solid var(--line);
  background: var(--panel); color: var(--text); cursor: pointer; }
button:disabled { opacity: 0.6; cursor: default; }
main, #login { max-width: 1180px; margin: 0 auto; padding: 16px 20px 32px; }
#login form { display: flex; gap: 8px; align-items: end; flex-wrap: wrap; margin-top: 40px; }
#login label { display: flex; flex-direction: column; gap: 4px; font-weight: 600; }
#login input { font: inherit; width: 460px; max-width: 80vw; padding: 5px 8px;
  border: 1px solid var(--line); border-radius: 6px; background: var(--panel); color: var(--text); }
.hint, small { color: var(--muted); font-weight: 400; }
#login-error, #notice { color: var(--red); min-height: 1.2em; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(130px, 1fr)); gap: 10px; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 8px;
  padding: 10px 12px; }
.card .label { display: block; color: var(--muted); font-size: 12px; }
.card .value { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card.dead .value { color: var(--red); }
.panel { background: var(--panel); border: 1px solid var(--line); border-radius: 8px;
  padding: 12px 14px; margin-top: 14px; overflow-x: auto; }
.panel h2 { font-size: 14px; margin: 0 0 8px; }
.two { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; }
@media (max-width: 900px) { .two { grid-template-columns: 1fr; } }
.two .panel { min-width: 0; }
.two td { max-width: 180px; }
table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line);
  white-space: nowrap; max-width: 360px; overflow: hidden; text-overflow: ellipsis; }
th { color: var(--muted); font-weight: 500; font-size: 12px; }
tr.gone td, tr.empty td { color: var(--muted); }
tr.dead td:nth-child(4) { color: var(--red); }
svg { width: 100%; height: 190px; display: block; }
.grid { stroke: var(--line); stroke-width: 1; }
.axis { fill: var(--muted); font-size: 11px; }
.line { fill: none; stroke-width: 1.6; stroke-linejoin: round; }
.s-submitted { stroke: var(--blue); } .s-completed { stroke: var(--green); }
.s-failed { stroke: var(--red); }
.legend { display: flex; gap: 18px; font-size: 12px; color: var(--muted); }
.legend b { font-weight: 600; color: var(--text); }
.legend i { display: inline-block; width: 10px; height: 3px; vertical-align: middle;
  margin-right: 5px; }
.legend .submitted i { background: var(--blue); } .legend .completed i { background: var(--green); }
.legend .failed i { background: var(--red); }
footer { color: var(--muted); margin-top: 12px; font-size: 12px; }
`;

const CARDS: readonly [string, string][] = [
  ["waiting", "Waiting"],
  ["scheduled", "Scheduled"],
  ["retrying", "Retrying"],
  ["active", "Active"],
  ["dead", "Dead"],
  ["pending", "Pending"],
  ["inFlight", "In flight"],
  ["workers", "Workers"],
];

/** What the page needs to know. */
export interface PageOptions {
  /** The app's path: the page's requests go to `<base>/events` and `<base>/dead-letters`. */
  readonly base: string;
  /** This response's CSP nonce. */
  readonly nonce: string;
}

/**
 * The page's HTML.
 *
 * @example
 * ```ts
 * import { dashboardPage } from "./page.ts";
 * const html = dashboardPage({ base: "/workpull", nonce: "abc" });
 * console.assert(html.includes('data-base="/workpull"') && html.includes('nonce="abc"'));
 * ```
 */
export function dashboardPage(options: PageOptions): string {
  const nonce = escapeHtml(options.nonce);
  const cards = CARDS.map(([id, label]) =>
    `<div class="card ${id}" id="count-${id}"><span class="label">${label}</span>` +
    `<span class="value">–</span></div>`
  ).join("");
  const legend = ["submitted", "completed", "failed"].map((key) =>
    `<span class="${key}"><i></i>${key} <b id="rate-${key}">–</b></span>`
  ).join("");
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>workpull dashboard</title>
<link rel="icon" href="data:,">
<style nonce="${nonce}">${STYLE}</style>
</head>
<body data-base="${escapeHtml(options.base)}">
<header>
<h1>workpull <span id="flow"></span></h1>
<span id="state" class="badge">–</span>
<button id="pause" type="button" hidden>Pause</button>
<span id="live" class="badge off">signed out</span>
<button id="logout" type="button" hidden>Log out</button>
</header>
<section id="login" hidden>
<form id="login-form">
<label for="token">Client token <input id="token" name="token" type="password" autocomplete="off" spellcheck="false" placeholder="wp1.…" required></label>
<button type="submit">Open the dashboard</button>
</form>
<p id="login-error" role="alert"></p>
<p class="hint">A client token of this flow (one without a worker claim). It is kept for this tab only and sent in an Authorization header, never in a URL.</p>
</section>
<main id="board" hidden>
<section class="cards">${cards}</section>
<section class="panel">
<h2>Throughput <small>jobs a second over the last 5 minutes; figures: the last 10 s</small></h2>
<svg id="chart" viewBox="0 0 640 190" height="190" role="img" aria-label="Jobs a second over the last 5 minutes"></svg>
<div class="legend">${legend}</div>
</section>
<section class="panel">
<h2>Workers <small id="worker-count"></small></h2>
<table id="workers"><thead><tr><th>Name</th><th>Runtime</th><th>Window</th><th>In flight</th><th>Confirmed</th><th>Last seen</th></tr></thead><tbody></tbody></table>
</section>
<div class="two">
<section class="panel" id="schedules-panel" hidden>
<h2>Schedules</h2>
<table id="schedules"><thead><tr><th>Schedule</th><th>Runs</th><th>Next run</th></tr></thead><tbody></tbody></table>
</section>
<section class="panel" id="failures-panel">
<h2>Recent failures</h2>
<table id="failures"><thead><tr><th>At</th><th>Job</th><th>Try</th><th>Now</th><th>Worker</th><th>Error</th></tr></thead><tbody></tbody></table>
</section>
<section class="panel" id="dead-panel">
<h2>Dead letters <small id="dead-count"></small></h2>
<table id="dead"><thead><tr><th>Job</th><th>Tries</th><th>Error</th><th>Died</th><th></th></tr></thead><tbody></tbody></table>
<p id="notice" role="status"></p>
</section>
</div>
<footer id="totals"></footer>
</main>
<script nonce="${nonce}">${DASHBOARD_SCRIPT}</script>
</body>
</html>
`;
}

/** The Content-Security-Policy the page is served with. */
export function pagePolicy(nonce: string): string {
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}'`,
    "connect-src 'self'",
    "img-src 'self' data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join("; ");
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
