// Traffic: the edge's last hour minute by minute (requests, 5xx, turned away by reason), the
// events of that hour on the same time axis (applies and their reload reasons, HAProxy
// restarts, deliveries, proofs, certificates issued, the WAF agent down, up or restarted), the busiest domains with a chart each
// (five-minute points), and certificate expiry on a time axis. The series live in hapctl
// serve's memory (GET /v1/traffic): a restart empties them, which the page says.

import { h, fill, rows, table, state, svg } from '../dom.js';
import { poll, stamp } from '../live.js';
import { duration } from '../format.js';
import { totals, bars, xOf, events, expiries } from '../charts.js';

const W = 720;
const H = 160;
const KINDS = [['answered', 'answered'], ['errors', '5xx'], ['turned', 'turned away']];

/** A stacked bar chart of `points` with its totals line; `label` names it. */
function drawChart(box, points, label) {
  const t = totals(points);
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': `${label}: ${t.requests} requests, ${t.errors} 5xx, ${t.turned} turned away` },
    bars(points, W, H).map((b) => svg('g', {
      class: 'bar', 'data-at': b.at, 'data-requests': b.point.requests, 'data-errors': b.point.errors, 'data-turned': b.point.turned_away,
    },
    svg('title', null, `${new Date(b.at * 1000).toLocaleTimeString()}: ${b.point.requests} requests, ${b.point.errors} 5xx, ${b.point.turned_away} turned away`),
    b.segments.filter((s) => s.h > 0).map((s) => svg('rect', { class: s.kind, x: b.x, y: s.y, width: b.w, height: s.h })))));
  const reasons = Object.entries(t.byReason).sort((a, b) => b[1] - a[1]);
  fill(box,
    h('p', { class: 'summary totals', 'data-requests': t.requests, 'data-errors': t.errors, 'data-turned': t.turned },
      `${t.requests} requests · ${t.errors} 5xx · ${t.turned} turned away`),
    chart,
    h('p', { class: 'legend' }, KINDS.map(([k, name]) => h('span', { class: `key ${k}` }, name))),
    reasons.length ? h('ul', { class: 'reasons', 'aria-label': `${label}: turned away by reason` },
      reasons.map(([r, n]) => h('li', { 'data-reason': r, 'data-count': n }, `${r}: ${n}`))) : null);
}

/** The events of the hour as marks on the chart's time axis, and as a list. */
function drawEvents(box, list, from, to) {
  const marks = svg('svg', { viewBox: `0 0 ${W} 24`, class: 'timeline', role: 'img', 'aria-label': `${list.length} event(s) in the hour` },
    svg('line', { x1: 0, y1: 12, x2: W, y2: 12, class: 'axis' }),
    list.map((e) => svg('circle', { cx: xOf(e.at, from, to, W), cy: 12, r: 5, class: `mark ${e.kind}` }, svg('title', null, e.text))));
  fill(box, marks, list.length
    ? h('ul', { class: 'events' }, list.slice().reverse().map((e) => h('li', { 'data-kind': e.kind },
      h('span', { class: `key ${e.kind}` }, new Date(e.at * 1000).toLocaleTimeString()), ' ', e.text)))
    : h('p', { class: 'hint' }, 'No event in the hour.'));
}

function drawExpiry(box, certificates, now) {
  const x = expiries(certificates, now, W - 20);
  fill(box, svg('svg', { viewBox: `0 0 ${W} ${24 + 18 * x.length}`, class: 'timeline expiry', role: 'img', 'aria-label': 'Certificate expiry from today' },
    svg('line', { x1: 10, y1: 12, x2: W - 10, y2: 12, class: 'axis' }),
    x.map((c, i) => svg('g', { class: `cert ${c.level}`, 'data-name': c.name, 'data-days': c.days },
      svg('circle', { cx: 10 + c.x, cy: 12, r: 5 }),
      svg('text', { x: Math.min(10 + c.x, W - 200), y: 30 + 18 * i }, `${c.name}: ${c.days} d`)))));
}

