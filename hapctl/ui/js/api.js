// The /v1 API from the page: the session cookie goes along by itself (HttpOnly, the page never
// sees it); every change carries the session's CSRF token, which lives only in this module.

let csrf = null;
let scopes = [];
const signedOut = new Set();

export class ApiError extends Error {
  constructor(status, body, text) {
    const e = (body && body.error) || {};
    super(e.message || text || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || '';
    this.field = e.field || '';
    this.body = body;
  }
}

/** Called when the API says the session is gone (401). */
export function onSignedOut(f) { signedOut.add(f); }

/** The scopes of the token the session signed in with (docs/access.md). */
export const sessionScopes = () => scopes;

function session(body) {
  csrf = body.csrf;
  scopes = body.scopes || [];
}

/** A page reloaded keeps its session: fetch its CSRF token and scopes. */
export async function restore() {
  const r = await fetch('/ui/session', { cache: 'no-store' });
  if (!r.ok) return false;
  session(await r.json());
  return true;
}

export async function signIn(token) {
  const r = await fetch('/ui/session', {
    method: 'POST',
    cache: 'no-store',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ token }),
  });
  const text = await r.text();
  const body = parse(text);
  if (!r.ok) throw new ApiError(r.status, body, text);
  session(body);
}

export async function signOut() {
  try {
    await fetch('/ui/session', { method: 'DELETE', headers: { 'x-csrf-token': csrf || '' } });
  } finally {
    csrf = null;
  }
}

function parse(text) {
  try { return JSON.parse(text); } catch { return null; }
}

/** One API call; resolves to {status, json, text}, throws ApiError when not 2xx. */
export async function call(method, path, body) {
  const headers = {};
  if (method !== 'GET') headers['x-csrf-token'] = csrf || '';
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await fetch(path, {
    method,
    headers,
    cache: 'no-cache',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  const json = parse(text);
  if (r.status === 401) {
    csrf = null;
    for (const f of signedOut) f();
  }
  if (!r.ok) throw new ApiError(r.status, json, text);
  return { status: r.status, json, text };
}

export const get = (path) => call('GET', path);
