// Deliveries: the generations, deliver a version or roll back with the steps shown as they
// happen (GET /v1/deliveries/current while the cutover runs), and the history.

import { call, get } from '../api.js';
import { h, fill, rows, table, state, field, clearErrors, showError, toast } from '../dom.js';
import { poll, stamp } from '../live.js';
import { duration, size } from '../format.js';

function stepsList(steps) {
  return steps.map((s) => h('li', null, h('strong', null, s.name), ` ${duration(s.ms)}`, s.detail ? ` · ${s.detail}` : ''));
}

/** The proofs of cutovers (hapctl prove's journals): each one's checks, timeline, failures and
 * way back, read when its details are opened. */
function proofList() {
  const t = table('Proofs of cutovers (hapctl prove, newest first)', ['Written', 'Proof', 'Journal']);
  const status = h('p', { class: 'state', role: 'status', hidden: true });
  const poller = poll('/v1/proofs', 10000, (list) => {
    status.hidden = true;
    rows(t.tbody, list, (j) => j.name, (j) => {
      const box = h('div', { class: 'diff-box' }, h('p', { class: 'hint', role: 'status' }, 'Loading the journal…'));
      const d = h('details', null, h('summary', { 'aria-label': `Journal ${j.name}` }, `${j.name} (${size(j.bytes)})`), box);
      d.addEventListener('toggle', async () => {
        if (!d.open || box.dataset.loaded) return;
        box.dataset.loaded = '1';
        try {
          const r = await get(`/v1/proofs/${encodeURIComponent(j.name)}`);
          fill(box, h('pre', { class: 'journal', tabindex: '0', 'aria-label': `Journal ${j.name}` }, r.json.markdown));
        } catch (e) { delete box.dataset.loaded; state(box, 'error', `Cannot read the journal: ${e.message}`); }
      });
      const passed = /PASSED\s*$/.test(j.title);
      return h('tr', null,
        h('td', null, new Date(j.modified * 1000).toLocaleString()),
        h('th', { scope: 'row' }, h('span', { class: `outcome ${passed ? 'delivered' : 'failed'}` }, j.title)),
        h('td', null, d));
    }, { columns: t.columns, text: 'No proof yet: hapctl prove --cycle VERSION measures a delivery and its rollback from outside.' });
  }, (e) => { status.hidden = false; state(status, 'error', `Cannot list the proofs: ${e.message}`); });
  return { el: h('div', null, status, t.el), now: () => poller.now(), stop: () => poller.stop() };
}