export default {
  title: 'Traffic',
  mount(main) {
    const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const since = h('p', { class: 'summary', id: 't-since' });
    const edgeBox = h('div', { class: 'panel chart-box', id: 't-edge' });
    const eventBox = h('div', { class: 'panel', id: 't-events' });
    const domainBox = h('div', { class: 'panel chart-box', id: 't-domain', hidden: true });
    const expiryBox = h('div', { class: 'panel', id: 't-expiry' });
    const t = table('Busiest domains, last hour', ['Domain', 'Requests', '5xx', 'Turned away', 'p95', 'Chart']);
    const seen = { applies: [], deliveries: [], proofs: [], certificates: [], agent: [] };
    let hour = null;
    let domainPoll = null;
    const redrawEvents = () => { if (hour) drawEvents(eventBox, events(seen, hour.from, hour.to), hour.from, hour.to); };
    const showDomain = (name) => {
      if (domainPoll) domainPoll.stop();
      domainBox.hidden = false;
      domainPoll = poll(`/v1/traffic?points=${encodeURIComponent(name)}`, 5000, (r) => {
        fill(domainBox, h('h3', null, `${name}, last hour (five-minute points)`), h('div', { id: 't-domain-chart' }));
        drawChart(domainBox.lastChild, r.points, name);
      }, (e) => state(domainBox, 'error', `Cannot read ${name}'s traffic: ${e.message}`));
    };
    const error = (what) => (e) => { status.hidden = false; state(status, 'error', `Cannot read ${what}: ${e.message}`); };
    const polls = [
      poll('/v1/traffic?points=*', 5000, (r) => {
        status.hidden = true;
        stamp();
        since.textContent = `Counted by hapctl serve since ${new Date(r.since * 1000).toLocaleString()}: a restart of hapctl serve empties this history.`;
        drawChart(edgeBox, r.points, 'The edge, last hour');
        seen.agent = r.events || [];
        const last = r.points[r.points.length - 1];
        hour = { from: r.points[0].at, to: last.at + last.seconds };
        redrawEvents();
      }, error('the traffic')),
      poll('/v1/traffic?window=1h&limit=20', 5000, (r) => {
        rows(t.tbody, r.domains, (d) => d.domain, (d) => {
          const w = d.windows.find((x) => x.window === '1h');
          return h('tr', { 'data-domain': d.domain },
            h('th', { scope: 'row' }, d.domain),
            h('td', null, String(w.requests)),
            h('td', { class: w.status['5xx'] ? 'bad' : null }, String(w.status['5xx'])),
            h('td', null, String(w.turned_away)),
            h('td', null, duration(w.time_ms.p95)),
            h('td', null, h('button', { type: 'button', class: 'quiet', 'aria-label': `Chart of ${d.domain}`, onclick: () => showDomain(d.domain) }, 'Chart')));
        }, { columns: t.columns, text: 'No request counted yet.' });
      }, error('the domains')),
      ...['applies', 'deliveries', 'proofs'].map((k) => poll(`/v1/${k}`, 10000, (r) => { seen[k] = r; redrawEvents(); }, error(`the ${k}`))),
      poll('/v1/certificates', 10000, (r) => {
        seen.certificates = r.certificates;
        redrawEvents();
        drawExpiry(expiryBox, r.certificates, Date.now() / 1000);
      }, error('the certificates')),
    ];
    main.append(h('h1', null, 'Traffic'), status, since,
      h('h2', null, 'The edge, last hour'), edgeBox,
      h('h2', null, 'Events'), eventBox,
      h('h2', null, 'Domains'), t.el, domainBox,
      h('h2', null, 'Certificate expiry'), expiryBox);
    return () => { for (const p of polls) p.stop(); if (domainPoll) domainPoll.stop(); };
  },
};
