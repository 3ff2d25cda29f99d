// Pure formatting and parsing (no DOM): unit-tested by tests/format.test.mjs under node.

/** A duration in milliseconds, short. */
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(Number(ms))) return '–';
  const n = Number(ms);
  if (n < 1000) return `${Math.round(n)} ms`;
  if (n < 60_000) return `${(n / 1000).toFixed(1)} s`;
  if (n < 3_600_000) return `${Math.round(n / 60_000)} min`;
  return `${(n / 3_600_000).toFixed(1)} h`;
}

/** How long ago a Unix time (seconds) was, seen from `now` (seconds). */
export function ago(then, now) {
  const s = Math.max(0, Math.round(now - then));
  if (s < 10) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

/** How long until a Unix time (seconds); `null` is never. */
export function until(then, now) {
  if (then === null || then === undefined) return 'never';
  const s = Math.round(then - now);
  if (s <= 0) return 'expired';
  if (s < 60) return `in ${s} s`;
  const minutes = Math.ceil(s / 60);
  if (minutes < 60) return `in ${minutes} min`;
  if (s < 86400) return `in ${Math.round(s / 3600)} h`;
  return `in ${Math.round(s / 86400)} d`;
}

/** Whole days left before `notAfter` (Unix seconds), negative once past. */
export function daysLeft(notAfter, now) {
  return Math.floor((notAfter - now) / 86400);
}

/** `bad` under 7 days, `warn` under 21, else `ok`. */
export function expiryLevel(days) {
  if (days < 7) return 'bad';
  if (days < 21) return 'warn';
  return 'ok';
}

/**
 * A pasted list of blocks: one entry per line, `IP-or-CIDR [reason…]` (a comma, semicolon or
 * tab may separate them); blank lines and `#` comments are skipped. `lines[i]` is the line
 * number of `entries[i]`, so the API's `[i].ip` error can name the line.
 */
export function parseBulk(text, ttl) {
  const entries = [];
  const lines = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    const m = line.match(/^([^\s,;]+)[\s,;]*(.*)$/);
    const entry = { ip: m[1], reason: m[2].trim() };
    if (ttl) entry.ttl = ttl;
    entries.push(entry);
    lines.push(i + 1);
  });
  return { entries, lines };
}

/** The API's error field (`servers[0].address`, `[3].ip`, `domain`) split into its parts. */
export function splitField(field) {
  const m = String(field || '').match(/^([a-z_]*)(?:\[(\d+)\])?\.?([a-z_.]*)$/i);
  if (!m) return { top: field || '', index: null, rest: '' };
  return { top: m[1] || m[3], index: m[2] === undefined ? null : Number(m[2]), rest: m[1] ? m[3] : '' };
}

/**
 * Servers typed one per line: `HOST:PORT` and its options, every one the API takes, so editing
 * a domain keeps what it had: `name=N weight=N maxconn=N inter=2s fall=N rise=N backup
 * no-check send-proxy=v1|v2 tls[=none|system] sni=host|NAME`. A number is sent as a number;
 * anything else (an unknown word too) is passed on for the API to judge: its error names the
 * line and the option.
 */
export function parseServers(text) {
  return text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean).map((line) => {
    const [address, ...opts] = line.split(/\s+/);
    const server = { address };
    const tls = () => (server.tls = server.tls || {});
    for (const o of opts) {
      const eq = o.indexOf('=');
      const key = (eq < 0 ? o : o.slice(0, eq)).replace(/-/g, '_');
      const value = eq < 0 ? null : o.slice(eq + 1);
      if (value === null && key === 'backup') server.backup = true;
      else if (value === null && (key === 'no_check' || key === 'nocheck')) server.check = false;
      else if (value === null && key === 'tls') tls();
      else if (key === 'tls') tls().verify = value;
      else if (key === 'sni') tls().sni = value;
      else if (value === null) server[key] = true;
      else server[key] = /^\d+$/.test(value) ? Number(value) : value;
    }
    return server;
  });
}