export default {
  title: 'Deliveries',
  mount(main) {
    const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const gens = table('Generations', ['App', 'Version', 'Role', 'Port', 'Running', 'Ready', 'PID']);
    const hist = table('Delivery history (newest first)', ['When', 'App', 'Kind', 'From', 'To', 'Outcome', 'Duration', 'Steps']);
    const p = poll('/v1/status', 3000, (s) => {
      status.hidden = true;
      stamp();
      rows(gens.tbody, s.generations, (g) => `${g.app}/${g.version}`, (g) => h('tr', null,
        h('td', null, g.app), h('th', { scope: 'row' }, g.version), h('td', null, g.role), h('td', null, String(g.port)),
        h('td', null, g.running ? 'yes' : 'no'), h('td', null, g.ready ? 'yes' : 'no'), h('td', null, g.pid ? String(g.pid) : '–')),
      { columns: gens.columns, text: 'No generation: deliver a version of an [[app]].' });
    }, (e) => { status.hidden = false; state(status, 'error', `Cannot read the generations: ${e.message}`); });
    const hStatus = h('p', { class: 'state', role: 'status', hidden: true });
    const history = poll('/v1/deliveries', 5000, (list) => {
      hStatus.hidden = true;
      rows(hist.tbody, list, (d) => d.id, (d) => {
        let steps = [];
        try { steps = JSON.parse(d.steps); } catch { steps = []; }
        return h('tr', null,
          h('td', null, new Date(d.started_at_ms).toLocaleString()),
          h('td', null, d.app), h('td', null, d.kind), h('td', null, d.from_version || '–'), h('th', { scope: 'row' }, d.to_version),
          h('td', null, h('span', { class: `outcome ${d.outcome}` }, d.outcome)),
          h('td', null, duration(d.duration_ms)),
          h('td', null, h('details', null, h('summary', null, `${steps.length} step(s)`), h('p', null, d.message), h('ol', null, stepsList(steps)))));
      }, { columns: hist.columns, text: 'No delivery yet.' });
    }, (e) => { hStatus.hidden = false; state(hStatus, 'error', `Cannot list the deliveries: ${e.message}`); });

    // The cutover in progress.
    const progress = h('section', { class: 'panel progress', 'aria-labelledby': 'progress-title', 'aria-live': 'polite' },
      h('h2', { id: 'progress-title' }, 'Cutover'), h('p', { class: 'state' }, 'No cutover running.'), h('ol', { class: 'steps' }),
      h('ul', { class: 'checks' }));
    const [, line, list, checks] = progress.children;
    function showRun(run, done) {
      line.textContent = done
        ? `${run.kind} ${run.app} → ${run.to}: ${run.outcome} in ${duration(run.total_ms)}. ${run.message || ''}`
        : `${run.kind} ${run.app} → ${run.version || 'the previous generation'}: running…`;
      line.className = `state ${done ? (['delivered', 'already-live', 'proved'].includes(run.outcome) ? 'ok' : 'bad') : 'loading'}`;
      fill(list, stepsList(run.steps || []));
      // A proof's checks: what was required and what was measured.
      fill(checks, (done && run.checks ? run.checks : []).map((c) => h('li', null,
        h('strong', { class: c.status === 'pass' ? 'ok' : 'bad' }, `${c.name}: ${c.status}`), ` · ${c.measured}`)));
    }
    async function cutover(button, path, body) {
      for (const b of main.querySelectorAll('.cutover button')) b.disabled = true;
      let watching = true;
      const watch = async () => {
        while (watching) {
          try {
            const r = await get('/v1/deliveries/current');
            if (watching && r.json.running) showRun(r.json, false);
          } catch { /* the final answer tells */ }
          await new Promise((ok) => setTimeout(ok, 250));
        }
      };
      watch();
      try {
        const r = await call('POST', path, body);
        watching = false;
        showRun(r.json, true);
        toast(`${r.json.kind}: ${r.json.outcome}`);
        return null;
      } catch (e) {
        watching = false;
        if (e.body && e.body.steps) showRun(e.body, true);
        else { line.className = 'state bad'; line.textContent = e.message; }
        return e;
      } finally {
        for (const b of main.querySelectorAll('.cutover button')) b.disabled = false;
        p.now();
        history.now();
        proofs.now();
      }
    }

    const app = h('input', { type: 'text', autocomplete: 'off', placeholder: 'the only [[app]] when empty' });
    const version = h('input', { type: 'text', required: true, autocomplete: 'off', spellcheck: 'false' });
    const deliver = h('button', { type: 'submit' }, 'Deliver');
    const rollback = h('button', { type: 'button', class: 'quiet' }, 'Roll back');
    const prove = h('input', { type: 'checkbox', id: 'v-prove', name: 'v-prove' });
    const form = h('form', { class: 'panel cutover', 'aria-labelledby': 'deliver-title', novalidate: true },
      h('h2', { id: 'deliver-title' }, 'Deliver a version'),
      field('v-app', 'App', app),
      field('v-version', 'Version', version),
      h('div', { class: 'field check' }, h('label', null, prove, 'Prove it: measure the delivery from outside (hapctl prove; the app answers its version on /)')),
      h('p', { class: 'field-error form-error', role: 'alert' }),
      h('div', { class: 'actions' }, deliver, rollback));
    const target = () => (app.value.trim() ? { app: app.value.trim() } : {});
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors(form);
      const path = prove.checked ? '/v1/proofs' : '/v1/deliveries';
      const e = await cutover(deliver, path, { ...target(), version: version.value.trim() });
      if (e && e.field) showError(form, e.field === 'app' ? 'v-app' : 'v-version', e.message);
    });
    rollback.addEventListener('click', async () => {
      clearErrors(form);
      const e = await cutover(rollback, '/v1/rollback', target());
      if (e && e.field) showError(form, 'v-app', e.message);
    });

    const proofs = proofList();
    fill(main, h('h1', null, 'Deliveries'), status, gens.el, h('div', { class: 'forms' }, form, progress), hStatus, hist.el, proofs.el);
    return () => { p.stop(); history.stop(); proofs.stop(); };
  },
};
