// The shell: sign-in, navigation between pages (the URL hash), sign-out.

import * as api from './api.js';
import { toast } from './dom.js';
import overview from './pages/overview.js';
import domains from './pages/domains.js';
import blocks from './pages/blocks.js';
import certificates from './pages/certificates.js';
import protections from './pages/protections.js';
import deliveries from './pages/deliveries.js';
import applies from './pages/applies.js';
import logs from './pages/logs.js';
import traffic from './pages/traffic.js';
import audit from './pages/audit.js';

const pages = { overview, traffic, domains, blocks, certificates, protections, deliveries, applies, logs, audit };
const main = document.getElementById('main');
let unmount = null;

/**
 * What the session may change: a `can-SCOPE` class per scope on the body, which the style
 * sheet reads to hide every control the session cannot use (the server refuses them anyway).
 */
function showScopes() {
  const scopes = api.sessionScopes();
  const all = ['read', 'blocks', 'domains', 'certs', 'deliver', 'admin'];
  for (const s of all) {
    document.body.classList.toggle(`can-${s}`, scopes.includes('admin') || scopes.includes(s));
  }
}

function show(signedIn) {
  showScopes();
  document.getElementById('signin').hidden = signedIn;
  document.getElementById('app').hidden = !signedIn;
  if (!signedIn) {
    if (unmount) unmount();
    unmount = null;
    main.replaceChildren();
    document.title = 'Sign in · hapctl';
    document.getElementById('token').focus();
  }
}

function route() {
  const name = (location.hash.match(/^#\/(\w+)/) || [])[1];
  const page = pages[name];
  if (!page) {
    location.replace('#/overview');
    return;
  }
  if (unmount) unmount();
  for (const a of document.querySelectorAll('nav a')) {
    if (a.getAttribute('href') === `#/${name}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `${page.title} · hapctl`;
  main.dataset.page = name;
  main.replaceChildren();
  unmount = page.mount(main);
  main.focus({ preventScroll: true });
}

async function signIn(event) {
  event.preventDefault();
  const input = document.getElementById('token');
  const error = document.getElementById('token-error');
  error.textContent = '';
  input.removeAttribute('aria-invalid');
  const token = input.value;
  // The token leaves the page at once: only the session cookie remains.
  input.value = '';
  try {
    await api.signIn(token);
    show(true);
    route();
  } catch (e) {
    input.setAttribute('aria-invalid', 'true');
    error.textContent = e.message;
    input.focus();
  }
}

async function start() {
  document.getElementById('signin-form').addEventListener('submit', signIn);
  document.getElementById('signout').addEventListener('click', async () => {
    await api.signOut();
    show(false);
    toast('Signed out');
  });
  api.onSignedOut(() => show(false));
  window.addEventListener('hashchange', () => {
    if (!document.getElementById('app').hidden) route();
  });
  const signedIn = await api.restore();
  show(signedIn);
  if (signedIn) route();
}

start();
