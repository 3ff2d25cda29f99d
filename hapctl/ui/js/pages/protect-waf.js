// The WAF agent on the Protections page: its health, the rules it serves, the requests over
// the threshold by rule id with each rule's message (GET /v1/waf, GET /v1/waf/rules once), a
// reload of its rules (POST /v1/waf/reload) with the outcome: the new rules, or the refusal
// with the old rules still serving; and a request tried without sending it
// (protect-waf-trial.js).

import { call } from '../api.js';
import { h, fill, rows, table, state } from '../dom.js';
import { poll } from '../live.js';
import { wafAgent, wafRules } from '../format.js';
import { trialForm } from './protect-waf-trial.js';

export function wafSection() {
  const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
  const summary = h('p', { class: 'summary' });
  const rt = table('Requests over the threshold by rule', ['Rule', 'Requests', 'Message']);
  // Rule id → message, read once the agent is configured (a child process loads the CRS).
  let messages = null;
  const loadMessages = async () => {
    messages = new Map();
    try {
      const set = (await call('GET', '/v1/waf/rules')).json;
      for (const f of set.files) for (const r of f.rules) messages.set(String(r.id), r.message || '');
      agent.now();
    } catch (e) {
      messages = null;
      summary.textContent += ` · rule messages not read: ${e.message}`;
    }
  };
  const trial = trialForm();
  const outcome = h('p', { id: 'pw-reload-outcome', class: 'summary', role: 'status' });
  const reload = h('button', { type: 'button', 'data-needs': 'admin' }, 'Reload rules');
  reload.addEventListener('click', async () => {
    reload.disabled = true;
    outcome.className = 'summary';
    outcome.textContent = 'Reloading the rules…';
    try {
      const r = (await call('POST', '/v1/waf/reload')).json;
      outcome.className = 'summary ok';
      outcome.textContent = `Rules reloaded: ${wafRules(r)} (agent PID ${r.pid}).`;
    } catch (e) {
      outcome.className = 'summary bad';
      outcome.textContent = `Not reloaded: ${e.message}`;
    }
    reload.disabled = false;
    agent.now();
  });
  const actions = h('div', { class: 'actions' }, reload);
  const agent = poll('/v1/waf', 5000, (w) => {
    const a = wafAgent(w);
    actions.hidden = !w.configured;
    if (!w.configured) {
      state(status, 'off', `${a.word}: ${a.detail}.`);
      summary.textContent = '';
      fill(rt.tbody);
      rt.el.hidden = true;
      trial.hidden = true;
      return;
    }
    rt.el.hidden = false;
    trial.hidden = false;
    if (!messages) loadMessages();
    state(status, a.level, `Agent ${a.word}${w.up ? ` (${a.detail})` : `: ${a.detail}`}`);
    const loaded = w.rules_loaded_at ? ` · loaded ${new Date(w.rules_loaded_at * 1000).toLocaleString()}` : '';
    summary.textContent = `Rules: ${wafRules(w)}${loaded} · inspected ${w.inspected}, blocked ${w.blocked}, detected ${w.detected}, errors ${w.errors}, timeouts ${w.timeouts}`
      + (w.reload_error ? ` · last reload refused: ${w.reload_error}` : '');
    const byRule = Object.entries(w.by_rule).map(([rule, n]) => [rule, n, (messages && messages.get(rule)) || '']);
    rows(rt.tbody, byRule, ([rule]) => rule, ([rule, n, message]) => h('tr', null,
      h('th', { scope: 'row' }, rule), h('td', null, String(n)), h('td', null, message)),
    { columns: rt.columns, text: 'No request over the threshold yet.' });
  }, (e) => state(status, 'error', `Cannot read the agent: ${e.message}`));
  const el = h('section', { 'aria-labelledby': 'pw' }, h('h2', { id: 'pw' }, 'WAF agent'),
    status, summary, rt.el, actions, outcome, trial);
  return { el, stop: () => agent.stop() };
}
