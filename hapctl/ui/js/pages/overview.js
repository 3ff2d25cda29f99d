// Overview: HAProxy master and workers, live = known-good, counts, certificates, the WAF
// agent, generations, the last applies with their outcome, durations and reload reasons, a
// notice of the servers whose host name does not resolve; and recovery: apply now, HAProxy
// start / reload / stop (asked twice), each with its outcome.

import { call } from '../api.js';
import { h, fill, rows, table, state, confirmButton } from '../dom.js';
import { poll, stamp } from '../live.js';
import { ago, duration, daysLeft, expiryLevel, wafAgent, wafRules, applyOutcome, applyRefusal, reloadOutcome, stopOutcome } from '../format.js';

const now = () => Date.now() / 1000;

function card(title, body) {
  return h('section', { class: 'card', 'aria-label': title }, h('h2', null, title), body);
}

function dl(pairs) {
  return h('dl', null, pairs.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

function haproxy(s) {
  const p = s.haproxy.procs;
  if (!p && s.supervision && s.supervision.stop_requested) {
    return h('p', { class: 'bad' }, 'Stopped on purpose (Stop, or hapctl haproxy stop): not started again until Start.');
  }
  if (!p) return h('p', { class: 'bad' }, 'The master is not running (or its socket does not answer).');
  return h('div', null,
    dl([
      ['Master', `PID ${p.master.pid} · ${p.master.version}`],
      ['Up', p.master.uptime],
      ['Reloads', String(p.master.reloads)],
      ['Workers', p.workers.map((w) => `PID ${w.pid} (up ${w.uptime})`).join(', ') || 'none'],
      ['Old workers', p.old_workers.length ? p.old_workers.map((w) => `PID ${w.pid}`).join(', ') : 'none'],
    ]));
}

function live(s) {
  const check = s.runtime_check.state;
  const good = s.live_is_known_good && check !== 'failed';
  return h('div', null,
    h('p', { class: good ? 'ok big' : 'bad big' }, good ? 'Known-good' : 'Not known-good'),
    dl([
      ['Live files', s.live_is_known_good ? 'the known-good set' : 'differ from the known-good set'],
      ['Runtime check', check === 'none' ? 'nothing pending' : check],
    ]));
}

function certs(c) {
  const soon = c.soonest_expiry;
  const days = soon ? daysLeft(soon.not_after, now()) : null;
  return h('div', null, dl([
    ['Certificates', String(c.count)],
    ['Soonest expiry', soon ? h('span', { class: expiryLevel(days) }, `${soon.name}: ${days} days`) : '–'],
    ['Failing', c.failing.length ? c.failing.map((f) => f.name || f).join(', ') : 'none'],
  ]));
}

// The agent's health and counters (GET /v1/waf); its counters by rule are on Protections.
function waf(w) {
  const a = wafAgent(w);
  if (!w.configured) return h('p', { class: 'hint' }, `${a.word}: ${a.detail}.`);
  return h('div', null,
    h('p', { class: `${a.level} big` }, a.word),
    w.up ? null : h('p', { class: 'bad' }, a.detail),
    dl([
      ['Inspected', String(w.inspected)],
      ['Blocked', String(w.blocked)],
      ['Detected', String(w.detected)],
      ['Errors · timeouts', `${w.errors} · ${w.timeouts}`],
      ['Rules', wafRules(w)],
    ]));
}

// The servers HAProxy holds in maintenance because their host name does not resolve (GET
// /v1/status `resolution`, null when HAProxy does not answer); hidden when there are none.
function names(el, r) {
  const down = r ? r.unresolved_servers : [];
  el.hidden = down.length === 0;
  if (el.hidden) return;
  const until = r.runtime_resolvers
    ? 'Each is down (in maintenance) until its name resolves: the [resolvers] then put it in service without a reload.'
    : 'Each is down (in maintenance) until its name resolves at a reload; set [resolvers] in hapctl.toml to follow the names at runtime.';
  fill(el,
    h('p', null, `${down.length} server(s) do not resolve now; every other server is served.`),
    h('ul', { class: 'files' }, down.map((u) => h('li', null, `${u.host}: ${u.domain}, server ${u.server}`))),
    h('p', null, until));
}

// The fleet this edge is one of (GET /v1/fleet): every edge's applied revision beside the
// fleet's, whether it lags, what it refused, its HAProxy. Hidden on an edge in no fleet.
function fleet(el, tbody, columns, f) {
  el.hidden = false;
  const r = f.rollout;
  const rollout = r ? ` · last reload rollout ${r.state} on ${r.canary}${r.state === 'refused' ? `: ${r.message.split('\n')[0]}` : ''}` : '';
  fill(el.querySelector('.summary'), `Fleet revision ${f.revision}${f.published ? '' : ' — not published yet (hapctl fleet publish)'} · ${f.edges.length} edge(s)${rollout}`);
  rows(tbody, f.edges, (e) => e.name, (e) => h('tr', null,
    h('td', null, e.name),
    h('td', null, String(e.applied_revision)),
    h('td', null, h('span', { class: e.lagging ? 'bad' : 'ok' }, e.lagging ? 'lagging' : 'current')),
    h('td', null, h('span', { class: e.haproxy === 'ok' ? 'ok' : 'bad' }, e.haproxy)),
    h('td', null, e.refused ? `revision ${e.refused[0]}: ${e.refused[1]}` : '–'),
    h('td', null, e.message || '–')), { columns, text: 'No edge reports to the fleet.' });
}

/** The recovery actions, each answered below them; `done` re-reads the status. */
function recovery(done) {
  const outcome = h('p', { id: 'ov-outcome', class: 'summary', role: 'status' });
  const run = async (what, path, say) => {
    for (const b of buttons) b.disabled = true;
    outcome.className = 'summary';
    outcome.textContent = `${what}…`;
    try {
      const r = (await call('POST', path)).json;
      outcome.className = 'summary ok';
      outcome.textContent = `${what}: ${say(r)}`;
    } catch (e) {
      outcome.className = 'summary bad';
      outcome.textContent = `${what} refused: ${applyRefusal(e.message, e.body && e.body.apply)}`;
    } finally {
      for (const b of buttons) b.disabled = false;
      done();
    }
  };
  const button = (id, label, what, path, say, needs) => {
    const b = h('button', { type: 'button', id, 'data-needs': needs }, label);
    b.addEventListener('click', () => run(what, path, say));
    return b;
  };
  const buttons = [
    button('ov-apply', 'Apply now', 'Apply', '/v1/apply', (r) => applyOutcome(r.apply), 'domains'),
    button('ov-reload', 'Reload HAProxy', 'Reload', '/v1/haproxy/reload', reloadOutcome, 'admin'),
    button('ov-start', 'Start HAProxy', 'Start', '/v1/haproxy/start', (r) => `master PID ${r.master_pid} running · apply ${applyOutcome(r.apply)}`, 'admin'),
  ];
  const stop = confirmButton('Stop', 'HAProxy', () => run('Stop', '/v1/haproxy/stop', stopOutcome));
  stop.id = 'ov-stop';
  stop.dataset.needs = 'admin';
  buttons.push(stop);
  return h('section', { class: 'panel recovery', 'aria-labelledby': 'ov-recovery' },
    h('h2', { id: 'ov-recovery' }, 'Recovery'),
    h('p', { class: 'hint' }, 'Apply the committed state again; reload HAProxy through its master; start it, or stop it (it stays stopped, hapctl serve does not restart it, until Start).'),
    h('div', { class: 'actions' }, buttons), outcome);
}

export default {
  title: 'Overview',
  mount(main) {
    const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const unresolved = h('section', { id: 'ov-names', class: 'state bad', 'aria-label': 'Server names that do not resolve', hidden: true });
    const grid = h('div', { class: 'cards' });
    const applies = table('Last applies', ['When', 'Trigger', 'Outcome', 'Duration', 'Checks', 'Reloads', 'Reload reasons']);
    const gens = table('Generations', ['App', 'Version', 'Role', 'Port', 'Running', 'Ready']);
    const edges = table('Fleet', ['Edge', 'Applied revision', 'State', 'HAProxy', 'Refused', 'Last apply']);
    const fleetEl = h('section', { id: 'ov-fleet', 'aria-label': 'Fleet', hidden: true },
      h('p', { class: 'summary' }), edges.el);
    const actions = recovery(() => p.now());
    fill(main, h('h1', null, 'Overview'), status, unresolved, grid, fleetEl, actions, applies.el, gens.el);
    const fleetPoll = poll('/v1/fleet', 3000, (f) => fleet(fleetEl, edges.tbody, edges.columns, f),
      (e) => {
        // No [fleet] on this edge: nothing to show. Anything else (etcd down) is said.
        fleetEl.hidden = e.body && e.body.error && e.body.error.code === 'no_fleet';
        fill(fleetEl.querySelector('.summary'), h('span', { class: 'bad' }, `Cannot read the fleet: ${e.message}`));
      });
    // Its own poll; the card element stays in the grid when the status redraws the others.
    const wafBody = h('div', null, h('p', { class: 'state loading' }, 'Loading…'));
    const wafCard = card('WAF agent', wafBody);
    const agent = poll('/v1/waf', 2000, (w) => fill(wafBody, waf(w)),
      (e) => fill(wafBody, h('p', { class: 'state error' }, `Cannot read the agent: ${e.message}`)));
    const p = poll('/v1/status', 2000, (s) => {
      status.hidden = true;
      stamp();
      names(unresolved, s.resolution);
      fill(grid,
        card('HAProxy', haproxy(s)),
        card('Live configuration', live(s)),
        card('Counts', dl([
          ['Domains', String(s.counts.domains)],
          ['Blocked', String(s.counts.blocked)],
          ['Trusted proxies', String(s.counts.trusted_proxies)],
        ])),
        card('Certificates', certs(s.certificates)),
        wafCard);
      rows(applies.tbody, s.applies, (a) => a.id, (a) => h('tr', null,
        h('td', null, ago(a.started_at_ms / 1000, now())),
        h('td', null, a.trigger),
        h('td', null, h('span', { class: `outcome ${a.outcome}` }, a.outcome)),
        h('td', null, duration(a.duration_ms)),
        h('td', null, String(a.checks)),
        h('td', null, String(a.reloads)),
        h('td', null, a.reload_reasons.join('; ') || '–')), { columns: applies.columns, text: 'No apply yet.' });
      rows(gens.tbody, s.generations, (g) => `${g.app}/${g.version}`, (g) => h('tr', null,
        h('td', null, g.app), h('td', null, g.version), h('td', null, g.role), h('td', null, String(g.port)),
        h('td', null, g.running ? 'yes' : 'no'), h('td', null, g.ready ? 'yes' : 'no')),
      { columns: gens.columns, text: 'No delivered application.' });
    }, (e) => { status.hidden = false; state(status, 'error', `Cannot read the status: ${e.message}`); });
    return () => { p.stop(); agent.stop(); fleetPoll.stop(); };
  },
};
