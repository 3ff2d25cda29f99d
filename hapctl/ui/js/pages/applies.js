// Apply history: every apply with its outcome, durations, changed files, reload reasons and
// the diff it applied (fetched from GET /v1/applies/{id} when its details are opened).

import { get } from '../api.js';
import { h, fill, rows, table, state } from '../dom.js';
import { poll, stamp } from '../live.js';
import { duration, diffLines, size } from '../format.js';

/** The diff of apply `id`, loaded into `box` once. */
async function loadDiff(id, box) {
  if (box.dataset.loaded) return;
  box.dataset.loaded = '1';
  try {
    const r = await get(`/v1/applies/${id}`);
    fill(box, h('pre', { class: 'diff', tabindex: '0', 'aria-label': `Diff of apply ${id}` },
      diffLines(r.json.diff || '').map(([kind, line]) => h('span', { class: kind }, line, '\n'))));
  } catch (e) {
    delete box.dataset.loaded;
    state(box, 'error', `Cannot read the diff: ${e.message}`);
  }
}

function diffPart(a) {
  if (!a.diff_bytes) return h('p', { class: 'hint' }, a.changed_files.length ? 'No diff kept (an apply from before diffs were kept).' : 'No file changed.');
  const box = h('div', { class: 'diff-box' }, h('p', { class: 'hint', role: 'status' }, 'Loading the diff…'));
  const d = h('details', { class: 'diff-details' }, h('summary', null, `Diff (${size(a.diff_bytes)})`), box);
  d.addEventListener('toggle', () => { if (d.open) loadDiff(a.id, box); });
  return d;
}

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
          h('summary', { 'aria-label': `Details of apply ${a.id}: ${a.changed_files.length} file(s)` }, `${a.changed_files.length} file(s)`),
          h('p', null, a.message),
          a.changed_files.length ? h('ul', { class: 'files' }, a.changed_files.map((f) => h('li', null, h('code', null, f)))) : null,
          a.reload_reasons.length ? h('p', null, 'Reloads: ', a.reload_reasons.join('; ')) : null,
          diffPart(a)))),
      { columns: t.columns, text: 'No apply yet.' });
    }, (e) => { status.hidden = false; state(status, 'error', `Cannot read the history: ${e.message}`); });
    return () => p.stop();
  },
};
