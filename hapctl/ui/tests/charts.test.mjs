// Unit tests of the traffic charts' numbers: `node --test hapctl/ui/tests/`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { totals, bars, xOf, events, expiries } from '../js/charts.js';

const point = (at, requests, errors, turned, byReason = {}) =>
  ({ at, seconds: 60, requests, errors, turned_away: turned, by_reason: byReason, p95_ms: null });

test('points add up, by reason too', () => {
  const t = totals([point(0, 10, 2, 3, { blocked: 3 }), point(60, 5, 0, 1, { blocked: 1 })]);
  assert.deepEqual(t, { requests: 15, errors: 2, turned: 4, byReason: { blocked: 4 } });
});

test('bars stack answered, errors and turned away, scaled to the largest', () => {
  const b = bars([point(0, 10, 2, 3), point(60, 0, 0, 0)], 100, 50);
  assert.equal(b.length, 2);
  assert.equal(b[1].x, 50);
  const [answered, errors, turned] = b[0].segments;
  assert.deepEqual([answered.n, errors.n, turned.n], [5, 2, 3]);
  assert.equal(answered.h + errors.h + turned.h, 50);
  assert.equal(turned.y, 0);
  assert.equal(b[1].segments[0].h, 0);
});

test('events of the window, oldest first, restarts told apart', () => {
  const e = events({
    applies: [
      { started_at_ms: 2000_000, trigger: 'haproxy restarted: master PID 7 exited', outcome: 'applied', reload_reasons: [] },
      { started_at_ms: 1500_000, trigger: 'domain add', outcome: 'applied', reload_reasons: ['new backend'] },
      { started_at_ms: 10_000, trigger: 'old', outcome: 'applied', reload_reasons: [] },
    ],
    certificates: [{ name: 'shop', not_before: 1800, not_after: 9000 }],
    agent: [{ at: 2500, kind: 'waf-down', text: 'WAF agent down: x' }, { at: 2600, kind: 'waf-up', text: 'WAF agent up' }],
  }, 1000, 3000);
  assert.deepEqual(e.map((x) => x.kind), ['apply', 'certificate', 'restart', 'waf-down', 'waf']);
  assert.equal(e[0].text, 'domain add: applied (reload: new backend)');
});

test('certificates on the expiry axis, soonest first', () => {
  const x = expiries([{ name: 'a', not_after: 100 * 86400 }, { name: 'b', not_after: 3 * 86400 }], 0, 1000);
  assert.deepEqual(x.map((c) => [c.name, c.days, c.level]), [['b', 3, 'bad'], ['a', 100, 'ok']]);
  assert.equal(x[1].x, 1000);
  assert.equal(xOf(50, 0, 100, 10), 5);
});