/** The inverse of parseServers for the edit form: every option a server of the API has. */
export function serversText(servers) {
  return (servers || []).map((s, i) => {
    const parts = [s.addr || s.address];
    const o = s.options || {};
    if (s.name && s.name !== `s${i + 1}`) parts.push(`name=${s.name}`);
    for (const k of ['weight', 'maxconn', 'inter', 'fall', 'rise']) {
      if (o[k] !== undefined && o[k] !== null) parts.push(`${k}=${o[k]}`);
    }
    if (o.backup) parts.push('backup');
    if (o.check === false) parts.push('no-check');
    if (o.send_proxy) parts.push(`send-proxy=${o.send_proxy}`);
    if (o.tls) {
      parts.push(o.tls.verify && o.tls.verify !== 'none' ? `tls=${o.tls.verify}` : 'tls');
      if (o.tls.sni) parts.push(`sni=${o.tls.sni}`);
    }
    return parts.join(' ');
  }).join('\n');
}

/** A path segment: block keys carry a `/`. */
export const seg = (s) => encodeURIComponent(s);

/** A unified diff's lines, each with its kind: head (---/+++), hunk (@@), add, del or ctx. */
export function diffLines(text) {
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines.map((l) => {
    if (l.startsWith('--- ') || l.startsWith('+++ ')) return ['head', l];
    if (l.startsWith('@@')) return ['hunk', l];
    if (l.startsWith('+')) return ['add', l];
    if (l.startsWith('-')) return ['del', l];
    return ['ctx', l];
  });
}

/** Bytes for people: 900 B, 12.3 KiB, 1.5 MiB. */
export function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** A number field's value for the API: empty → null, digits → a number, anything else as
 * typed (so the API's refusal names it). */
export function numberOrText(text) {
  const t = text.trim();
  if (t === '') return null;
  return /^\d+$/.test(t) ? Number(t) : t;
}

/**
 * The body of `PUT /v1/domains/{name}` that keeps what domain `d` (its GET view) routes to:
 * its app, or its servers with every option (through the edit form's own text, so both keep
 * the same options), its profile and SSE routing. The route replaces the domain whole, so a
 * change of one part (the WAF policy) sends the rest as it is.
 */
export function domainBody(d) {
  if (d.app) return { app: d.app };
  return { servers: parseServers(serversText(d.servers)), profile: d.profile || undefined, sse_routing: !!d.sse_routing };
}

/**
 * WAF exclusions typed one per line, `RULE` or `RULE@/path-prefix` (blank lines skipped).
 * `lines[i]` is the line of `exclusions[i]`, so the API's `waf.exclusions[i].path` can name
 * it. A rule of digits is sent as a number, anything else as typed, for the API to judge.
 */
export function parseExclusions(text) {
  const exclusions = [];
  const lines = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (!line) return;
    const at = line.indexOf('@');
    const rule = at < 0 ? line : line.slice(0, at);
    const e = { rule: /^\d+$/.test(rule) ? Number(rule) : rule };
    if (at >= 0) e.path = line.slice(at + 1);
    exclusions.push(e);
    lines.push(i + 1);
  });
  return { exclusions, lines };
}

/** The inverse of parseExclusions for the form. */
export function exclusionsText(exclusions) {
  return (exclusions || []).map((e) => (e.path ? `${e.rule}@${e.path}` : String(e.rule))).join('\n');
}

/** The part of a WAF policy an API error names (`waf.paranoia`, `waf.exclusions[1].path`):
 * its field and the exclusion's index; null when it is not a field of the policy. */
export function wafField(field) {
  const m = String(field || '').match(/^waf\.([a-z_]+)(?:\[(\d+)\])?/);
  return m ? { name: m[1], index: m[2] === undefined ? null : Number(m[2]) } : null;
}

/** The API's message without the JSON reader's position (`… at line 1 column 282`): next to
 * a field, that line is the request body's, not the one the operator typed. */
export function withoutPosition(message) {
  return String(message).replace(/ at line \d+ column \d+$/, '');
}

