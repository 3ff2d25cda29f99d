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
 * Servers typed one per line: `HOST:PORT` and optional `weight=N`, `backup`, `no-check`.
 * Anything else is passed on for the API to judge (its error names the line).
 */
export function parseServers(text) {
  return text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean).map((line) => {
    const [address, ...opts] = line.split(/\s+/);
    const server = { address };
    for (const o of opts) {
      const w = o.match(/^weight=(\d+)$/);
      if (w) server.weight = Number(w[1]);
      else if (o === 'backup') server.backup = true;
      else if (o === 'no-check') server.check = false;
      else server.name = o;
    }
    return server;
  });
}

/** The inverse of parseServers for the edit form. */
export function serversText(servers) {
  return (servers || []).map((s) => {
    const parts = [s.addr || s.address];
    const o = s.options || {};
    if (o.weight !== undefined) parts.push(`weight=${o.weight}`);
    if (o.backup) parts.push('backup');
    if (o.check === false) parts.push('no-check');
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
