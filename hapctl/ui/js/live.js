// Live data without reloading the page: each view polls its API path and re-renders only when
// the answer changed. Paused while the tab is hidden.

import { get } from './api.js';

export function poll(path, everyMs, onData, onError) {
  let last = null;
  let timer = null;
  let busy = false;
  let stopped = false;
  let current = typeof path === 'function' ? path : () => path;

  async function tick() {
    clearTimeout(timer);
    if (stopped) return;
    if (!busy && !document.hidden) {
      busy = true;
      try {
        const r = await get(current());
        if (!stopped && r.text !== last) {
          last = r.text;
          onData(r.json);
        }
      } catch (e) {
        last = null;
        if (!stopped && onError) onError(e);
      } finally {
        busy = false;
      }
    }
    if (!stopped) timer = setTimeout(tick, everyMs);
  }
  tick();
  return {
    /** Fetch now (after a change), rendering even if the text is the same. */
    now() { last = null; tick(); },
    stop() { stopped = true; clearTimeout(timer); },
  };
}

/** Re-renders `live` status: when the data was last seen. */
export function stamp() {
  const el = document.getElementById('live');
  if (el) el.textContent = `live · ${new Date().toLocaleTimeString()}`;
}