/** A domain's WAF policy in a few words: `off`, or `block · PL 2 · fail closed · 1 exclusion`. */
export function wafSummary(w) {
  if (!w || w.mode === 'off') return 'off';
  const n = (w.exclusions || []).length;
  return [w.mode, `PL ${w.paranoia}`, `threshold ${w.threshold}`, `fail ${w.fail}`, n ? `${n} exclusion${n > 1 ? 's' : ''}` : null]
    .filter(Boolean).join(' · ');
}

/** The WAF agent of `GET /v1/waf` in a word: `up`, `DOWN` (with why) or not set up. */
export function wafAgent(w) {
  if (!w || !w.configured) return { level: '', word: 'Not set up', detail: 'the [waf] section of hapctl.toml runs it (docs/waf.md)' };
  if (w.up) return { level: 'ok', word: 'Up', detail: `PID ${w.pid}` };
  return { level: 'bad', word: 'DOWN', detail: w.down_reason || 'no answer' };
}

/** The rules it serves: `917 rules · OWASP_CRS/3.3.4`. */
export function wafRules(w) {
  if (!w || !w.rules_loaded_at) return 'none loaded';
  return [w.rules ? `${w.rules} rules` : null, w.crs || 'CRS version unknown'].filter(Boolean).join(' · ');
}

/** The account of an apply (`apply` of POST /v1/apply or /v1/haproxy/start) in one line:
 * its outcome, message, checks, reloads and each reload's reason. */
export function applyOutcome(a) {
  const reasons = (a.reload_reasons || []).map((r) => `${r.kind}: ${r.detail}`);
  return [`${a.outcome}: ${a.message}`, `${a.checks} check(s), ${a.reloads} reload(s)`,
    reasons.length ? `reason: ${reasons.join('; ')}` : null].filter(Boolean).join(' · ');
}

/** A refused or failed apply (the API's error, its `apply` when there was one): the message
 * and HAProxy's own lines. */
export function applyRefusal(message, apply) {
  const lines = (apply && apply.haproxy_messages) || [];
  return [message, ...lines].join(' · ');
}

/** POST /v1/haproxy/reload's answer in one line. */
export function reloadOutcome(r) {
  const ids = (l) => (l.length ? l.join(', ') : 'none');
  return `master PID ${r.master_pid} reloaded in ${duration(r.duration_ms)}: new worker(s) ${ids(r.new_workers)}, old worker(s) ${ids(r.old_workers)} · reason: ${r.reason.kind}: ${r.reason.detail}`;
}

/** POST /v1/haproxy/stop's answer in one line. */
export function stopOutcome(r) {
  if (r.outcome === 'not-running') return 'HAProxy was not running; it stays stopped until Start.';
  return `master PID ${r.master_pid} ${r.outcome === 'killed' ? 'killed (it did not exit in time)' : 'stopped'}; it stays stopped until Start.`;
}

/** The path of GET /v1/logs for the typed filters (`{domain, status, client}`, each trimmed,
 * empty left out) and the page to start from (`before`, null for the newest). */
export function logsPath(filters, before, limit = 50) {
  const p = new URLSearchParams({ limit: String(limit) });
  for (const k of ['domain', 'status', 'client']) {
    const v = String(filters[k] || '').trim();
    if (v) p.set(k, v);
  }
  if (before) p.set('before', before);
  return `/v1/logs?${p}`;
}

/** An access-log time (Unix seconds with milliseconds) as the page shows it: local time, ms. */
export function logTime(ts, locale) {
  const d = new Date(ts * 1000);
  const ms = String(d.getMilliseconds()).padStart(3, '0');
  return `${d.toLocaleDateString(locale)} ${d.toLocaleTimeString(locale, { hour12: false })}.${ms}`;
}

/** POST /v1/renewals's answer in one line: which were renewed, which failed and why. */
export function renewalsOutcome(renewals) {
  if (!renewals.length) return 'No certificate is due for renewal.';
  const done = renewals.filter((r) => !r.error).map((r) => r.name);
  const failed = renewals.filter((r) => r.error).map((r) => `${r.name}: ${r.error}`);
  return [done.length ? `Renewed: ${done.join(', ')}` : null,
    failed.length ? `Not renewed (the current certificate keeps serving): ${failed.join('; ')}` : null].filter(Boolean).join(' · ');
}
