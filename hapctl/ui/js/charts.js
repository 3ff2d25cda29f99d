// The traffic page's charts as numbers (no DOM): bars of a series of points, the events of
// the hour on the same time axis, certificates on an expiry axis. Unit-tested by
// tests/charts.test.mjs under node; pages/traffic.js draws what these return as SVG.

/** What a series of points adds up to: requests, 5xx, turned away, and by reason. */
export function totals(points) {
  const t = { requests: 0, errors: 0, turned: 0, byReason: {} };
  for (const p of points) {
    t.requests += p.requests;
    t.errors += p.errors;
    t.turned += p.turned_away;
    for (const [r, n] of Object.entries(p.by_reason || {})) t.byReason[r] = (t.byReason[r] || 0) + n;
  }
  return t;
}

/**
 * One stacked bar per point in a `width` × `height` box: answered (not 5xx, not turned away),
 * 5xx, turned away, from the bottom up; heights scale to the largest point.
 */
export function bars(points, width, height) {
  const max = Math.max(1, ...points.map((p) => p.requests));
  const w = width / Math.max(1, points.length);
  return points.map((p, i) => {
    const answered = Math.max(0, p.requests - p.errors - p.turned_away);
    let y = height;
    const segments = [['answered', answered], ['errors', p.errors], ['turned', p.turned_away]].map(([kind, n]) => {
      const h = (n / max) * height;
      y -= h;
      return { kind, n, y, h };
    });
    return { at: p.at, seconds: p.seconds, x: i * w, w: Math.max(1, w - 1), point: p, segments };
  });
}

/** The x of Unix time `at` on an axis from `from` to `to` that is `width` wide. */
export function xOf(at, from, to, width) {
  return ((at - from) / Math.max(1, to - from)) * width;
}

/**
 * The events between `from` and `to` (Unix seconds), oldest first: applies (a restart of
 * HAProxy is one, by its trigger) with their reload reasons, deliveries, proofs, and
 * certificates issued (their not_before), and the WAF agent's ups and downs.
 */
export function events({ applies = [], deliveries = [], proofs = [], certificates = [], agent = [] }, from, to) {
  const out = [];
  for (const a of applies) {
    const restart = a.trigger.startsWith('haproxy restarted');
    const reasons = a.reload_reasons && a.reload_reasons.length ? ` (reload: ${a.reload_reasons.join('; ')})` : '';
    out.push({ at: a.started_at_ms / 1000, kind: restart ? 'restart' : 'apply', text: `${a.trigger}: ${a.outcome}${reasons}` });
  }
  for (const d of deliveries) {
    out.push({ at: d.started_at_ms / 1000, kind: 'delivery', text: `${d.kind} ${d.app} ${d.to_version}: ${d.outcome}` });
  }
  for (const p of proofs) out.push({ at: p.modified, kind: 'proof', text: `proof ${p.title || p.name}` });
  for (const c of certificates) out.push({ at: c.not_before, kind: 'certificate', text: `certificate ${c.name} issued` });
  for (const e of agent) out.push({ at: e.at, kind: e.kind === 'waf-down' ? 'waf-down' : 'waf', text: e.text });
  return out.filter((e) => e.at >= from && e.at <= to).sort((a, b) => a.at - b.at);
}

/**
 * Certificates on an axis from `now` to at least 90 days ahead (further for the furthest
 * expiry): each with its x, days left and level.
 */
export function expiries(certificates, now, width) {
  const far = Math.max(now + 90 * 86400, ...certificates.map((c) => c.not_after));
  return certificates
    .map((c) => {
      const days = Math.floor((c.not_after - now) / 86400);
      const level = days < 7 ? 'bad' : days < 21 ? 'warn' : 'ok';
      return { name: c.name, days, level, x: xOf(Math.max(now, c.not_after), now, far, width) };
    })
    .sort((a, b) => a.days - b.days);
}
