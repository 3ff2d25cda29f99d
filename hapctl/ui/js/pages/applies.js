// Apply history: every apply with its outcome, durations, changed files and reload reasons.

import { h, fill, rows, table, state } from '../dom.js';
import { poll, stamp } from '../live.js';
import { duration } from '../format.js';

export default {
  title: 'Applies',
  mount(main) {
    const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const t = table('Apply history (newest first)', ['#', 'Started', 'Trigger', 'Outcome', 'Duration', 'Checks', 'Reloads', 'Details']);
    fill(main, h('h1', null, 'Applies'), status, t.el);
    const p = poll('/v1/applies', 5000, (list) => {
      status.hidden = true;
      stamp();
      rows(t.tbody, list, (a) => a.id, (a) => h('tr', null,
        h('td', null, String(a.id)),
        h('td', null, new Date(a.started_at_ms).toLocaleString()),
        h('td', null, a.trigger),
        h('td', null, h('span', { class: `outcome ${a.outcome}` }, a.outcome)),
        h('td', null, duration(a.duration_ms)),
        h('td', null, String(a.checks)),
        h('td', null, String(a.reloads)),
        h('td', null, h('details', null,
          h('summary', null, `${a.changed_files.length} file(s)`),
          h('p', null, a.message),
          a.changed_files.length ? h('ul', { class: 'files' }, a.changed_files.map((f) => h('li', null, h('code', null, f)))) : null,
          a.reload_reasons.length ? h('p', null, 'Reloads: ', a.reload_reasons.join('; ')) : null))),
      { columns: t.columns, text: 'No apply yet.' });
    }, (e) => { status.hidden = false; state(status, 'error', `Cannot read the history: ${e.message}`); });
    return () => p.stop();
  },
};
