// subgate staff console: a client of the staff JSON API (/api), nothing more.
//
// - The bearer token lives in the variable `session` only: not in localStorage, sessionStorage
//   or a cookie. A reload or a closed tab signs out; no request carries credentials the browser
//   adds by itself, so another site cannot make the browser act as staff (no CSRF surface).
// - Every state-changing POST carries an Idempotency-Key, kept until the server answers 2xx:
//   a retry after a network error or a timeout replays the first answer instead of acting twice.
// - Every page is built with DOM calls and textContent (never innerHTML with data), and the
//   server's Content-Security-Policy allows no inline script.
'use strict';

(() => {
  // ------------------------------------------------------------------ state

  /** The signed-in staff session, in memory only. */
  let session = null; // {token, email, role, expiresAt, timer}
  /** Minor-unit exponents by currency code, from the server's own table. */
  let exponents = {};
  /** The crypto assets a plan may be priced in through Crypto Pay (the server's
   * `CRYPTO_ASSETS`), by code; never a channel's or a plan's currency. */
  const CRYPTO_ASSETS = ['BNB', 'BTC', 'ETH', 'LTC', 'TON', 'TRX', 'USDC', 'USDT'];
  /** The codes a price may be in: every code of the table but the crypto assets. */
  const priceCurrencies = () => Object.keys(exponents).filter((code) => !CRYPTO_ASSETS.includes(code));
  /** Channels by id, for titles and currencies (refreshed after channel writes). */
  let channelCache = null;
  /** Plans by id, for titles in orders and promo codes (refreshed after plan writes). */
  let planCache = null;
  /** Bumped by every render: a slow render that lost the race draws nothing. */
  let renderSeq = 0;
  /** Where to go after signing in. */
  let afterLogin = '#/overview';

  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------------ DOM helpers

  /**
   * Builds an element. `attrs`: `class`, `text`, `for`, `on<event>` handlers, booleans
   * (set when true), `dataset`, anything else as an attribute. Children: nodes, strings,
   * arrays, or null/false (skipped).
   */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false || k === 'value') continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
    append(el, children);
    // Last, so an input's type (number, datetime-local) is known when its value is set.
    if (attrs && attrs.value !== undefined && attrs.value !== null) el.value = attrs.value;
    return el;
  }

  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function link(href, text, attrs) {
    return h('a', Object.assign({ href }, attrs || {}), text);
  }

  /** A table that reads as cards on a phone (each cell labelled by its column). */
  function table(caption, columns, rows, empty) {
    if (!rows.length) return h('p', { class: 'empty' }, empty || 'Nothing here.');
    return h('div', { class: 'table-wrap' },
      h('table', {},
        h('caption', { class: 'visually-hidden' }, caption),
        h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, rows.map((cells) => h('tr', {},
          // A cell of several parts is one box, so a phone's card keeps it beside its label.
          cells.map((cell, i) => h('td', { 'data-label': columns[i] },
            Array.isArray(cell) ? h('span', { class: 'cell' }, cell) : cell)))))));
  }

  /** A definition list from [term, description] pairs. */
  function facts(pairs) {
    return h('dl', { class: 'facts' },
      pairs.filter(Boolean).map(([t, d]) => [h('dt', {}, t), h('dd', {}, d)]));
  }

  function field(label, input, hint) {
    const hintId = hint ? input.id + '-hint' : null;
    if (hintId) input.setAttribute('aria-describedby', hintId + ' ' + input.id + '-error');
    else input.setAttribute('aria-describedby', input.id + '-error');
    return h('div', { class: 'field' + (input.type === 'checkbox' ? ' check' : '') },
      input.type === 'checkbox'
        ? [input, h('label', { for: input.id }, label)]
        : [h('label', { for: input.id }, label), input],
      hint ? h('p', { class: 'hint', id: hintId }, hint) : null,
      h('p', { class: 'field-error', id: input.id + '-error' }));
  }

  function badge(text, kind) {
    return h('span', { class: 'badge ' + (kind || text) }, text);
  }

  // ------------------------------------------------------------------ formatting

  const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });
  const timeZone = Intl.DateTimeFormat().resolvedOptions().timeZone;

  /**
   * A time in the viewer's time zone, with the exact UTC instant as its machine value. A
   * lifetime membership's `expires_at` ("infinity") is shown as "lifetime".
   */
  function when(iso) {
    if (!iso) return '—';
    if (isLifetime(iso)) return h('span', { class: 'lifetime' }, 'lifetime');
    const d = new Date(iso);
    return h('time', { datetime: iso, title: iso }, dateFormat.format(d));
  }

  /** The API's spelling of an expiry that never comes (PostgreSQL's 'infinity'). */
  function isLifetime(iso) {
    return iso === 'infinity';
  }

  /** "until 1 Dec 2026, 10:00", or "for life": an expiry in a sentence. */
  function untilText(iso) {
    return isLifetime(iso) ? 'for life' : 'until ' + dateFormat.format(new Date(iso));
  }

  function exponentOf(currency) {
    return Object.prototype.hasOwnProperty.call(exponents, currency) ? exponents[currency] : 2;
  }

  /** The exact decimal text of minor units (no floating point). */
  function minorToDecimal(minor, exponent) {
    const negative = minor < 0;
    let digits = String(Math.abs(minor));
    if (exponent === 0) return (negative ? '-' : '') + digits;
    digits = digits.padStart(exponent + 1, '0');
    return (negative ? '-' : '') + digits.slice(0, -exponent) + '.' + digits.slice(-exponent);
  }

  /** Minor units from a decimal typed by staff ("199", "199.5", "199,50"), or null. */
  function decimalToMinor(text, exponent) {
    const m = /^\s*(\d+)(?:[.,](\d+))?\s*$/.exec(text);
    if (!m) return null;
    let frac = m[2] || '';
    if (frac.length > exponent) {
      if (/[^0]/.test(frac.slice(exponent))) return null;
      frac = frac.slice(0, exponent);
    }
    const minor = BigInt(m[1]) * 10n ** BigInt(exponent) + BigInt(frac.padEnd(exponent, '0') || '0');
    return minor <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(minor) : null;
  }

  /** An amount in currency units: "₴199.00", "€5.00"; Telegram Stars as "⭐ 250". */
  function money(minor, currency) {
    if (currency === 'XTR') {
      return h('span', { class: 'money', 'aria-label': minor + ' Telegram Stars' },
        '⭐ ' + Number(minor).toLocaleString());
    }
    const exponent = exponentOf(currency);
    const decimal = minorToDecimal(minor, exponent);
    let text;
    try {
      text = new Intl.NumberFormat(undefined, {
        style: 'currency', currency, currencyDisplay: 'symbol',
        minimumFractionDigits: exponent, maximumFractionDigits: exponent,
      }).format(decimal);
    } catch {
      text = decimal + ' ' + currency;
    }
    return h('span', { class: 'money', title: decimal + ' ' + currency }, text);
  }

  const REASONS = {
    unknown_order: 'No order has this reference.',
    order_cancelled: 'The order had been cancelled when the money arrived.',
    currency_mismatch: 'Paid in another currency than the order’s.',
    amount_mismatch: 'The amount paid differs from the order’s amount.',
    payer_mismatch: 'Paid from another Telegram account than the order’s buyer.',
    already_paid: 'The order had already been paid by another payment (a double payment).',
    channel_inactive: 'The channel had been deactivated when the money arrived.',
    hold_expired: 'The seat held for this order had been released before the money arrived.',
    no_seat: 'The channel was full when the money arrived.',
    refunded_elsewhere: 'A Stars charge refunded in another tool; nothing was granted.',
    unknown_subscription: 'A renewal charge of a Stars subscription we have no record of.',
    subscription_cancelled: 'A renewal charge of a Stars subscription that had been cancelled.',
    promo_exhausted: 'The order’s promo code had no use left when the money arrived (its hold had lapsed and the code filled up).',
    already_lifetime: 'The buyer already had lifetime access to every channel of the plan.',
    refunded_at_gateway: 'Refunded in the gateway’s cabinet after it was applied; what it bought was taken back.',
    refunded_before_payment: 'The gateway reported the refund before the payment itself; nothing was granted.',
    disputed_at_gateway: 'The buyer disputed the charge with their bank; what it bought was taken back.',
    dispute_won: 'The dispute was decided for you: the money stays, but the access the dispute took back was not given again.',
    refunded_by_staff: 'Refunded by staff through the gateway; what it bought was taken back.',
  };

  const ADVICE = {
    unknown_order: 'Find the buyer from the gateway’s record (the reference is shown), then grant the days by hand — or refund through the gateway.',
    order_cancelled: 'Grant the days by hand if the buyer should have them, or refund through the gateway.',
    currency_mismatch: 'Compare with the order: grant by hand if the payment is acceptable, else refund it through the gateway.',
    amount_mismatch: 'Compare with the order: grant by hand if the amount is acceptable; else refund it through the gateway or ask the buyer to pay the difference.',
    payer_mismatch: 'Check who paid: grant the days by hand to the right subscriber, or refund.',
    already_paid: 'A double payment: refund it through the gateway (Stars double payments are refunded automatically).',
    channel_inactive: 'Reactivate the channel and grant the days by hand, or refund through the gateway.',
    hold_expired: 'Grant the days by hand if a seat is free (raise the seat limit if not), or refund.',
    no_seat: 'Raise the channel’s seat limit and grant the days by hand, or refund.',
    refunded_elsewhere: 'Nothing to do.',
    unknown_subscription: 'Find the buyer in Telegram; grant by hand or refund the Stars in Telegram.',
    subscription_cancelled: 'Grant by hand if the renewal should count, or refund the Stars in Telegram.',
    promo_exhausted: 'Grant the days by hand if the discount should stand (raise the code’s limit first if you like), or refund through the gateway.',
    already_lifetime: 'Nothing was bought: refund it through the gateway (Stars are refunded automatically).',
    refunded_at_gateway: 'Nothing to do.',
    refunded_before_payment: 'Nothing to do.',
    dispute_won: 'Grant the days by hand if the buyer should have them again (the dispute took back what the payment bought).',
    refunded_by_staff: 'Nothing to do.',
  };

  function reasonText(reason) {
    return reason ? (REASONS[reason] || reason) : '—';
  }

  // ------------------------------------------------------------------ messages

  function say(text) {
    $('alert').textContent = '';
    $('status').textContent = '';
    // Set a moment later, so screen readers announce a repeated message too.
    setTimeout(() => { $('status').textContent = text; }, 30);
  }

  function fail(err) {
    // A request refused because the session ended has said so already (see `api`).
    if (err instanceof ApiError && err.sessionEnded) return;
    $('status').textContent = '';
    const text = describe(err);
    $('alert').textContent = '';
    setTimeout(() => { $('alert').textContent = text; }, 30);
  }

  function clearMessages() {
    $('status').textContent = '';
    $('alert').textContent = '';
  }

  class ApiError extends Error {
    constructor(status, problem, retryAfter) {
      super((problem && (problem.detail || problem.title)) || 'request failed');
      this.status = status;
      this.problem = problem || {};
      this.retryAfter = retryAfter;
    }
  }

  /** The server's own words for a failure, as it sent them. */
  function describe(err) {
    if (!(err instanceof ApiError)) return String(err && err.message ? err.message : err);
    const p = err.problem;
    let text = p.detail || p.title || ('HTTP ' + err.status);
    if (p.errors) {
      text += ': ' + Object.entries(p.errors).map(([k, v]) => k + ' ' + inFormTerms(v)).join('; ');
    }
    if (err.retryAfter) text += ' (Retry-After: ' + err.retryAfter + ' s)';
    return text;
  }

  /**
   * A field message of the API in the form's terms: the API speaks JSON, where `null` is what
   * a form leaves empty ("must be null (unlimited) or at least 1" for a seat limit).
   */
  function inFormTerms(message) {
    return String(message).replace(/\bnull\b/g, 'empty');
  }

  /** Shows a 422's per-field messages next to the inputs (`map` renames API fields). */
  function showFieldErrors(form, err, map) {
    for (const el of form.querySelectorAll('.field-error')) el.textContent = '';
    for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
    const errors = err instanceof ApiError && err.problem.errors ? err.problem.errors : {};
    let first = null;
    for (const [name, message] of Object.entries(errors)) {
      const id = (map && map[name]) || name;
      const input = form.querySelector('#' + CSS.escape(form.id + '-' + id));
      if (!input) continue;
      input.setAttribute('aria-invalid', 'true');
      const slot = $(input.id + '-error');
      if (slot) slot.textContent = inFormTerms(message);
      first = first || input;
    }
    if (first) first.focus();
  }

  // ------------------------------------------------------------------ API

  /** A new Idempotency-Key (crypto.randomUUID needs a secure context; this does not). */
  function newKey() {
    if (window.crypto && crypto.randomUUID && window.isSecureContext) return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const x = Array.from(b, (v) => v.toString(16).padStart(2, '0')).join('');
    return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
  }

  async function api(method, path, body, opts) {
    opts = opts || {};
    const headers = { accept: 'application/json, application/problem+json' };
    if (session && !opts.anonymous) headers.authorization = 'Bearer ' + session.token;
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (opts.key) headers['idempotency-key'] = opts.key;
    let res;
    try {
      res = await fetch('/api' + path, {
        method, headers, cache: 'no-store', credentials: 'omit',
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch {
      throw new ApiError(0, { detail: 'The server could not be reached. Check the connection and try again.' });
    }
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
    if (!res.ok) {
      const err = new ApiError(res.status, data, res.headers.get('retry-after'));
      if (res.status === 401 && session && !opts.anonymous) {
        err.sessionEnded = true;
        signOut('Your session has ended (the token expired or the account is gone). Sign in again.');
      }
      throw err;
    }
    return data;
  }

  /**
   * A state-changing POST with an Idempotency-Key that belongs to `holder` (the form or button
   * that asked) until the server answers 2xx: pressing again after a failure that may have
   * been applied (a timeout, a lost connection) replays instead of acting twice.
   */
  async function post(holder, path, body) {
    if (!holder.dataset.idempotencyKey) holder.dataset.idempotencyKey = newKey();
    const result = await api('POST', path, body, { key: holder.dataset.idempotencyKey });
    delete holder.dataset.idempotencyKey;
    return result;
  }

  /**
   * Saves a form's resource: a PATCH of what changed to `existing` (nothing changed: says so),
   * else a POST to `path` under the form's idempotency key; says what was saved, then
   * `done(saved, created)`. The API's field errors show next to their inputs (`fields` maps an
   * API field to its input's name where they differ).
   */
  async function saveResource(form, existing, body, { path, name, fields, done }) {
    await busy(form, async () => {
      try {
        if (existing && !Object.keys(body).length) { say('Nothing changed.'); return; }
        const saved = existing
          ? await api('PATCH', `${path}/${existing.id}`, body)
          : await post(form, path, body);
        say(`${existing ? 'Saved' : 'Created'} ${name(saved)}.`);
        done(saved, !existing);
      } catch (err) {
        showFieldErrors(form, err, fields);
        fail(err);
      }
    });
  }

  /** Every page of a list, for the small lists the console joins on (channels). */
  async function all(path) {
    const items = [];
    let after = 0;
    for (;;) {
      const sep = path.includes('?') ? '&' : '?';
      const batch = await api('GET', `${path}${sep}limit=200&after=${after}`);
      items.push(...batch.items);
      if (batch.next_after === null) return items;
      after = batch.next_after;
    }
  }

  async function channels(refresh) {
    if (!channelCache || refresh) {
      const list = await all('/channels');
      channelCache = new Map(list.map((c) => [c.id, c]));
    }
    return channelCache;
  }

  function channelName(map, id) {
    if (id === null || id === undefined) return '—';
    const c = map.get(id);
    return c ? c.title : '#' + id;
  }

  /** Disables a form's controls while `work` runs, shows its errors, says `done`'s text. */
  async function busy(el, work) {
    const controls = el.matches('button') ? [el] : Array.from(el.querySelectorAll('button, input, select, textarea'));
    const before = controls.map((c) => c.disabled);
    controls.forEach((c) => { c.disabled = true; });
    el.setAttribute('aria-busy', 'true');
    try {
      return await work();
    } finally {
      controls.forEach((c, i) => { c.disabled = before[i]; });
      el.removeAttribute('aria-busy');
    }
  }

  // ------------------------------------------------------------------ session

  function signIn(token, email, expiresIn, role) {
    session = { token, email, role, expiresAt: Date.now() + expiresIn * 1000, timer: null };
    session.timer = setTimeout(() => signOut('Your session has expired. Sign in again.'), expiresIn * 1000);
    $('who-email').textContent = email;
    $('who').hidden = false;
    $('nav').hidden = false;
  }

  /** Whether the signed-in account may do what needs `role` (the API checks it again). */
  function mayDo(role) {
    const ranks = ['viewer', 'support', 'admin', 'owner'];
    return Boolean(session) && ranks.indexOf(session.role) >= ranks.indexOf(role);
  }

  function signOut(message) {
    if (session && session.timer) clearTimeout(session.timer);
    session = null;
    channelCache = null;
    planCache = null;
    $('who').hidden = true;
    $('nav').hidden = true;
    if (location.hash && !location.hash.startsWith('#/sign-in')) afterLogin = location.hash;
    renderSignIn(message);
  }

  // ------------------------------------------------------------------ routing

  function parseHash() {
    const raw = location.hash.startsWith('#/') ? location.hash.slice(2) : 'overview';
    const [path, query] = raw.split('?');
    return { parts: path.split('/').filter(Boolean), params: new URLSearchParams(query || '') };
  }

  function go(hash) {
    if (location.hash === hash) route();
    else location.hash = hash;
  }

  /** Starts drawing a page: clears it, sets the title, and returns a check that it still shows. */
  function page(title, focus) {
    const seq = ++renderSeq;
    const main = $('main');
    main.replaceChildren();
    document.title = title + ' · subgate console';
    const h1 = h('h1', { tabindex: '-1' }, title);
    main.append(h1);
    if (focus !== false) h1.focus();
    for (const a of document.querySelectorAll('#nav a')) {
      const here = location.hash.split('?')[0].startsWith(a.getAttribute('href'));
      if (here) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    return { main, live: () => seq === renderSeq };
  }

  async function route() {
    if (!session) {
      afterLogin = location.hash || afterLogin;
      renderSignIn();
      return;
    }
    const { parts, params } = parseHash();
    clearMessages();
    const [section, id] = parts;
    try {
      switch (section) {
        case 'overview': return await renderOverview();
        case 'channels':
          if (id === 'new') return await renderChannelForm(null);
          if (id && parts[2] === 'audit') return await renderAudit(Number(id));
          if (id) return await renderChannelForm(Number(id));
          return await renderChannels();
        case 'plans':
          if (id === 'new') return await renderPlanForm(null, params);
          if (id) return await renderPlanForm(Number(id), params);
          return await renderPlans(params);
        case 'promo-codes':
          if (id === 'new') return await renderPromoForm(null);
          if (id) return await renderPromoForm(Number(id));
          return await renderPromoCodes();
        case 'subscribers':
          if (id) return await renderSubscriber(Number(id), params);
          return await renderSubscribers(params);
        case 'broadcasts':
          if (id === 'new') return await renderBroadcastForm();
          if (id) return await renderBroadcast(Number(id));
          return await renderBroadcasts();
        case 'automations': return await renderAutomations();
        case 'referrals': return await screens.referrals.render(parts.slice(1), params);
        case 'door': return await screens.door.render(parts.slice(1), params);
        case 'memberships': return await renderMemberships(params);
        case 'payments':
          if (id) return await renderPayment(Number(id));
          return await renderPayments(params);
        case 'reconciliation': return await renderReconciliation(params);
        case 'effects': return await renderEffects(params);
        case 'sweep': return await renderSweep();
        case 'webhooks':
          if (id) return await renderWebhookDeliveries(Number(id));
          return await renderWebhooks();
        case 'charts': return await renderCharts(params);
        case 'audit-log': return await renderAuditLog(params);
        case 'staff': return await renderStaff();
        case 'password': return renderPassword();
        default: {
          const { main } = page('Not found');
          main.append(h('p', {}, 'There is no such page. ', link('#/overview', 'Go to the overview.')));
        }
      }
    } catch (err) {
      fail(err);
    }
  }

  // ------------------------------------------------------------------ charts

  /** A date input's value (YYYY-MM-DD) for a Date, in UTC (the statistics' calendar). */
  function isoDay(d) {
    return d.toISOString().slice(0, 10);
  }

  /** One line chart drawn by uPlot: `series` are [label, colour, values]; x are instants. */
  function lineChart(id, title, xs, series, yFormat) {
    const box = h('figure', { class: 'chart', id },
      h('figcaption', {}, title));
    const plotBox = h('div', { class: 'chart-plot' });
    box.append(plotBox);
    const opts = {
      width: 600,
      height: 260,
      scales: { x: { time: true } },
      legend: { live: true },
      series: [{ label: 'Interval start' }].concat(series.map(([label, colour]) => ({
        label, stroke: colour, width: 2, points: { show: xs.length < 60 },
        value: (u, v) => (v === null || v === undefined ? '—' : yFormat(v)),
      }))),
      axes: [{}, { values: (u, vals) => vals.map(yFormat), size: 70 }],
    };
    const data = [xs].concat(series.map((s) => s[2]));
    // Drawn once the figure is in the page, at its width; redrawn at the new width on resize
    // (a phone turned sideways).
    requestAnimationFrame(() => {
      opts.width = Math.max(plotBox.clientWidth, 240);
      const plot = new uPlot(opts, data, plotBox);
      const resize = () => plot.setSize({ width: Math.max(plotBox.clientWidth, 240), height: 260 });
      window.addEventListener('resize', resize);
      box.dataset.drawn = String(xs.length);
    });
    return box;
  }

  const COLOURS = ['#2563eb', '#16a34a', '#dc2626', '#9333ea', '#ea580c', '#0891b2'];

  /** A currency's minor units as a number of major units, for a chart's axis. */
  function major(minor, currency) {
    return Number(minor) / 10 ** exponentOf(currency);
  }

  async function renderCharts(params) {
    const { main, live } = page('Charts');
    const today = new Date();
    const monthAgo = new Date(today.getTime() - 30 * 86400e3);
    const from = params.get('from') || isoDay(monthAgo);
    const to = params.get('to') || isoDay(today);
    const interval = params.get('interval') || 'day';
    const channel = params.get('channel') || '';
    const chans = await channels();
    if (!live()) return;
    const form = h('form', { id: 'charts-range', class: 'card inline', method: 'post', novalidate: true },
      field('From', h('input', { id: 'charts-from', name: 'from', type: 'date', value: from, required: true })),
      field('To (inclusive)', h('input', { id: 'charts-to', name: 'to', type: 'date', value: to, required: true })),
      field('Interval', h('select', { id: 'charts-interval', name: 'interval' },
        ['day', 'week', 'month'].map((i) => h('option', { value: i, selected: i === interval }, i)))),
      field('Channel', h('select', { id: 'charts-channel', name: 'channel' },
        h('option', { value: '', selected: channel === '' }, 'all channels'),
        [...chans.values()].map((c) => h('option', { value: c.id, selected: String(c.id) === channel }, c.title)))),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Show')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const q = new URLSearchParams({
        from: form.elements.from.value, to: form.elements.to.value,
        interval: form.elements.interval.value, channel: form.elements.channel.value,
      });
      go('#/charts?' + q.toString());
    });
    main.append(form);

    // `to` is a day, inclusive: the series ends where the next day starts (UTC).
    const end = new Date(to + 'T00:00:00Z');
    end.setUTCDate(end.getUTCDate() + 1);
    const range = `from=${from}T00:00:00Z&to=${isoDay(end)}T00:00:00Z&interval=${interval}`;
    let summary, revenue, members;
    try {
      [summary, revenue, members] = await Promise.all([
        api('GET', '/stats/summary'),
        api('GET', `/stats/revenue?${range}`),
        api('GET', `/stats/members?${range}` + (channel ? `&channel_id=${channel}` : '')),
      ]);
    } catch (err) {
      showFieldErrors(form, err);
      throw err;
    }
    if (!live()) return;

    main.append(h('section', { id: 'charts-summary', class: 'card' },
      h('h2', {}, 'Now'),
      facts([
        ['Monthly recurring revenue', summary.mrr.length
          ? summary.mrr.map((m, i) => [i ? ', ' : '', money(m.amount_minor, m.currency)])
          : '—'],
        ['Active members', String(summary.active_members)],
        ['Churn, last 30 days', percent(summary.churn_rate_30d)],
        ['Renewal rate, last 30 days', percent(summary.renewal_rate_30d)],
      ])));

    // Revenue: one chart per currency (amounts of two currencies share no axis).
    const currencies = [...new Set(revenue.items.map((r) => r.currency))];
    const revenueSection = h('section', { id: 'charts-revenue' }, h('h2', {}, 'Revenue'));
    if (!currencies.length) revenueSection.append(h('p', { class: 'empty' }, 'No revenue in this range.'));
    for (const currency of currencies) {
      const rows = revenue.items.filter((r) => r.currency === currency);
      const xs = rows.map((r) => Date.parse(r.start) / 1000);
      const fmt = (v) => Number(v).toLocaleString(undefined, { maximumFractionDigits: exponentOf(currency) });
      revenueSection.append(lineChart(`chart-revenue-${currency}`, `Revenue in ${currency}`, xs, [
        ['gross', COLOURS[0], rows.map((r) => major(r.gross_minor, currency))],
        ['net', COLOURS[1], rows.map((r) => major(r.net_minor, currency))],
        ['refunded', COLOURS[2], rows.map((r) => major(r.refunded_minor, currency))],
      ], fmt));
      // Telegram's affiliate fees (Stars only) get their columns when there are any.
      const fees = rows.some((r) => Number(r.affiliate_fees_minor) !== 0);
      revenueSection.append(h('details', {}, h('summary', {}, `The figures (${currency})`),
        table(`Revenue in ${currency}`, ['From', 'Gross', 'Refunded', 'Net',
          ...(fees ? ['Affiliate fees', 'Net after fees'] : []), 'Payments'],
          rows.map((r) => [when(r.start), money(r.gross_minor, currency),
            money(r.refunded_minor, currency), money(r.net_minor, currency),
            ...(fees ? [money(r.affiliate_fees_minor, currency),
              money(r.net_after_fees_minor, currency)] : []),
            String(r.payments)]))));
    }
    main.append(revenueSection);

    // Members: summed over the channels shown.
    const byStart = new Map();
    for (const m of members.items) {
      const t = byStart.get(m.start) || { live: 0, new: 0, renewed: 0, expired: 0, trials_started: 0, trials_converted: 0 };
      for (const k of Object.keys(t)) t[k] += m[k];
      byStart.set(m.start, t);
    }
    const starts = [...byStart.keys()];
    const rows = starts.map((st) => byStart.get(st));
    const count = (v) => Number(v).toLocaleString(undefined, { maximumFractionDigits: 0 });
    const title = channel ? `Members of ${channelName(chans, Number(channel))}` : 'Members, all channels';
    const membersSection = h('section', { id: 'charts-members' }, h('h2', {}, 'Members'));
    if (!starts.length) {
      membersSection.append(h('p', { class: 'empty' }, 'No channels yet.'));
    } else {
      membersSection.append(lineChart('chart-members', title, starts.map((st) => Date.parse(st) / 1000), [
        ['live', COLOURS[0], rows.map((r) => r.live)],
        ['new', COLOURS[1], rows.map((r) => r.new)],
        ['renewed', COLOURS[3], rows.map((r) => r.renewed)],
        ['expired', COLOURS[2], rows.map((r) => r.expired)],
        ['trials started', COLOURS[4], rows.map((r) => r.trials_started)],
        ['trials converted', COLOURS[5], rows.map((r) => r.trials_converted)],
      ], count));
      membersSection.append(h('details', {}, h('summary', {}, 'The figures'),
        table(title, ['From', 'Live at the end', 'New', 'Renewed', 'Expired', 'Trials started', 'Trials converted'],
          starts.map((st, i) => [when(st), String(rows[i].live), String(rows[i].new), String(rows[i].renewed),
            String(rows[i].expired), String(rows[i].trials_started), String(rows[i].trials_converted)]))));
    }
    main.append(membersSection);
    main.append(h('p', { class: 'hint' },
      'Days, weeks (from Monday) and months are UTC calendar intervals; the last one may still be running.'));
  }

  function percent(rate) {
    if (rate === null || rate === undefined) return '—';
    return (rate * 100).toLocaleString(undefined, { maximumFractionDigits: 1 }) + ' %';
  }

  // ------------------------------------------------------------------ audit log

  async function renderAuditLog(params) {
    const { main, live } = page('Audit log');
    const form = h('form', { id: 'audit-filter', class: 'card inline', method: 'post', novalidate: true },
      field('Action', h('input', { id: 'audit-action', name: 'action', value: params.get('action') || '', placeholder: 'e.g. channel.update' })),
      field('Target type', h('input', { id: 'audit-target_type', name: 'target_type', value: params.get('target_type') || '', placeholder: 'e.g. membership' })),
      field('Target id', h('input', { id: 'audit-target_id', name: 'target_id', type: 'number', value: params.get('target_id') || '' })),
      field('Staff id', h('input', { id: 'audit-staff_id', name: 'staff_id', type: 'number', value: params.get('staff_id') || '' })),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Show')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      for (const k of ['action', 'target_type', 'target_id', 'staff_id']) {
        const v = form.elements[k].value.trim();
        if (v) q.set(k, v);
      }
      go('#/audit-log?' + q.toString());
    });
    main.append(form);
    const q = new URLSearchParams();
    for (const k of ['action', 'target_type', 'target_id', 'staff_id']) {
      if (params.get(k)) q.set(k, params.get(k));
    }
    const section = h('section', { id: 'audit-list' });
    main.append(section);
    const path = '/audit-log' + (q.toString() ? '?' + q.toString() : '');
    await pagedList(section, path, live, (items) => table('Audit log',
      ['#', 'When', 'Who', 'Action', 'Target', 'Change', 'Request'],
      items.map((r) => [
        String(r.id),
        when(r.at),
        r.actor === 'cli' ? h('em', {}, 'command line') : r.staff_email,
        h('code', {}, r.action),
        r.target_id === null ? r.target_type : `${r.target_type} #${r.target_id}`,
        change(r.before, r.after),
        h('code', { class: 'muted' }, r.request_id || '—'),
      ]), 'No staff writes match.'));
  }

  /** What a write changed: the fields whose values differ, or the whole record made or removed. */
  function change(before, after) {
    const show = (v) => (v === null || v === undefined ? '—' : typeof v === 'object' ? JSON.stringify(v) : String(v));
    if (before && after && typeof before === 'object' && typeof after === 'object') {
      const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])]
        .filter((k) => k !== 'updated_at' && JSON.stringify(before[k]) !== JSON.stringify(after[k]));
      if (!keys.length) return 'no field changed';
      return h('ul', { class: 'changes' }, keys.map((k) =>
        h('li', {}, h('code', {}, k), ': ', show(before[k]), ' → ', show(after[k]))));
    }
    if (after) return h('details', {}, h('summary', {}, 'made'), h('pre', {}, JSON.stringify(after, null, 2)));
    if (before) return h('details', {}, h('summary', {}, 'removed'), h('pre', {}, JSON.stringify(before, null, 2)));
    return '—';
  }

  // ------------------------------------------------------------------ staff accounts

  const ROLES = ['owner', 'admin', 'support', 'viewer'];

  async function renderStaff() {
    const { main, live } = page('Staff');
    main.append(h('p', { class: 'hint' },
      'Owner: everything, and these accounts. Admin: everything else. Support: reads; grants, corrections, cancels, retries. Viewer: reads only. A new role or a disabling signs the account out at once.'));
    const form = h('form', { id: 'staff-new', class: 'card', method: 'post', novalidate: true },
      h('h2', {}, 'New account'),
      field('Email', h('input', { id: 'staff-new-email', name: 'email', type: 'email', autocomplete: 'off', required: true })),
      field('Role', h('select', { id: 'staff-new-role', name: 'role' },
        ROLES.map((r) => h('option', { value: r, selected: r === 'viewer' }, r)))),
      field('Password', h('input', { id: 'staff-new-password', name: 'password', type: 'password', autocomplete: 'new-password', required: true }),
        '8 to 72 bytes, not a common password, not mostly the email.'),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create')));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      await busy(form, async () => {
        try {
          const a = await post(form, '/staff', {
            email: form.elements.email.value.trim(), role: form.elements.role.value,
            password: form.elements.password.value,
          });
          say(`Account ${a.email} created (${a.role}).`);
          go('#/staff');
        } catch (err) {
          showFieldErrors(form, err);
          fail(err);
        }
      });
    });
    const list = h('section', { id: 'staff-list' });
    main.append(list, form);
    const accounts = await all('/staff');
    if (!live()) return;
    list.append(table('Staff accounts', ['Email', 'Role', 'Status', 'Since', 'Change'],
      accounts.map((a) => {
        const role = h('select', { id: `staff-role-${a.id}`, 'aria-label': `Role of ${a.email}` },
          ROLES.map((r) => h('option', { value: r, selected: r === a.role }, r)));
        const save = h('button', { type: 'button', class: 'small' }, 'Set role');
        save.addEventListener('click', () => patchAccount(save, a, { role: role.value }, `${a.email} is now ${role.value}.`));
        const toggle = h('button', { type: 'button', class: 'small secondary' }, a.disabled ? 'Enable' : 'Disable');
        toggle.addEventListener('click', () => patchAccount(toggle, a, { disabled: !a.disabled },
          `${a.email} is ${a.disabled ? 'enabled' : 'disabled'}.`));
        const del = h('button', { type: 'button', class: 'small danger' }, 'Delete');
        del.addEventListener('click', async () => {
          const ok = await confirmDialog(`Delete ${a.email}?`,
            'The account can no longer sign in; what it did stays in the audit log.', 'Delete');
          if (!ok) return;
          await busy(del, async () => {
            try {
              await api('DELETE', `/staff/${a.id}`);
              say(`${a.email} deleted.`);
              go('#/staff');
            } catch (err) { fail(err); }
          });
        });
        return [a.email, [role, ' ', save], a.disabled ? badge('disabled') : badge('enabled', 'active'),
          when(a.created_at), [toggle, ' ', del]];
      }), 'No accounts.'));
  }

  /** `PATCH /api/staff/{id}` from one of the account's buttons, then the list again. */
  async function patchAccount(button, account, body, done) {
    await busy(button, async () => {
      try {
        await api('PATCH', `/staff/${account.id}`, body);
        say(done);
        go('#/staff');
      } catch (err) { fail(err); }
    });
  }

  function renderPassword() {
    const { main } = page('Change your password');
    const form = h('form', { id: 'password', class: 'card narrow', method: 'post', novalidate: true },
      field('Current password', h('input', { id: 'password-current_password', name: 'current_password', type: 'password', autocomplete: 'current-password', required: true })),
      field('New password', h('input', { id: 'password-new_password', name: 'new_password', type: 'password', autocomplete: 'new-password', required: true }),
        '8 to 72 bytes, not a common password. Every other session of this account ends.'),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Change password')));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      await busy(form, async () => {
        try {
          const r = await api('POST', '/auth/password', {
            current_password: form.elements.current_password.value,
            new_password: form.elements.new_password.value,
          });
          form.reset();
          // The change ended this session's token too: carry on with the new one.
          const email = session.email;
          if (session.timer) clearTimeout(session.timer);
          signIn(r.access_token, email, r.expires_in, r.role);
          say('Password changed; your other sessions are signed out.');
        } catch (err) {
          showFieldErrors(form, err);
          fail(err);
        }
      });
    });
    main.append(form);
  }

  // ------------------------------------------------------------------ sign in

  function renderSignIn(message) {
    const { main } = page('Sign in');
    const form = h('form', { id: 'login', class: 'card narrow', method: 'post', novalidate: true },
      field('Email', h('input', { id: 'login-email', name: 'email', type: 'email', autocomplete: 'username', required: true })),
      field('Password', h('input', { id: 'login-password', name: 'password', type: 'password', autocomplete: 'current-password', required: true })),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Sign in')));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const email = form.elements.email.value.trim();
      const password = form.elements.password.value;
      let failed = false;
      await busy(form, async () => {
        try {
          const r = await api('POST', '/auth/login', { email, password }, { anonymous: true });
          form.elements.password.value = '';
          signIn(r.access_token, email, r.expires_in, r.role);
          say('Signed in as ' + email + '.');
          const target = afterLogin && !afterLogin.startsWith('#/sign-in') ? afterLogin : '#/overview';
          afterLogin = '#/overview';
          go(target);
        } catch (err) {
          // The throttle's answer (429) is shown as the server worded it, with its Retry-After.
          showFieldErrors(form, err);
          fail(err);
          failed = true;
        }
      });
      if (failed && !session) form.elements.password.select();
    });
    main.append(form);
    if (message) say(message);
    form.elements.email.focus();
  }

  // ------------------------------------------------------------------ overview

  async function renderOverview() {
    const { main, live } = page('Overview');
    const o = await api('GET', '/overview');
    if (!live()) return;
    // The banner is null when every channel is fine: `append` skips it, `Node.append` would print "null".
    append(main, [rightsBanner(o.channels_without_rights || [])]);
    const attention = [
      ['Payments needing review', o.payments.needs_review, '#/payments?outcome=needs_review'],
      ['Refunds that failed', o.payments.refund_failed, '#/payments?outcome=refund_failed'],
      ['Refunds queued', o.payments.refund_pending, '#/payments?outcome=refund_pending'],
      ['Dead-lettered effects', o.effects.failed, '#/effects?status=failed'],
      ['Effects pending', o.effects.pending, '#/effects?status=pending'],
    ];
    main.append(
      h('section', { 'aria-labelledby': 'ov-attention' },
        h('h2', { id: 'ov-attention' }, 'Waiting for staff'),
        h('ul', { class: 'tiles' }, attention.map(([label, n, href]) =>
          h('li', { class: 'tile' + (n > 0 && !label.startsWith('Effects pending') && !label.startsWith('Refunds queued') ? ' warn' : '') },
            link(href, [h('span', { class: 'count' }, String(n)), h('span', { class: 'label' }, label)]))))),
      h('section', { 'aria-labelledby': 'ov-channels' },
        h('h2', { id: 'ov-channels' }, 'Members by channel'),
        table('Members by status per channel',
          ['Channel', 'Active', 'Grace', 'Expired', 'Seats taken / limit'],
          o.channels.map((c) => {
            const m = (status, n) => link(`#/memberships?channel_id=${c.id}&status=${status}`, String(n),
              { 'aria-label': `${n} ${status} members of ${c.title}` });
            return [
              [link(`#/channels/${c.id}`, c.title), c.active ? null : [' ', badge('inactive')]],
              m('active', c.members.active), m('grace', c.members.grace), m('expired', c.members.expired),
              c.seat_limit === null
                ? 'unlimited'
                : link(`#/memberships?channel_id=${c.id}`, `${c.seats_taken} / ${c.seat_limit}`),
            ];
          }),
          'No channels yet. ')),
      h('section', { 'aria-labelledby': 'ov-revenue' },
        h('h2', { id: 'ov-revenue' }, 'Revenue, last 30 days'),
        o.revenue_30d.length
          ? h('ul', { class: 'tiles' }, o.revenue_30d.map((r) =>
            h('li', { class: 'tile' }, link('#/payments?outcome=applied',
              [h('span', { class: 'count' }, money(r.amount_minor, r.currency)),
                h('span', { class: 'label' }, `${r.payments} payment${r.payments === 1 ? '' : 's'} in ${r.currency}`)]))))
          : h('p', { class: 'empty' }, 'No payments applied in the last 30 days.')),
      h('section', { 'aria-labelledby': 'ov-doors' },
        h('h2', { id: 'ov-doors' }, 'Payment doors'),
        h('ul', { class: 'tiles doors', id: 'ov-doors-list' }, PAYMENT_DOORS.map(([key, label]) =>
          h('li', { class: 'tile', id: `door-${key}` },
            h('span', { class: 'count' }, o.doors[key] ? badge('live', 'active') : badge('off', 'expired')),
            h('span', { class: 'label' }, label))))),
      h('section', { 'aria-labelledby': 'ov-sweep' },
        h('h2', { id: 'ov-sweep' }, 'Last sweep'),
        sweepSummary(o.last_sweep, o.last_sweep_change_at),
        h('p', {}, link('#/sweep', 'Sweep page'))));
    if (!o.channels.length) {
      main.querySelector('#ov-channels').parentElement.append(h('p', {}, link('#/channels/new', 'Create a channel')));
    }
  }

  /** The overview's payment doors, in the contract's order, and fiscal receipts. */
  const PAYMENT_DOORS = [
    ['payment', 'Signed webhook (door 1)'],
    ['wayforpay', 'WayForPay'],
    ['telegram', 'Telegram Stars'],
    ['stripe', 'Stripe'],
    ['monobank', 'Monobank'],
    ['cryptopay', 'Crypto Pay'],
    ['receipts', 'Fiscal receipts (Checkbox)'],
  ];

  function sweepSummary(run, changeAt) {
    const items = [];
    if (run) {
      items.push(['Finished', when(run.finished_at)]);
      items.push(['Started by', { schedule: 'the schedule', staff: 'staff', sweep_token: 'cron (sweep token)' }[run.trigger] || run.trigger]);
      if (run.ok && run.report) items.push(['Report', reportText(run.report)]);
      else items.push(['Result', 'failed (see the server log)']);
    } else {
      items.push(['This server', 'has not swept since it started']);
    }
    items.push(['Last change made by a sweep', when(changeAt)]);
    return facts(items);
  }

  function reportText(r) {
    return `examined ${r.examined}, to grace ${r.to_grace}, to expired ${r.to_expired}, skipped ${r.skipped}, ${r.duration_ms} ms`;
  }

  // ------------------------------------------------------------------ channels

  async function renderChannels() {
    const { main, live } = page('Channels');
    const list = Array.from((await channels(true)).values());
    if (!live()) return;
    main.append(
      h('p', { id: 'channels-hint', class: 'hint' }, 'Each is a private Telegram channel or group (a supergroup, a forum or not), '
        + 'sold the same way; the bot must be its administrator with the rights to invite users and ban users.'),
      h('p', {}, link('#/channels/new', 'New channel', { class: 'button' })),
      table('Channels', ['Title', 'Chat id', 'Price', 'Period', 'Grace', 'Seat limit', 'Status', 'Buy link'],
        list.map((c) => [
          link(`#/channels/${c.id}`, c.title),
          String(c.telegram_chat_id),
          money(c.price_minor, c.currency),
          `${c.billing_period_days} days`,
          `${c.grace_period_days} days`,
          c.seat_limit === null ? 'unlimited' : String(c.seat_limit),
          [c.active ? badge('active') : badge('inactive'), c.recurring ? [' ', badge('recurring')] : null,
            c.telegram_status === 'no_rights' ? [' ', badge('no rights', 'no_rights')] : null,
            c.door === 'mini_app' ? [' ', badge('Mini App door', 'info')] : null],
          c.buy_link ? copyable(c.buy_link, `channel-${c.id}-buy-link`, 'Buy link of ' + c.title) : '—',
        ]),
        'No channels yet.'));
  }

  /** A read-only text with a Copy button (falls back to selecting it where the clipboard API is off). */
  function copyable(text, id, label) {
    const input = h('input', { id, type: 'text', readonly: true, value: text, class: 'copy-text', 'aria-label': label });
    const button = h('button', {
      type: 'button', class: 'secondary small', 'aria-label': 'Copy ' + label,
      onclick: async () => {
        try {
          await navigator.clipboard.writeText(text);
        } catch {
          input.select();
          document.execCommand('copy');
        }
        say('Copied: ' + text);
      },
    }, 'Copy');
    return h('span', { class: 'copy' }, input, button);
  }

  /** How a channel's (or group's) join requests are answered: [value, words]. */
  const DOORS = [
    ['bot', 'Bot: members approved, others declined'],
    ['mini_app', 'Mini App paywall'],
  ];

  function doorName(door) {
    const d = DOORS.find(([v]) => v === door);
    return d ? d[1] : (door || DOORS[0][1]);
  }

  /**
   * The channel's door with a link to the requests waiting there ("3 waiting at the door"),
   * from one page of `GET /join-requests` (an error says so in place of the count).
   */
  function doorFacts(c, waiting) {
    let count;
    if (waiting instanceof Error) {
      count = h('span', { class: 'error-text' }, 'The requests at the door could not be loaded: ' + describe(waiting));
    } else {
      const n = waiting.items.length;
      const text = waiting.next_after === null ? `${n} waiting at the door` : `more than ${n} waiting at the door`;
      count = n || c.door === 'mini_app'
        ? link(`#/door?channel_id=${c.id}&state=waiting`, text, { id: 'channel-door-waiting' })
        : null;
    }
    return h('span', { id: 'channel-door-fact' }, doorName(c.door), count ? [' · ', count] : null);
  }

  async function renderChannelForm(id) {
    const existing = id ? await api('GET', `/channels/${id}`) : null;
    // The channel's plans and the requests waiting at its door (an error is shown in their
    // place, not instead of the channel).
    const [channelPlans, chans, waiting] = existing
      ? await Promise.all([
        all(`/plans?channel_id=${id}`).catch((err) => err),
        channels(true),
        api('GET', `/join-requests?channel_id=${id}&state=waiting&limit=200`).catch((err) => err),
      ])
      : [null, null, null];
    const { main, live } = page(existing ? `Channel: ${existing.title}` : 'New channel');
    if (!live()) return;
    const c = existing || {
      telegram_chat_id: '', title: '', price_minor: null, currency: 'UAH', billing_period_days: 30,
      grace_period_days: 0, seat_limit: null, active: true, description: null, recurring: false,
      door: 'bot',
    };
    const f = 'channel';
    const input = (name, attrs) => h('input', Object.assign({ id: `${f}-${name}`, name }, attrs));
    const currencyList = h('datalist', { id: 'currency-codes' },
      priceCurrencies().map((code) => h('option', { value: code })));
    const form = h('form', { id: f, class: 'card', method: 'post', novalidate: true },
      h('div', { class: 'grid' },
        field('Title', input('title', { value: c.title, required: true, maxlength: 255 })),
        field('Telegram chat id', input('telegram_chat_id', { value: String(c.telegram_chat_id), inputmode: 'numeric', required: true }),
          'The id of the Telegram channel or group, e.g. -1001234567890.'),
        field('Currency', input('currency', { value: c.currency, list: 'currency-codes', required: true, maxlength: 3, autocapitalize: 'characters' }),
          'ISO 4217 code, or XTR for Telegram Stars.'),
        field('Price', input('price', {
          value: c.price_minor === null ? '' : minorToDecimal(c.price_minor, exponentOf(c.currency)),
          inputmode: 'decimal', required: true,
        }), 'In currency units, e.g. 199.00 (Stars: whole stars).'),
        field('Billing period (days)', input('billing_period_days', { value: String(c.billing_period_days), type: 'number', min: 1, max: 3660, required: true })),
        field('Grace period (days)', input('grace_period_days', { value: String(c.grace_period_days), type: 'number', min: 0, max: 365 })),
        field('Seat limit', input('seat_limit', { value: c.seat_limit === null ? '' : String(c.seat_limit), type: 'number', min: 1 }),
          'Empty for unlimited.')),
      field('Description (shown to buyers)', h('textarea', { id: `${f}-description`, name: 'description', rows: 3, maxlength: 1000 }, c.description || '')),
      translationFields(f, c.translations),
      field('Active (on sale)', input('active', { type: 'checkbox', checked: c.active })),
      field('Recurring (Telegram Stars subscription)', input('recurring', { type: 'checkbox', checked: !!c.recurring }),
        'XTR and a 30-day period only; renews by itself every 30 days.'),
      field('Door', h('select', { id: `${f}-door`, name: 'door' },
        DOORS.map(([v, t]) => h('option', { value: v, selected: v === (c.door || 'bot') }, t))),
      'How join requests to this channel or group are answered. Bot: a member is let in, anyone else declined. '
        + 'Mini App paywall: a member is let in at once, anyone else gets the Mini App to pay or start a trial, '
        + 'and waits at the door until then (needs PUBLIC_URL, and the bot set to handle the chat’s join requests).'),
      existing ? h('div', { class: 'field' }, h('span', { class: 'label' }, 'Paywall URL'),
        existing.paywall_url
          ? copyable(existing.paywall_url, 'channel-paywall-url', 'Paywall URL')
          : h('p', { class: 'hint' }, 'None: set PUBLIC_URL, where the Mini App’s page is served.')) : null,
      existing ? h('div', { class: 'field' }, h('span', { class: 'label' }, 'Buy link'),
        existing.buy_link
          ? copyable(existing.buy_link, 'channel-buy-link', 'Buy link')
          : h('p', { class: 'hint' }, 'None: set TELEGRAM_BOT_USERNAME to sell through the bot.')) : null,
      currencyList,
      h('div', { class: 'actions' },
        h('button', { type: 'submit' }, existing ? 'Save changes' : 'Create channel'),
        link('#/channels', 'Back to channels', { class: 'button secondary' })));
    if (existing) {
      main.append(facts([
        ['Created', when(existing.created_at)],
        ['Updated', when(existing.updated_at)],
        ['Members', link(`#/memberships?channel_id=${existing.id}`, 'List its memberships')],
        ['Member list in Telegram', link(`#/channels/${existing.id}/audit`, 'Audit it', { id: 'channel-audit-link' })],
        ['Bot in the chat', rightsText(existing.telegram_status)],
        ['Door', doorFacts(existing, waiting)],
      ]));
    }
    main.append(form);
    if (existing) {
      const section = h('section', { id: 'channel-plans', 'aria-labelledby': 'channel-plans-title' },
        h('h2', { id: 'channel-plans-title' }, 'Plans'),
        h('p', { class: 'hint' }, 'The ways this channel is sold, in the bot’s order (cheapest first, then position). The default plan carries the price fields above.'));
      if (channelPlans instanceof Error) {
        section.append(h('p', { class: 'error-text' }, 'The plans could not be loaded: ' + describe(channelPlans)));
      } else {
        section.append(plansTable(catalogueOrder(channelPlans), chans, () => renderChannelForm(id)));
      }
      section.append(h('p', {}, link(`#/plans/new?channel_id=${existing.id}`, 'New plan for this channel', { class: 'button' })));
      main.append(section);
      const exempt = await exemptionsSection(existing);
      if (!live()) return;
      main.append(exempt);
    }

    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const v = (name) => form.elements[name].value.trim();
      const body = {};
      const clientErrors = {};
      const currency = v('currency').toUpperCase();
      const price = decimalToMinor(v('price'), exponentOf(currency));
      if (price === null) {
        clientErrors.price = `must be an amount such as ${minorToDecimal(19900, exponentOf(currency))} (${exponentOf(currency)} decimal places at most)`;
      }
      const int = (name) => (v(name) === '' ? null : Number(v(name)));
      if (v('telegram_chat_id') !== '' && !/^-?\d+$/.test(v('telegram_chat_id'))) {
        clientErrors.telegram_chat_id = 'must be a whole number, e.g. -1001234567890';
      }
      const wanted = {
        title: v('title'),
        telegram_chat_id: v('telegram_chat_id') === '' ? null : Number(v('telegram_chat_id')),
        currency,
        price_minor: price,
        billing_period_days: int('billing_period_days'),
        grace_period_days: int('grace_period_days') === null ? 0 : int('grace_period_days'),
        seat_limit: int('seat_limit'),
        description: v('description') === '' ? null : form.elements.description.value,
        active: form.elements.active.checked,
        recurring: form.elements.recurring.checked,
        door: form.elements.door.value,
      };
      const translations = readTranslations(form, clientErrors);
      if (Object.keys(clientErrors).length) {
        showFieldErrors(form, new ApiError(422, { errors: clientErrors }));
        fail(new ApiError(422, { detail: 'Some fields are invalid', errors: clientErrors }));
        return;
      }
      // A new channel sends what was filled in; an edit sends only what changed (a PATCH
      // changes only the fields it names).
      for (const [k, val] of Object.entries(wanted)) {
        if (existing) {
          const before = existing[k] === undefined ? (k === 'recurring' ? false : null) : existing[k];
          if (val !== before) body[k] = val;
        } else if (val !== null && !(k === 'recurring' && val === false) && !(k === 'door' && val === 'bot')) {
          body[k] = val;
        }
      }
      if (JSON.stringify(translations) !== JSON.stringify((existing && existing.translations) || {})) {
        body.translations = translations;
      }
      await saveResource(form, existing, body, {
        path: '/channels',
        name: (saved) => `channel “${saved.title}”`,
        fields: Object.assign({ price_minor: 'price' }, TRANSLATION_FIELDS),
        done: (saved) => {
          channelCache = null;
          planCache = null;
          go(`#/channels/${saved.id}`);
        },
      });
    });
    form.elements.title.focus();
  }

  // ------------------------------------------------------------------ bot rights, exemptions

  /** The overview's banner naming the channels where the bot lost its admin rights (nothing when none). */
  function rightsBanner(list) {
    if (!list.length) return null;
    return h('div', { id: 'rights-banner', class: 'banner warn', role: 'region', 'aria-label': 'Bot rights' },
      h('p', {}, h('strong', {}, 'The bot has lost its admin rights in: '),
        list.map((c, i) => [i ? ', ' : '', link(`#/channels/${c.id}`, c.title)]), '.'),
      h('p', { class: 'hint' }, 'Joins, grants and removals there wait until the bot is an administrator again '
        + 'with the rights to invite users and ban users (checked every few minutes, or at once when Telegram tells us).'));
  }

  function rightsText(status) {
    return status === 'no_rights'
      ? h('span', { id: 'channel-rights' }, badge('no rights', 'no_rights'),
        ' The bot cannot invite or ban users here: access changes wait until it is an administrator with those rights again.')
      : h('span', { id: 'channel-rights' }, badge('ok', 'active'), ' The bot can manage members.');
  }

  /** A channel's exemption list: users its chat may hold without a membership, with add and remove. */
  async function exemptionsSection(channel) {
    const path = `/channels/${channel.id}/exemptions`;
    const section = h('section', { id: 'channel-exemptions', 'aria-labelledby': 'channel-exemptions-title' },
      h('h2', { id: 'channel-exemptions-title' }, 'Exempt users'),
      h('p', { class: 'hint' }, 'Telegram users who may be in the chat without a membership (staff, guests): '
        + 'never removed for joining without access.'));
    const holder = h('div', { id: 'exemptions-list' });
    const draw = async () => {
      let items;
      try {
        items = (await api('GET', path)).items;
      } catch (err) {
        holder.replaceChildren(h('p', { class: 'error-text' }, 'The exemptions could not be loaded: ' + describe(err)));
        return;
      }
      holder.replaceChildren(table('Exempt users', ['Telegram user id', 'Note', 'Since', ''],
        items.map((x) => [
          String(x.telegram_user_id),
          x.note || '—',
          when(x.created_at),
          h('button', {
            type: 'button', class: 'secondary small', 'aria-label': `Remove the exemption of ${x.telegram_user_id}`,
            onclick: async (e) => {
              await busy(e.currentTarget, async () => {
                try {
                  await api('DELETE', `${path}/${x.telegram_user_id}`);
                  say(`User ${x.telegram_user_id} is no longer exempt.`);
                  await draw();
                } catch (err) { fail(err); }
              });
            },
          }, 'Remove'),
        ]), 'No exempt users.'));
    };
    const f = 'exemption';
    const form = h('form', { id: f, class: 'card', method: 'post', novalidate: true },
      h('div', { class: 'grid' },
        field('Telegram user id', h('input', { id: `${f}-telegram_user_id`, name: 'telegram_user_id', inputmode: 'numeric', required: true })),
        field('Note', h('input', { id: `${f}-note`, name: 'note', maxlength: 255 }), 'Optional: who they are.')),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Add exemption')));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const raw = form.elements.telegram_user_id.value.trim();
      const note = form.elements.note.value.trim();
      if (!/^\d+$/.test(raw)) {
        const errors = { telegram_user_id: 'must be a positive whole number' };
        showFieldErrors(form, new ApiError(422, { errors }));
        fail(new ApiError(422, { detail: 'Some fields are invalid', errors }));
        return;
      }
      const body = { telegram_user_id: Number(raw) };
      if (note) body.note = note;
      await busy(form, async () => {
        try {
          await post(form, path, body);
          showFieldErrors(form, null);
          form.reset();
          say(`User ${raw} is exempt in “${channel.title}”.`);
          await draw();
        } catch (err) {
          showFieldErrors(form, err);
          fail(err);
        }
      });
    });
    await draw();
    section.append(holder, form);
    return section;
  }

  // ------------------------------------------------------------------ plans

  async function plans(refresh) {
    if (!planCache || refresh) {
      const list = await all('/plans');
      planCache = new Map(list.map((p) => [p.id, p]));
    }
    return planCache;
  }

  function planName(map, id) {
    const p = map.get(id);
    return p ? p.title : 'Plan #' + id;
  }

  /** "30 days", "1 day", or "lifetime" (a plan without a period). */
  function periodText(days) {
    if (days === null || days === undefined) return 'lifetime';
    return `${days} day${days === 1 ? '' : 's'}`;
  }

  /** The bot's catalogue order: cheapest first, then position, then id. */
  function catalogueOrder(list) {
    return list.slice().sort((a, b) => (a.price_minor - b.price_minor) || (a.position - b.position) || (a.id - b.id));
  }

  /** Turns a plan or a promo code on or off (`PATCH … {"active"}`), then redraws. */
  function activeToggle(path, item, label, redraw) {
    const b = h('button', {
      type: 'button', class: item.active ? 'danger small' : 'secondary small',
      'aria-label': `${item.active ? 'Deactivate' : 'Activate'} ${label}`,
    }, item.active ? 'Deactivate' : 'Activate');
    b.addEventListener('click', () => busy(b, async () => {
      try {
        const saved = await api('PATCH', path, { active: !item.active });
        planCache = null;
        await redraw();
        say(`${label[0].toUpperCase()}${label.slice(1)} is ${saved.active ? 'active again' : 'deactivated'}.`);
      } catch (err) { fail(err); }
    }));
    return b;
  }

  function plansTable(items, chans, redraw) {
    return table('Plans',
      ['Plan', 'Channels', 'Kind', 'Price', 'Period', 'Position', 'Status', 'Buy link', 'Actions'],
      items.map((p) => [
        [link(`#/plans/${p.id}`, p.title), p.is_default ? [' ', badge('default')] : null],
        [p.channel_ids.map((c, i) => [i ? ' + ' : '', link(`#/channels/${c}`, channelName(chans, c))]),
          p.channel_ids.length > 1 ? [' ', badge('bundle')] : null],
        badge(p.kind),
        p.kind === 'trial' ? 'free' : money(p.price_minor, p.currency),
        h('span', { class: 'nowrap' }, periodText(p.period_days)),
        String(p.position),
        [p.active ? badge('active') : badge('inactive'), p.recurring ? [' ', badge('recurring')] : null],
        p.buy_link ? copyable(p.buy_link, `plan-${p.id}-buy-link`, 'Buy link of plan ' + p.title) : '—',
        activeToggle(`/plans/${p.id}`, p, `plan “${p.title}”`, redraw),
      ]), 'No plans.');
  }

  async function renderPlans(params) {
    const { main, live } = page('Plans');
    const chans = await channels(true);
    if (!live()) return;
    const channelId = params.get('channel_id') || '';
    const active = params.get('active') || '';
    const filter = h('form', { id: 'plfilter', class: 'card inline', method: 'post' },
      field('Channel', h('select', { id: 'plfilter-channel', name: 'channel_id' },
        h('option', { value: '' }, 'All channels'),
        Array.from(chans.values()).map((c) => h('option', { value: String(c.id), selected: String(c.id) === channelId }, c.title)))),
      field('Status', h('select', { id: 'plfilter-active', name: 'active' },
        [['', 'Any status'], ['true', 'active'], ['false', 'inactive']]
          .map(([v, t]) => h('option', { value: v, selected: v === active }, t)))),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Show')));
    filter.addEventListener('submit', (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      if (filter.elements.channel_id.value) q.set('channel_id', filter.elements.channel_id.value);
      if (filter.elements.active.value) q.set('active', filter.elements.active.value);
      go('#/plans?' + q);
    });
    main.append(
      h('p', {}, link('#/plans/new' + (channelId ? '?channel_id=' + channelId : ''), 'New plan', { class: 'button' })),
      filter);
    const q = new URLSearchParams();
    if (channelId) q.set('channel_id', channelId);
    if (active) q.set('active', active);
    const section = h('section', {});
    main.append(section);
    await pagedList(section, '/plans' + (q.toString() ? '?' + q : ''), live,
      (items) => plansTable(items, chans, () => renderPlans(params)));
  }

  async function renderPlanForm(id, params) {
    const [existing, chans] = await Promise.all([id ? api('GET', `/plans/${id}`) : null, channels(true)]);
    const { main, live } = page(existing ? `Plan: ${existing.title}` : 'New plan');
    if (!live()) return;
    if (!chans.size) {
      main.append(h('p', {}, 'A plan sells channels: ', link('#/channels/new', 'create a channel first.')));
      return;
    }
    const preset = chans.get(Number(params.get('channel_id'))) || chans.values().next().value;
    const p = existing || {
      title: '', description: null, channel_ids: [preset.id], kind: 'paid', price_minor: null,
      currency: preset.currency, period_days: preset.billing_period_days, recurring: false,
      active: true, position: 0, is_default: false,
    };
    const f = 'plan';
    const input = (name, attrs) => h('input', Object.assign({ id: `${f}-${name}`, name }, attrs));
    const first = h('select', { id: `${f}-channel_ids`, name: 'channel_id', required: true },
      Array.from(chans.values()).map((c) => h('option', { value: String(c.id), selected: c.id === p.channel_ids[0] },
        `${c.title} (${c.currency})${c.active ? '' : ' (inactive)'}`)));
    const also = Array.from(chans.values()).map((c) => field(c.title,
      input(`bundle-${c.id}`, { type: 'checkbox', checked: p.channel_ids.slice(1).includes(c.id), dataset: { channel: String(c.id) } })));
    const bundle = h('fieldset', { class: 'field group', id: `${f}-bundle` },
      h('legend', {}, 'Also grants (a bundle)'),
      h('p', { class: 'hint' }, 'One payment grants every channel ticked here too; all of them in the plan’s currency.'),
      also);
    const kind = h('select', { id: `${f}-kind`, name: 'kind' },
      [['paid', 'paid'], ['trial', 'free trial (once per buyer and channel)']]
        .map(([v, t]) => h('option', { value: v, selected: v === p.kind }, t)));
    const lifetime = input('lifetime', { type: 'checkbox', checked: p.period_days === null });
    const period = input('period_days', { value: p.period_days === null ? '' : String(p.period_days), type: 'number', min: 1, max: 3660 });
    const price = input('price', {
      value: p.price_minor === null ? '' : minorToDecimal(p.price_minor, exponentOf(p.currency)),
      inputmode: 'decimal',
    });
    const currency = input('currency', { value: p.currency, list: 'currency-codes', maxlength: 3, autocapitalize: 'characters' });
    const sync = () => {
      const firstId = Number(first.value);
      for (const box of bundle.querySelectorAll('input')) {
        const self = Number(box.dataset.channel) === firstId;
        box.disabled = self;
        box.closest('.field').hidden = self;
        if (self) box.checked = false;
      }
      const trial = kind.value === 'trial';
      price.disabled = trial;
      if (trial) { price.value = '0'; lifetime.checked = false; }
      lifetime.disabled = trial;
      period.disabled = lifetime.checked;
      if (lifetime.checked) period.value = '';
      period.max = trial ? 90 : 3660;
    };
    first.addEventListener('change', () => {
      const c = chans.get(Number(first.value));
      if (c && !existing) currency.value = c.currency;
      sync();
    });
    kind.addEventListener('change', () => {
      if (kind.value === 'paid' && price.value === '0') price.value = '';
      sync();
    });
    lifetime.addEventListener('change', sync);
    const cryptoPrices = p.crypto_prices || {};
    const crypto = h('fieldset', { class: 'field group', id: `${f}-crypto_prices`, tabindex: '-1', 'aria-describedby': `${f}-crypto_prices-error` },
      h('legend', {}, 'Prices in crypto (Crypto Pay)'),
      h('p', { class: 'hint' }, 'Sold through @CryptoBot at exactly these amounts (no exchange rate); empty: not sold in that asset. E.g. USDT 4.99, TON 1.5.'),
      h('div', { class: 'grid' }, CRYPTO_ASSETS.map((asset) => field(asset,
        input(`crypto_prices.${asset}`, { value: cryptoPrices[asset] || '', inputmode: 'decimal', dataset: { asset } })))),
      h('p', { class: 'field-error', id: `${f}-crypto_prices-error` }));

    const form = h('form', { id: f, class: 'card', method: 'post', novalidate: true },
      p.is_default
        ? h('p', { class: 'hint' }, 'This is the channel’s default plan: its price, currency, period and recurring are the channel’s own fields (a change here changes the channel too); it stays a paid plan of that one channel with a period.')
        : null,
      h('div', { class: 'grid' },
        field('Title', input('title', { value: p.title, required: true, maxlength: 255 }), 'Shown to buyers in the bot.'),
        field('Channel', first, 'The first channel: the channel of the plan’s orders.'),
        field('Kind', kind),
        field('Currency', currency, 'The channels’ currency (ISO 4217, or XTR for Telegram Stars).'),
        field('Price', price, 'In currency units, e.g. 199.00 (Stars: whole stars); a trial is free.'),
        field('Period (days)', period, 'Days of access per purchase; a trial 1..90.'),
        field('Position', input('position', { value: String(p.position), type: 'number', step: 1 }), 'Display order among plans of the same price.')),
      field('Lifetime (no end)', lifetime, 'Access that never expires; buying it again is refused while it is live.'),
      bundle,
      crypto,
      field('Description (shown to buyers)', h('textarea', { id: `${f}-description`, name: 'description', rows: 3, maxlength: 1000 }, p.description || '')),
      translationFields(f, p.translations),
      field('Active (on sale)', input('active', { type: 'checkbox', checked: p.active })),
      field('Recurring (Telegram Stars subscription)', input('recurring', { type: 'checkbox', checked: !!p.recurring }),
        'XTR and a 30-day period only; renews by itself every 30 days.'),
      existing ? h('div', { class: 'field' }, h('span', { class: 'label' }, 'Buy link'),
        existing.buy_link
          ? copyable(existing.buy_link, 'plan-buy-link', 'Buy link')
          : h('p', { class: 'hint' }, 'None: set TELEGRAM_BOT_USERNAME to sell through the bot.')) : null,
      h('datalist', { id: 'currency-codes' }, priceCurrencies().map((code) => h('option', { value: code }))),
      h('div', { class: 'actions' },
        h('button', { type: 'submit' }, existing ? 'Save changes' : 'Create plan'),
        link(`#/channels/${p.channel_ids[0]}`, 'Back to the channel', { class: 'button secondary' }),
        link('#/plans', 'All plans', { class: 'button secondary' })));
    if (existing) {
      main.append(facts([
        ['Created', when(existing.created_at)],
        ['Updated', when(existing.updated_at)],
        ['Promo codes', link('#/promo-codes', 'List the promo codes')],
      ]));
    }
    main.append(form);
    sync();

    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const v = (name) => form.elements[name].value.trim();
      const clientErrors = {};
      const cur = currency.value.trim().toUpperCase();
      const trial = kind.value === 'trial';
      let priceMinor = 0;
      if (!trial) {
        priceMinor = decimalToMinor(price.value, exponentOf(cur));
        if (priceMinor === null) {
          clientErrors.price = `must be an amount such as ${minorToDecimal(19900, exponentOf(cur))} (${exponentOf(cur)} decimal places at most)`;
        }
      }
      const channelIds = [Number(first.value)].concat(Array.from(bundle.querySelectorAll('input'))
        .filter((box) => box.checked && !box.disabled).map((box) => Number(box.dataset.channel)));
      const wanted = {
        title: v('title'),
        description: v('description') === '' ? null : form.elements.description.value,
        channel_ids: channelIds,
        kind: kind.value,
        price_minor: priceMinor,
        currency: cur,
        period_days: lifetime.checked ? null : (period.value.trim() === '' ? undefined : Number(period.value)),
        position: v('position') === '' ? 0 : Number(v('position')),
        active: form.elements.active.checked,
        recurring: form.elements.recurring.checked,
        translations: readTranslations(form, clientErrors),
        crypto_prices: readCryptoPrices(crypto),
      };
      if (wanted.period_days === undefined) clientErrors.period_days = 'is required (or tick Lifetime)';
      if (Object.keys(clientErrors).length) {
        showFieldErrors(form, new ApiError(422, { errors: clientErrors }));
        fail(new ApiError(422, { detail: 'Some fields are invalid', errors: clientErrors }));
        return;
      }
      // A new plan sends every field (a null period is lifetime); an edit sends what changed.
      const body = {};
      for (const [k, val] of Object.entries(wanted)) {
        if (!existing) {
          if (!(k === 'description' && val === null)) body[k] = val;
        } else if (JSON.stringify(val) !== JSON.stringify(existing[k] === undefined ? null : existing[k])) {
          body[k] = val;
        }
      }
      await saveResource(form, existing, body, {
        path: '/plans',
        name: (saved) => `plan “${saved.title}”`,
        fields: Object.assign({ price_minor: 'price' }, TRANSLATION_FIELDS),
        done: (saved) => {
          planCache = null;
          go(`#/plans/${saved.id}`);
        },
      });
    });
    form.elements.title.focus();
  }

  /** The crypto prices typed into `fieldset`, by asset as the server orders them; null when
   * none. The server checks them (an asset's decimal places, a positive amount). */
  function readCryptoPrices(fieldset) {
    const prices = {};
    for (const box of Array.from(fieldset.querySelectorAll('input[data-asset]'))
      .sort((a, b) => (a.dataset.asset < b.dataset.asset ? -1 : 1))) {
      const text = box.value.trim();
      if (text !== '') prices[box.dataset.asset] = text;
    }
    return Object.keys(prices).length ? prices : null;
  }

  // ------------------------------------------------------------------ promo codes

  /** "25 % off", or "₴50.00 off". */
  function discountText(c) {
    return c.percent_off !== null && c.percent_off !== undefined
      ? `${c.percent_off} % off`
      : [money(c.amount_off_minor, c.currency), ' off'];
  }

  /** "3 of 10", or "3 (no limit)"; with the uses pending orders hold now, when the API says. */
  function usesText(c) {
    const used = c.max_redemptions === null ? `${c.redemptions} (no limit)` : `${c.redemptions} of ${c.max_redemptions}`;
    return c.held ? `${used}, ${c.held} held by pending orders` : used;
  }

  async function renderPromoCodes() {
    const { main, live } = page('Promo codes');
    const planMap = await plans(true);
    if (!live()) return;
    main.append(
      h('p', {}, link('#/promo-codes/new', 'New promo code', { class: 'button' })),
      h('p', { class: 'hint' }, 'Uses are paid orders with the code (a pending order holds one use for a while, like a seat hold). A used code cannot be deleted: deactivate it.'));
    const section = h('section', {});
    main.append(section);
    await pagedList(section, '/promo-codes', live, (items) => table('Promo codes',
      ['Code', 'Discount', 'Plans', 'Uses', 'Per buyer', 'Expires', 'Status', 'Actions'],
      items.map((c) => [
        link(`#/promo-codes/${c.id}`, h('code', { class: 'nowrap' }, c.code)),
        discountText(c),
        c.plan_ids === null
          ? 'every paid plan'
          : c.plan_ids.map((pid, i) => [i ? ', ' : '', link(`#/plans/${pid}`, planName(planMap, pid))]),
        usesText(c),
        [String(c.per_buyer_limit), c.first_purchase_only ? [' ', h('span', { class: 'muted' }, '(first purchase only)')] : null],
        c.expires_at ? [when(c.expires_at), new Date(c.expires_at) < new Date() ? [' ', badge('expired')] : null] : 'never',
        c.active ? badge('active') : badge('inactive'),
        activeToggle(`/promo-codes/${c.id}`, c, `promo code ${c.code}`, () => renderPromoCodes()),
      ]), 'No promo codes yet.'));
  }

  async function renderPromoForm(id) {
    const [existing, planMap] = await Promise.all([id ? api('GET', `/promo-codes/${id}`) : null, plans(true)]);
    const { main, live } = page(existing ? `Promo code ${existing.code}` : 'New promo code');
    if (!live()) return;
    const c = existing || {
      code: '', percent_off: null, amount_off_minor: null, currency: null, plan_ids: null,
      max_redemptions: null, per_buyer_limit: 1, expires_at: null, first_purchase_only: false, active: true,
    };
    const f = 'promo';
    const input = (name, attrs) => h('input', Object.assign({ id: `${f}-${name}`, name }, attrs));
    const byAmount = c.amount_off_minor !== null && c.amount_off_minor !== undefined;
    const kind = h('select', { id: `${f}-discount`, name: 'discount' },
      [['percent', 'percent off'], ['amount', 'amount off']].map(([v, t]) => h('option', { value: v, selected: (v === 'amount') === byAmount }, t)));
    const percentOff = input('percent_off', { value: c.percent_off === null ? '' : String(c.percent_off), type: 'number', min: 1, max: 100 });
    const currency = input('currency', { value: c.currency || '', list: 'currency-codes', maxlength: 3, autocapitalize: 'characters' });
    const amount = input('amount_off', {
      value: byAmount ? minorToDecimal(c.amount_off_minor, exponentOf(c.currency)) : '', inputmode: 'decimal',
    });
    const paid = Array.from(planMap.values()).filter((p) => p.kind === 'paid');
    const planBoxes = h('fieldset', { class: 'field group', id: `${f}-plan_ids`, tabindex: '-1', 'aria-describedby': `${f}-plan_ids-error` },
      h('legend', {}, 'Plans'),
      h('p', { class: 'hint' }, 'None ticked: every paid plan.'),
      paid.length
        ? paid.map((p) => field(`${p.title} (${p.kind === 'trial' ? 'free' : minorToDecimal(p.price_minor, exponentOf(p.currency)) + ' ' + p.currency}, ${periodText(p.period_days)})`,
          input(`plan-${p.id}`, { type: 'checkbox', checked: !!(c.plan_ids && c.plan_ids.includes(p.id)), dataset: { plan: String(p.id) } })))
        : h('p', { class: 'empty' }, 'No paid plans yet.'),
      h('p', { class: 'field-error', id: `${f}-plan_ids-error` }));
    const sync = () => {
      // Only the inputs of the kind of discount chosen are shown and sent.
      const pct = kind.value === 'percent';
      for (const [el, off] of [[percentOff, !pct], [amount, pct], [currency, pct]]) {
        el.disabled = off;
        el.closest('.field').hidden = off;
      }
    };
    kind.addEventListener('change', sync);
    const form = h('form', { id: f, class: 'card', method: 'post', novalidate: true },
      h('div', { class: 'grid' },
        field('Code', input('code', { value: c.code, required: true, maxlength: 32, autocapitalize: 'characters', autocomplete: 'off' }),
          '3..32 of A-Z, 0-9, _ and -; buyers may type it in any case.'),
        field('Discount', kind),
        field('Percent off', percentOff, '1..100; 100 makes a free order, granted at once.'),
        field('Amount off', amount, 'In currency units; never below one minor unit.'),
        field('Currency of the amount', currency, 'The plans’ currency.'),
        field('Uses at most', input('max_redemptions', { value: c.max_redemptions === null ? '' : String(c.max_redemptions), type: 'number', min: 1 }),
          'Empty for unlimited.'),
        field('Uses per buyer', input('per_buyer_limit', { value: String(c.per_buyer_limit), type: 'number', min: 1 })),
        field('Expires at', input('expires_at', { value: c.expires_at ? toLocalInput(c.expires_at) : '', type: 'datetime-local', step: 60 }),
          `Empty: never. In ${timeZone}.`)),
      planBoxes,
      field('First purchase only', input('first_purchase_only', { type: 'checkbox', checked: c.first_purchase_only }),
        'Only buyers with no paid order of the plan’s channels.'),
      field('Active', input('active', { type: 'checkbox', checked: c.active })),
      h('datalist', { id: 'currency-codes' }, priceCurrencies().map((code) => h('option', { value: code }))),
      h('div', { class: 'actions' },
        h('button', { type: 'submit' }, existing ? 'Save changes' : 'Create promo code'),
        link('#/promo-codes', 'Back to promo codes', { class: 'button secondary' })));
    if (existing) {
      main.append(facts([
        ['Uses', usesText(existing)],
        ['Created', when(existing.created_at)],
      ]));
    }
    main.append(form);
    sync();

    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const v = (name) => form.elements[name].value.trim();
      const int = (name) => (v(name) === '' ? null : Number(v(name)));
      const clientErrors = {};
      const pct = kind.value === 'percent';
      const cur = currency.value.trim().toUpperCase();
      let amountMinor = null;
      if (!pct) {
        amountMinor = decimalToMinor(amount.value, exponentOf(cur));
        if (amountMinor === null) clientErrors.amount_off_minor = `must be an amount such as ${minorToDecimal(5000, exponentOf(cur))}`;
      }
      const ticked = Array.from(planBoxes.querySelectorAll('input')).filter((b) => b.checked).map((b) => Number(b.dataset.plan));
      const wanted = {
        code: v('code').toUpperCase(),
        percent_off: pct ? int('percent_off') : null,
        amount_off_minor: amountMinor,
        currency: pct ? null : cur,
        plan_ids: ticked.length ? ticked : null,
        max_redemptions: int('max_redemptions'),
        per_buyer_limit: int('per_buyer_limit') === null ? 1 : int('per_buyer_limit'),
        expires_at: v('expires_at') === '' ? null : new Date(v('expires_at')).toISOString(),
        first_purchase_only: form.elements.first_purchase_only.checked,
        active: form.elements.active.checked,
      };
      if (Object.keys(clientErrors).length) {
        showFieldErrors(form, new ApiError(422, { errors: clientErrors }), { amount_off_minor: 'amount_off' });
        fail(new ApiError(422, { detail: 'Some fields are invalid', errors: clientErrors }));
        return;
      }
      // A new code sends what was filled in; an edit sends only what changed. An unchanged
      // expiry is compared at the minute the input shows.
      const body = {};
      for (const [k, val] of Object.entries(wanted)) {
        if (!existing) {
          if (val !== null) body[k] = val;
          continue;
        }
        const before = existing[k] === undefined ? null : existing[k];
        if (k === 'expires_at' && before !== null && val !== null && toLocalInput(before) === v('expires_at')) continue;
        if (JSON.stringify(val) !== JSON.stringify(before)) body[k] = val;
      }
      await saveResource(form, existing, body, {
        path: '/promo-codes',
        name: (saved) => `promo code ${saved.code}`,
        fields: { amount_off_minor: 'amount_off' },
        done: (saved, created) => go(created ? '#/promo-codes' : `#/promo-codes/${saved.id}`),
      });
    });
    form.elements.code.focus();
  }

  // ------------------------------------------------------------------ subscribers

  async function renderSubscribers(params) {
    const { main, live } = page('Subscribers');
    const q = (params.get('q') || '').trim();
    const search = h('form', { id: 'search', class: 'card inline', role: 'search', method: 'post' },
      field('Telegram id or username', h('input', { id: 'search-q', name: 'q', type: 'search', value: q, autocomplete: 'off' })),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Search')));
    search.addEventListener('submit', (e) => {
      e.preventDefault();
      const text = search.elements.q.value.trim();
      go(text ? '#/subscribers?q=' + encodeURIComponent(text) : '#/subscribers');
    });
    main.append(search);

    let path = '/subscribers';
    if (/^\d+$/.test(q)) path += '?telegram_user_id=' + q;
    else if (q) path += '?username=' + encodeURIComponent(q.replace(/^@/, ''));
    const csvPath = '/subscribers.csv' + (path.includes('?') ? path.slice(path.indexOf('?')) : '');
    const results = h('section', { 'aria-labelledby': 'sub-results' },
      h('h2', { id: 'sub-results' }, q ? `Results for “${q}”` : 'All subscribers'),
      h('p', { class: 'actions' }, downloadButton('Download CSV', csvPath, 'subscribers.csv')));
    main.append(results);
    await pagedList(results, path, live, (items) => table('Subscribers',
      ['Subscriber', 'Telegram id', 'Username', 'Name', 'Since'],
      items.map((s) => [
        link(`#/subscribers/${s.id}`, '#' + s.id),
        String(s.telegram_user_id),
        s.username ? '@' + s.username : '—',
        s.display_name || '—',
        when(s.created_at),
      ]), q ? 'No subscriber matches.' : 'No subscribers yet.'));

    const f = 'new-subscriber';
    const create = h('form', { id: f, class: 'card', method: 'post', novalidate: true },
      h('h2', {}, 'New subscriber'),
      h('div', { class: 'grid' },
        field('Telegram user id', h('input', { id: `${f}-telegram_user_id`, name: 'telegram_user_id', inputmode: 'numeric', required: true })),
        field('Username', h('input', { id: `${f}-username`, name: 'username', maxlength: 64 })),
        field('Display name', h('input', { id: `${f}-display_name`, name: 'display_name', maxlength: 128 })),
        field('Bot language', languageSelect(`${f}-language`, null))),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create subscriber')));
    create.addEventListener('submit', async (e) => {
      e.preventDefault();
      const v = (n) => create.elements[n].value.trim();
      const body = { telegram_user_id: v('telegram_user_id') === '' ? null : Number(v('telegram_user_id')) };
      if (v('username')) body.username = v('username').replace(/^@/, '');
      if (v('display_name')) body.display_name = v('display_name');
      if (v('language')) body.language = v('language');
      await busy(create, async () => {
        try {
          const s = await post(create, '/subscribers', body);
          say(`Created subscriber #${s.id}.`);
          go(`#/subscribers/${s.id}`);
        } catch (err) {
          showFieldErrors(create, err);
          fail(err);
        }
      });
    });
    main.append(create);
  }

  /** The languages the bot speaks, each in its own name. */
  const LANGUAGES = [['en', 'English'], ['uk', 'Українська'], ['ru', 'Русский']];

  /** A subscriber's bot language: one of LANGUAGES, or the default (empty value). */
  function languageSelect(id, current) {
    return h('select', { id, name: 'language' },
      h('option', { value: '', selected: !current }, 'Default (their Telegram app’s, else the bot’s)'),
      LANGUAGES.map(([code, name]) => h('option', { value: code, selected: current === code }, `${name} (${code})`)));
  }

  function languageName(code) {
    const found = LANGUAGES.find(([c]) => c === code);
    return found ? `${found[1]} (${code})` : 'Default';
  }

  /** A channel's or plan's title and description per language (`translations`). */
  function translationFields(f, translations) {
    const tr = translations || {};
    return h('fieldset', { class: 'group translations' },
      h('legend', {}, 'Translations'),
      h('p', { class: 'hint' }, 'What buyers who read the bot in that language see; left empty, they see the title and description above.'),
      LANGUAGES.map(([code, name]) => h('div', { class: 'grid' },
        field(`Title in ${name}`, h('input', { id: `${f}-tr-${code}-title`, name: `tr-${code}-title`, maxlength: 255, value: (tr[code] && tr[code].title) || '' })),
        field(`Description in ${name}`, h('textarea', { id: `${f}-tr-${code}-description`, name: `tr-${code}-description`, rows: 2, maxlength: 1000 },
          (tr[code] && tr[code].description) || '')))));
  }

  /** The `translations` the fields say; a description without a title is a client error. */
  function readTranslations(form, clientErrors) {
    const out = {};
    for (const [code] of LANGUAGES) {
      const title = form.elements[`tr-${code}-title`].value.trim();
      const description = form.elements[`tr-${code}-description`].value.trim();
      if (title) out[code] = { title, description: description || null };
      else if (description) clientErrors[`tr-${code}-title`] = 'is needed with a description';
    }
    return out;
  }

  /** The API's field names of translations, mapped to their inputs. */
  const TRANSLATION_FIELDS = Object.fromEntries(LANGUAGES.flatMap(([code]) => [
    [`translations.${code}.title`, `tr-${code}-title`],
    [`translations.${code}.description`, `tr-${code}-description`],
  ]));

  /** Draws a keyset-paged list into `container` with a "Load more" button. */
  async function pagedList(container, path, live, draw) {
    const items = [];
    let after = 0;
    const slot = h('div');
    const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Load more');
    container.append(slot, more);
    const load = async () => {
      const sep = path.includes('?') ? '&' : '?';
      const p = await api('GET', `${path}${sep}limit=50&after=${after}`);
      if (!live()) return;
      items.push(...p.items);
      slot.replaceChildren(await draw(items));
      after = p.next_after;
      more.hidden = after === null;
    };
    more.addEventListener('click', () => busy(more, () => load().catch(fail)));
    await load();
  }

  /**
   * A button that downloads `/api<path>` (a CSV export) as `filename`. The token is in memory
   * only, so the file is fetched with it and handed to the browser as a blob.
   */
  function downloadButton(label, path, filename) {
    const b = h('button', { type: 'button', class: 'secondary small csv' }, label);
    b.addEventListener('click', () => busy(b, async () => {
      try {
        const res = await fetch('/api' + path, {
          headers: { authorization: 'Bearer ' + session.token, accept: 'text/csv' },
          cache: 'no-store', credentials: 'omit',
        });
        if (!res.ok) {
          let data = null;
          try { data = await res.json(); } catch { /* not a problem document */ }
          throw new ApiError(res.status, data || { detail: res.statusText });
        }
        const blob = await res.blob();
        const text = await blob.text();
        const rows = Math.max(0, text.split('\r\n').filter((l) => l).length - 1);
        const url = URL.createObjectURL(blob);
        const a = h('a', { href: url, download: filename, hidden: true });
        document.body.append(a);
        a.click();
        a.remove();
        setTimeout(() => URL.revokeObjectURL(url), 10000);
        say(`Downloaded ${filename}: ${rows} ${rows === 1 ? 'row' : 'rows'}.`);
      } catch (err) { fail(err); }
    }));
    return b;
  }

  async function renderSubscriber(id, params) {
    const [s, chans, planMap, memberships, orders, payments] = await Promise.all([
      api('GET', `/subscribers/${id}`),
      channels(),
      // Plan titles only name the orders' plans: without them the orders show plan ids.
      plans().catch(() => new Map()),
      all(`/memberships?subscriber_id=${id}`),
      all(`/orders?subscriber_id=${id}`),
      all(`/payments?subscriber_id=${id}`),
    ]);
    const events = await Promise.all(memberships.map((m) => all(`/memberships/${m.id}/events`)));
    const name = s.username ? '@' + s.username : (s.display_name || `#${s.id}`);
    const { main, live } = page(`Subscriber ${name}`);
    if (!live()) return;
    main.append(facts([
      ['Subscriber', '#' + s.id],
      ['Telegram user id', String(s.telegram_user_id)],
      ['Username', s.username ? '@' + s.username : '—'],
      ['Display name', s.display_name || '—'],
      ['Bot language', languageName(s.language)],
      ['Broadcasts and automations', s.marketing_opt_out
        ? h('span', { id: 'sub-opt-out' }, badge('said /stop', 'stopped'),
          ' Gets none until they send /start again; messages about their own access and payments still go.')
        : h('span', { id: 'sub-opt-out' }, 'Gets them (has not said /stop).')],
      ['Reachable', s.reachable === false
        ? h('span', { id: 'sub-reachable' }, badge('blocked the bot', 'blocked'),
          ' Telegram refused a message: skipped by broadcasts and automations until they write to the bot again.')
        : h('span', { id: 'sub-reachable' }, 'Yes (has not blocked the bot).')],
      ['Created', when(s.created_at)],
    ]));

    // The language the bot speaks to them.
    const lf = 'sub-language';
    const langForm = h('form', { id: lf, class: 'card', method: 'post', novalidate: true },
      h('h2', {}, 'Bot language'),
      h('p', { class: 'hint' }, 'The bot writes to this buyer in this language. They can change it themselves with /language.'),
      h('div', { class: 'grid' }, field('Language', languageSelect(`${lf}-language`, s.language))),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Save language')));
    langForm.addEventListener('submit', async (e) => {
      e.preventDefault();
      const code = langForm.elements.language.value || null;
      await busy(langForm, async () => {
        try {
          await api('PATCH', `/subscribers/${s.id}`, { language: code });
          await renderSubscriber(id, new URLSearchParams());
          say(`The bot now writes to this subscriber in ${languageName(code)}.`);
        } catch (err) {
          showFieldErrors(langForm, err);
          fail(err);
        }
      });
    });
    main.append(langForm);

    // Memberships, with corrections, deletes and history.
    const ms = h('section', { 'aria-labelledby': 'sub-memberships' }, h('h2', { id: 'sub-memberships' }, 'Memberships'));
    ms.append(table('Memberships', ['Channel', 'Status', 'Expires', 'Actions'],
      memberships.map((m) => [
        link(`#/channels/${m.channel_id}`, channelName(chans, m.channel_id)),
        badge(m.status),
        when(m.expires_at),
        h('span', { class: 'row-actions' },
          h('button', { type: 'button', class: 'secondary small', 'aria-expanded': 'false', 'aria-controls': `correct-${m.id}`,
            onclick: (e) => {
              const panel = $(`correct-${m.id}`);
              panel.hidden = !panel.hidden;
              e.currentTarget.setAttribute('aria-expanded', String(!panel.hidden));
              if (!panel.hidden) panel.querySelector('input').focus();
            } }, 'Correct'),
          h('button', { type: 'button', class: 'danger small', onclick: () => deleteMembership(m, chans, s) }, 'Delete')),
      ]), 'No memberships.'));
    for (const m of memberships) ms.append(correctionForm(m, chans));
    memberships.forEach((m, i) => {
      ms.append(h('details', { class: 'history' },
        h('summary', {}, `History of ${channelName(chans, m.channel_id)} (${events[i].length} event${events[i].length === 1 ? '' : 's'})`),
        table('Membership events', ['When', 'Change', 'Expires before → after', 'Cause'],
          events[i].map((ev) => [
            when(ev.at),
            `${ev.from_status || 'new'} → ${ev.to_status}`,
            [when(ev.expires_at_before), ' → ', when(ev.expires_at_after)],
            ev.payment_id ? `${ev.cause} (payment #${ev.payment_id})` : ev.cause,
          ]), 'No events.')));
    });
    main.append(ms);

    // Grant or extend.
    const f = 'grant';
    const preset = Number(params.get('grant_channel')) || null;
    const select = h('select', { id: `${f}-channel_id`, name: 'channel_id', required: true },
      Array.from(chans.values()).map((c) => h('option', { value: String(c.id), selected: c.id === preset },
        `${c.title}${c.active ? '' : ' (inactive)'}`)));
    const firstChannel = chans.get(preset) || chans.values().next().value;
    const days = h('input', { id: `${f}-days`, name: 'days', type: 'number', min: 1, max: 3660, required: true,
      value: String(firstChannel ? firstChannel.billing_period_days : 30) });
    select.addEventListener('change', () => {
      const c = chans.get(Number(select.value));
      if (c) days.value = String(c.billing_period_days);
    });
    const grant = h('form', { id: f, class: 'card', method: 'post', novalidate: true },
      h('h2', {}, 'Grant or extend'),
      h('p', { class: 'hint' }, 'Adds the days to the later of now and the current expiry, and makes the membership active (the same path as a payment).'),
      chans.size
        ? [h('div', { class: 'grid' }, field('Channel', select), field('Days', days)),
          h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Grant days'))]
        : h('p', {}, 'No channels yet. ', link('#/channels/new', 'Create one first.')));
    grant.addEventListener('submit', async (e) => {
      e.preventDefault();
      const body = { subscriber_id: s.id, channel_id: Number(select.value), days: Number(days.value) };
      await busy(grant, async () => {
        try {
          const m = await post(grant, '/memberships', body);
          await renderSubscriber(id, new URLSearchParams());
          say(`Granted ${body.days} days of ${channelName(chans, body.channel_id)}: ${m.status} ${untilText(m.expires_at)}.`);
        } catch (err) {
          showFieldErrors(grant, err);
          fail(err);
        }
      });
    });
    main.append(grant);
    if (preset) select.focus();

    main.append(h('section', { 'aria-labelledby': 'sub-orders' }, h('h2', { id: 'sub-orders' }, 'Orders'),
      table('Orders', ['Order', 'Plan', 'Channel', 'List price', 'Discount', 'Code', 'Amount', 'Status', 'Created', 'Paid'],
        orders.map((o) => [
          [`#${o.id} `, h('code', {}, o.reference)],
          o.plan_id ? link(`#/plans/${o.plan_id}`, planName(planMap, o.plan_id)) : '—',
          channelName(chans, o.channel_id),
          money(o.list_price_minor === undefined ? o.amount_minor : o.list_price_minor, o.currency),
          o.discount_minor ? h('span', { class: 'nowrap' }, '− ', money(o.discount_minor, o.currency)) : '—',
          o.promo_code ? h('code', { class: 'nowrap' }, o.promo_code) : '—',
          money(o.amount_minor, o.currency),
          badge(o.status),
          when(o.created_at),
          when(o.paid_at),
        ]), 'No orders.')));
    main.append(h('section', { 'aria-labelledby': 'sub-payments' }, h('h2', { id: 'sub-payments' }, 'Payments'),
      paymentsTable(payments, chans)));
    // Broadcasts and automations sent to the buyer, newest first, a page at a time (an error is
    // shown in their section, not instead of the buyer).
    const messages = h('section', { id: 'sub-messages-list', 'aria-labelledby': 'sub-messages' },
      h('h2', { id: 'sub-messages' }, 'Messages sent'));
    main.append(messages);

    const del = h('button', { type: 'button', class: 'danger', onclick: () => deleteSubscriber(s, memberships, chans, payments.length) }, 'Delete subscriber');
    main.append(h('section', { class: 'danger-zone', 'aria-labelledby': 'sub-delete' },
      h('h2', { id: 'sub-delete' }, 'Delete'), del));
    try {
      await pagedList(messages, `/subscribers/${s.id}/messages`, live, messagesTable);
    } catch (err) {
      if (!(err instanceof ApiError && err.sessionEnded) && live()) {
        messages.append(h('p', { class: 'error-text' }, 'The messages could not be loaded: ' + describe(err)));
      }
    }
  }

  function correctionForm(m, chans) {
    const f = `correct-${m.id}`;
    const lifetime = isLifetime(m.expires_at);
    const local = lifetime ? '' : toLocalInput(m.expires_at);
    const expires = h('input', { id: `${f}-expires_at`, name: 'expires_at', type: 'datetime-local', value: local, step: 60, disabled: lifetime });
    const forLife = h('input', { id: `${f}-lifetime`, name: 'lifetime', type: 'checkbox', checked: lifetime });
    forLife.addEventListener('change', () => { expires.disabled = forLife.checked; });
    const form = h('form', { id: f, class: 'card', method: 'post', hidden: true, novalidate: true },
      h('h3', {}, `Correct ${channelName(chans, m.channel_id)}`),
      h('p', { class: 'hint' }, `Writes exactly these values (no seat check, no extension), recorded as one staff event. Times are in ${timeZone}.`),
      h('div', { class: 'grid' },
        field('Expires at', expires),
        field('Status', h('select', { id: `${f}-status`, name: 'status' },
          ['active', 'grace', 'expired'].map((st) => h('option', { value: st, selected: st === m.status }, st))))),
      field('Lifetime (never expires)', forLife, lifetime ? 'Untick and set when it ends to end lifetime access.' : null),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Save correction')));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const body = {};
      const value = expires.value;
      if (forLife.checked) {
        if (!lifetime) body.expires_at = 'infinity';
      } else if (lifetime && !value) {
        const errors = { expires_at: 'set when the access ends, or keep Lifetime ticked' };
        showFieldErrors(form, new ApiError(422, { errors }));
        fail(new ApiError(422, { detail: 'Some fields are invalid', errors }));
        return;
      } else if (value && value !== local) {
        body.expires_at = new Date(value).toISOString();
      }
      if (form.elements.status.value !== m.status) body.status = form.elements.status.value;
      if (!Object.keys(body).length) { say('Nothing changed.'); return; }
      await busy(form, async () => {
        try {
          const saved = await api('PATCH', `/memberships/${m.id}`, body);
          await renderSubscriber(m.subscriber_id, new URLSearchParams());
          say(`Corrected: ${saved.status} ${untilText(saved.expires_at)}.`);
        } catch (err) {
          showFieldErrors(form, err);
          fail(err);
        }
      });
    });
    return form;
  }

  /** An instant as the value of a datetime-local input, in the viewer's time zone. */
  function toLocalInput(iso) {
    const d = new Date(iso);
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
  }

  /**
   * Asks in a modal dialog; resolves true when confirmed. Esc or the other button (`dismiss`,
   * "Cancel" unless named) resolve false.
   */
  function confirmDialog(title, text, action, dismiss) {
    const dialog = $('confirm');
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = action;
    $('confirm-cancel').textContent = dismiss || 'Cancel';
    const opener = document.activeElement;
    return new Promise((resolve) => {
      const done = (answer) => {
        $('confirm-ok').onclick = null;
        $('confirm-cancel').onclick = null;
        dialog.oncancel = null;
        if (dialog.open) dialog.close();
        if (opener && opener.isConnected) opener.focus();
        resolve(answer);
      };
      $('confirm-ok').onclick = () => done(true);
      $('confirm-cancel').onclick = () => done(false);
      dialog.oncancel = (e) => { e.preventDefault(); done(false); };
      dialog.showModal();
      $('confirm-cancel').focus();
    });
  }

  async function deleteMembership(m, chans, s) {
    const channel = channelName(chans, m.channel_id);
    const live = m.status !== 'expired';
    const ok = await confirmDialog(
      `Delete the membership of ${channel}?`,
      (live
        ? `The member will be removed from the Telegram channel “${channel}” now. `
        : `The membership has expired; the member is not in “${channel}” any more. `)
      + 'Its history is deleted with it; payments are kept.',
      'Delete membership');
    if (!ok) return;
    try {
      await api('DELETE', `/memberships/${m.id}`);
      await renderSubscriber(s.id, new URLSearchParams());
      say(live ? `Membership deleted; removal from “${channel}” is queued.` : 'Membership deleted.');
    } catch (err) {
      fail(err);
    }
  }

  async function deleteSubscriber(s, memberships, chans, paymentCount) {
    if (paymentCount > 0) {
      fail(new Error('This subscriber has payments, and money records are never deleted, so the subscriber cannot be deleted. Delete their memberships instead.'));
      return;
    }
    const liveOnes = memberships.filter((m) => m.status !== 'expired').map((m) => `“${channelName(chans, m.channel_id)}”`);
    const ok = await confirmDialog(
      `Delete subscriber #${s.id}?`,
      (liveOnes.length
        ? `The member will be removed from ${liveOnes.join(', ')} now. `
        : '')
      + 'Their orders, memberships and history are deleted.',
      'Delete subscriber');
    if (!ok) return;
    try {
      await api('DELETE', `/subscribers/${s.id}`);
      say(`Subscriber #${s.id} deleted.`);
      go('#/subscribers');
    } catch (err) {
      fail(err);
    }
  }

  // ------------------------------------------------------------------ memberships

  async function renderMemberships(params) {
    const { main, live } = page('Memberships');
    const chans = await channels();
    if (!live()) return;
    const channelId = params.get('channel_id') || '';
    const status = params.get('status') || '';
    const filter = h('form', { id: 'mfilter', class: 'card inline', method: 'post' },
      field('Channel', h('select', { id: 'mfilter-channel', name: 'channel_id' },
        h('option', { value: '' }, 'All channels'),
        Array.from(chans.values()).map((c) => h('option', { value: String(c.id), selected: String(c.id) === channelId }, c.title)))),
      field('Status', h('select', { id: 'mfilter-status', name: 'status' },
        ['', 'active', 'grace', 'expired'].map((st) => h('option', { value: st, selected: st === status }, st || 'Any status')))),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Show')));
    filter.addEventListener('submit', (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      if (filter.elements.channel_id.value) q.set('channel_id', filter.elements.channel_id.value);
      if (filter.elements.status.value) q.set('status', filter.elements.status.value);
      go('#/memberships?' + q);
    });
    main.append(filter);
    const q = new URLSearchParams();
    if (channelId) q.set('channel_id', channelId);
    if (status) q.set('status', status);
    main.append(h('p', { class: 'actions' },
      downloadButton('Download CSV', '/memberships.csv?' + q, 'memberships.csv')));
    const section = h('section', {});
    main.append(section);
    await pagedList(section, '/memberships?' + q, live, (items) => table('Memberships',
      ['Membership', 'Subscriber', 'Channel', 'Status', 'Expires'],
      items.map((m) => [
        '#' + m.id,
        link(`#/subscribers/${m.subscriber_id}`, `Subscriber #${m.subscriber_id}`),
        channelName(chans, m.channel_id),
        badge(m.status),
        when(m.expires_at),
      ]), 'No memberships match.'));
  }

  // ------------------------------------------------------------------ payments

  const OUTCOMES = ['needs_review', 'refund_failed', 'refund_pending', 'applied', 'refunded', 'disputed'];

  async function renderPayments(params) {
    const { main, live } = page('Payments');
    const outcome = params.has('outcome') ? params.get('outcome') : 'needs_review';
    const chans = await channels();
    if (!live()) return;
    const filter = h('form', { id: 'pfilter', class: 'card inline', method: 'post' },
      field('Outcome', h('select', { id: 'pfilter-outcome', name: 'outcome' },
        OUTCOMES.map((o) => h('option', { value: o, selected: o === outcome }, o.replaceAll('_', ' '))),
        h('option', { value: '', selected: outcome === '' }, 'all outcomes'))),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Show')));
    filter.addEventListener('submit', (e) => {
      e.preventDefault();
      go('#/payments?outcome=' + encodeURIComponent(filter.elements.outcome.value));
    });
    main.append(filter);
    const query = outcome ? '?outcome=' + encodeURIComponent(outcome) : '';
    main.append(h('p', { class: 'actions' },
      downloadButton('Download CSV', '/payments.csv' + query, 'payments.csv')));
    const section = h('section', {});
    main.append(section);
    const path = '/payments' + query;
    await pagedList(section, path, live, (items) => paymentsTable(items, chans));
  }

  function paymentsTable(items, chans) {
    return table('Payments',
      ['Payment', 'Received', 'Amount', 'Order', 'Payer', 'Outcome', 'Reason', 'Receipt', 'What you can do'],
      items.map((p) => [
        [link(`#/payments/${p.id}`, `#${p.id}`), ' ', h('span', { class: 'muted' }, `${p.gateway} ${p.external_id}`)],
        when(p.created_at),
        money(p.amount_minor, p.currency),
        p.order_id
          ? [`#${p.order_id} `, h('code', {}, p.order_reference || '')]
          : (p.order_reference ? h('code', {}, p.order_reference) : '—'),
        p.subscriber_id
          ? link(`#/subscribers/${p.subscriber_id}`, `Subscriber #${p.subscriber_id}`)
          : 'unknown',
        badge(p.outcome),
        reasonText(p.reason),
        receiptCell(p),
        advice(p, chans),
      ]), 'No payments match.');
  }

  /** A payment's fiscal receipt (Checkbox): its state, its public page once done, and where
   * a failed one's error is. */
  function receiptCell(p) {
    const r = p.receipt;
    if (!r) return h('span', { class: 'muted' }, 'none');
    if (r.state === 'done' && r.url) {
      return [badge('done'), ' ', h('a', { href: r.url, target: '_blank', rel: 'noopener' }, 'Open receipt')];
    }
    if (r.state === 'failed') {
      return [badge('failed'), ' ', h('span', {}, 'Checkbox did not register it. '),
        link(`#/effects?payment_id=${p.id}&kind=fiscal_receipt&status=failed`, 'See the error and retry')];
    }
    return [badge('pending'), ' ', h('span', { class: 'muted' }, 'being registered with Checkbox')];
  }

  /** What staff can do about a payment, with the action where the console has one. */
  function advice(p, chans) {
    const out = [];
    if (p.outcome === 'refund_failed') {
      out.push(h('p', {}, 'The Stars refund failed: see the refund’s error on the Effects page, fix the cause, then retry it.'));
      const b = h('button', { type: 'button', class: 'small' }, 'Retry refund');
      b.addEventListener('click', () => busy(b, async () => {
        try {
          const r = await post(b, `/effects/retry?kind=refund&payment_id=${p.id}`);
          say(r.retried ? 'The refund is queued again.' : 'No failed refund of this payment to retry.');
        } catch (err) { fail(err); }
      }));
      out.push(b, ' ', link(`#/effects?payment_id=${p.id}&status=`, 'Its effects'));
      return out;
    }
    if (p.outcome === 'refund_pending') return 'The Stars refund is queued; nothing to do unless it fails.';
    if (p.outcome === 'refunded') return 'Refunded; nothing to do.';
    if (p.outcome === 'disputed') return 'Disputed at the bank; access was taken back. Answer the dispute in the Stripe dashboard.';
    if (p.outcome === 'applied') return canRefund(p) ? refundControl(p) : '—';
    out.push(h('p', {}, ADVICE[p.reason] || 'Review it against the gateway’s record.'));
    if (p.subscriber_id && p.channel_id) {
      out.push(link(`#/subscribers/${p.subscriber_id}?grant_channel=${p.channel_id}`,
        `Grant ${channelName(chans, p.channel_id)} by hand`, { class: 'button small' }));
    }
    if (canRefund(p)) out.push(' ', refundControl(p));
    return out;
  }

  // ------------------------------------------------------------------ refunds staff start

  /** The gateways whose payments staff can refund from here (the API says why not for others). */
  const REFUNDING_GATEWAYS = ['telegram_stars', 'stripe', 'wayforpay', 'monobank'];

  /** Whether the Refund button belongs on payment `p` for the signed-in account. */
  function canRefund(p) {
    return mayDo('admin') && REFUNDING_GATEWAYS.includes(p.gateway)
      && (p.outcome === 'applied' || p.outcome === 'needs_review');
  }

  /**
   * The Refund button of payment `p`: it asks for the reason, asks the API for the refund, and
   * shows where the refund stands in its place.
   */
  function refundControl(p) {
    const slot = h('div', { class: 'refund', id: `refund-${p.id}` });
    const opener = h('button', { type: 'button', class: 'small', id: `refund-open-${p.id}` }, 'Refund…');
    opener.addEventListener('click', () => {
      const reason = h('input', { id: `refund-form-${p.id}-reason`, name: 'reason', type: 'text', required: true, maxlength: 500, autocomplete: 'off' });
      const cancel = h('button', { type: 'button', class: 'secondary small' }, 'Cancel');
      const form = h('form', { id: `refund-form-${p.id}`, class: 'refund-form', method: 'post', novalidate: true },
        field('Why is the money going back?', reason,
          'Kept with the refund and shown to staff; WayForPay receives it as the refund’s comment.'),
        h('div', { class: 'actions' },
          h('button', { type: 'submit', class: 'small danger' }, ['Refund ', money(p.amount_minor, p.currency)]), ' ', cancel));
      cancel.addEventListener('click', () => { slot.replaceChildren(opener); opener.focus(); });
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        const text = reason.value.trim();
        if (!text) {
          showFieldErrors(form, new ApiError(422, { errors: { reason: 'Say why the money goes back.' } }));
          reason.focus();
          return;
        }
        await busy(form, async () => {
          try {
            const r = await post(form, `/payments/${p.id}/refund`, { reason: text });
            slot.replaceChildren(refundState(r));
            say(`Refund of payment #${p.id} asked for: ${STATE_WORDS[r.state]}`);
          } catch (err) {
            showFieldErrors(form, err);
            fail(err);
          }
        });
      });
      slot.replaceChildren(form);
      reason.focus();
    });
    slot.append(opener);
    return slot;
  }

  const STATE_WORDS = {
    pending: 'the gateway is being asked; the payment stays as it is until the gateway confirms.',
    done: 'the gateway refunded it and what the payment bought was taken back.',
    failed: 'the gateway refused it; the payment is unchanged.',
  };

  /** Where refund `r` stands, in words, with the retry of a failed one for staff who may. */
  function refundState(r) {
    const kind = r.state === 'done' ? 'active' : (r.state === 'failed' ? 'expired' : 'grace');
    const out = h('div', { class: 'refund-state', id: `refund-state-${r.payment_id}` },
      h('p', {}, badge('refund ' + r.state, kind), ' ', STATE_WORDS[r.state] || r.state),
      h('p', { class: 'muted' }, `Asked by ${r.requested_by} `, when(r.requested_at), `: “${r.reason}”`));
    if (r.error) out.append(h('p', { class: 'field-error' }, (r.state === 'failed' ? 'The gateway said: ' : 'Last attempt: ') + r.error));
    if (r.state === 'failed' && mayDo('support')) {
      const retry = h('button', { type: 'button', class: 'small', id: `refund-retry-${r.payment_id}` }, 'Try the refund again');
      retry.addEventListener('click', () => busy(retry, async () => {
        try {
          await post(retry, `/effects/${r.effect_id}/retry`);
          say('The refund is queued again.');
          route();
        } catch (err) { fail(err); }
      }));
      out.append(h('p', {}, retry, ' ', link(`#/effects?payment_id=${r.payment_id}&status=`, 'Its effect')));
    }
    return out;
  }

  /** One payment: what it is, what became of it, and its refund (or the Refund button). */
  async function renderPayment(id) {
    const { main, live } = page(`Payment #${id}`);
    const [p, chans] = await Promise.all([api('GET', `/payments/${id}`), channels()]);
    if (!live()) return;
    main.append(h('section', { 'aria-labelledby': 'pay-facts' },
      h('h2', { id: 'pay-facts' }, 'The payment'),
      facts([
        ['Gateway', `${p.gateway} ${p.external_id}`],
        ['Amount', money(p.amount_minor, p.currency)],
        ['Received', when(p.created_at)],
        ['Order', p.order_id ? [`#${p.order_id} `, h('code', {}, p.order_reference || '')] : (p.order_reference || '—')],
        ['Payer', p.subscriber_id ? link(`#/subscribers/${p.subscriber_id}`, `Subscriber #${p.subscriber_id}`) : 'unknown'],
        ['Channel', p.channel_id ? channelName(chans, p.channel_id) : '—'],
        ['Outcome', badge(p.outcome)],
        ['Reason', reasonText(p.reason)],
      ])));
    const refund = h('section', { 'aria-labelledby': 'pay-refund' }, h('h2', { id: 'pay-refund' }, 'Refund'));
    if (p.refund) refund.append(refundState(p.refund));
    else if (canRefund(p)) refund.append(refundControl(p));
    else if (p.outcome === 'applied' || p.outcome === 'needs_review') {
      refund.append(h('p', {}, REFUNDING_GATEWAYS.includes(p.gateway)
        ? 'Refunds are started by an admin or the owner.'
        : `Payments through ${p.gateway} are refunded at the gateway; its report then takes back what the payment bought.`));
    } else refund.append(h('p', {}, 'Nothing to refund: ' + (ADVICE[p.reason] || 'see the outcome above.')));
    main.append(refund, h('p', {}, link('#/payments?outcome=' + encodeURIComponent(p.outcome), 'Back to the payments')));
  }

  // ------------------------------------------------------------------ webhooks

  const EVENT_TYPES = [
    'payment.applied', 'payment.needs_review', 'payment.refunded', 'payment.disputed',
    'membership.activated',
    'membership.renewed', 'membership.grace', 'membership.expired', 'membership.deleted',
    'trial.started', 'broadcast.finished', 'automation.sent',
    'referral.attributed', 'commission.created', 'commission.reversed', 'payout.recorded',
  ];

  /** The owner's endpoints for outbound webhooks: create (secret shown once), rotate, enable. */
  async function renderWebhooks() {
    const { main, live } = page('Webhooks');
    main.append(h('p', { class: 'hint' },
      'Events for your own systems, signed with Standard Webhooks. A secret is shown once, ' +
      'when it is made: store it in the receiver.'));
    const secretSlot = h('div', { id: 'webhook-secret' });
    const form = h('form', { id: 'wform', class: 'card', method: 'post' },
      h('h2', {}, 'New endpoint'),
      field('URL', h('input', { id: 'wform-url', name: 'url', type: 'url', required: true, autocomplete: 'off' }),
        'https:// only; it must not resolve to a private address.'),
      h('fieldset', { id: 'wform-event_types' },
        h('legend', {}, 'Events'),
        EVENT_TYPES.map((t) => field(t, h('input', { id: 'wform-type-' + t.replace('.', '-'), name: 'event_types', type: 'checkbox', value: t })))),
      h('p', { class: 'field-error', id: 'wform-event_types-error' }),
      field('Description', h('input', { id: 'wform-description', name: 'description', type: 'text', maxlength: 500 })),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create endpoint')));
    const section = h('section', { 'aria-labelledby': 'wlist' }, h('h2', { id: 'wlist' }, 'Endpoints'));
    const showSecret = (endpoint, secret, what) => {
      secretSlot.replaceChildren(h('div', { class: 'card notice', role: 'region', 'aria-label': 'New secret' },
        h('p', {}, `${what} for ${endpoint.url}. Copy it now: it is not shown again.`),
        copyable(secret, 'webhook-secret-text', 'secret')));
    };
    const redraw = async () => {
      section.replaceChildren(h('h2', { id: 'wlist' }, 'Endpoints'));
      await pagedList(section, '/webhook-endpoints', live, (items) => table('Endpoints',
        ['Endpoint', 'URL', 'Events', 'Status', 'Actions'],
        items.map((e) => [
          link(`#/webhooks/${e.id}`, '#' + e.id),
          [h('code', {}, e.url), e.description ? h('span', { class: 'muted' }, ' ' + e.description) : null],
          e.event_types.join(', '),
          e.enabled
            ? [badge('enabled', 'active'), e.failing_since ? [' failing since ', when(e.failing_since)] : null]
            : badge('disabled: ' + e.disabled_reason, 'expired'),
          [
            link(`#/webhooks/${e.id}`, 'Deliveries', { class: 'button small secondary' }), ' ',
            actionButton(e.enabled ? 'Disable' : 'Enable', `endpoint #${e.id}`, async () => {
              await api('PATCH', `/webhook-endpoints/${e.id}`, { enabled: !e.enabled });
              await redraw();
              say(`Endpoint #${e.id} is ${e.enabled ? 'disabled' : 'enabled again'}.`);
            }), ' ',
            actionButton('Rotate secret', `endpoint #${e.id}`, async () => {
              const r = await api('POST', `/webhook-endpoints/${e.id}/rotate`);
              showSecret(r, r.secret, 'New secret (the old one also signs for 24 hours)');
              await redraw();
            }),
          ],
        ]), 'No endpoints yet.'));
    };
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const types = Array.from(form.querySelectorAll('input[name=event_types]:checked')).map((c) => c.value);
      const body = { url: form.elements.url.value.trim(), event_types: types };
      const description = form.elements.description.value.trim();
      if (description) body.description = description;
      busy(form, async () => {
        try {
          const created = await post(form, '/webhook-endpoints', body);
          showSecret(created, created.secret, 'Endpoint created');
          form.reset();
          say(`Created endpoint #${created.id}.`);
          await redraw();
        } catch (err) {
          showFieldErrors(form, err, { url: 'url', event_types: 'event_types', description: 'description' });
          fail(err);
        }
      });
    });
    main.append(secretSlot, form, section);
    await redraw();
  }

  function actionButton(text, what, work) {
    const b = h('button', { type: 'button', class: 'secondary small', 'aria-label': `${text} ${what}` }, text);
    b.addEventListener('click', () => busy(b, () => work().catch(fail)));
    return b;
  }

  /** One endpoint's deliveries with every attempt, and a replay for each. */
  async function renderWebhookDeliveries(id) {
    const endpoint = await api('GET', `/webhook-endpoints/${id}`);
    const { main, live } = page(`Deliveries to #${id}`);
    main.append(h('p', {}, h('code', {}, endpoint.url), ' ', link('#/webhooks', 'All endpoints')));
    const section = h('section', {});
    main.append(section);
    const redraw = async () => {
      section.replaceChildren();
      await pagedList(section, `/webhook-endpoints/${id}/deliveries`, live, (items) => table('Deliveries',
        ['Delivery', 'Event', 'Status', 'Attempts', 'Next attempt', 'Actions'],
        items.map((d) => [
          ['#' + d.id, ' ', h('code', {}, d.msg_id)],
          d.event_type,
          badge(d.status, d.status === 'delivered' ? 'active' : d.status === 'failed' ? 'expired' : 'grace'),
          d.attempts.length
            ? h('ul', { class: 'attempts' }, d.attempts.map((a) => h('li', {}, when(a.at), ' ',
              a.status_code ? `HTTP ${a.status_code}` : 'no answer', ` in ${a.latency_ms} ms`,
              a.error ? ` — ${a.error}` : '')))
            : 'none yet',
          d.next_attempt_at ? when(d.next_attempt_at) : '—',
          actionButton('Replay', `delivery #${d.id}`, async () => {
            await api('POST', `/webhook-deliveries/${d.id}/replay`);
            await redraw();
            say(`Delivery #${d.id} will be sent again now.`);
          }),
        ]), 'Nothing sent to this endpoint yet.'));
    };
    await redraw();
  }

  // ------------------------------------------------------------------ reconciliation

  const CHECK_STATES = [
    ['chasing', 'being chased'], ['found', 'found'], ['gave_up', 'given up'], ['settled', 'settled'],
  ];

  /** Card orders asked about at WayForPay (CHECK_STATUS) because their callback had not come. */
  async function renderReconciliation(params) {
    const { main, live } = page('Reconciliation');
    const state = params.get('state') || '';
    const path = '/reconciliation' + (state ? '?state=' + encodeURIComponent(state) : '');
    const first = await api('GET', path + (state ? '&' : '?') + 'limit=1');
    if (!live()) return;
    const filter = h('form', { id: 'rfilter', class: 'card inline', method: 'post' },
      field('State', h('select', { id: 'rfilter-state', name: 'state' },
        h('option', { value: '', selected: state === '' }, 'every state'),
        CHECK_STATES.map(([v, t]) => h('option', { value: v, selected: v === state }, t)))),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Show')));
    filter.addEventListener('submit', (e) => {
      e.preventDefault();
      const v = filter.elements.state.value;
      go('#/reconciliation' + (v ? '?state=' + encodeURIComponent(v) : ''));
    });
    const c = first.counts;
    main.append(
      h('p', {}, 'A card order whose purchase link the bot sent and whose WayForPay callback has not come is asked about at WayForPay (CHECK_STATUS), with back-off, for up to 72 hours. A payment found this way goes through the same checks as its callback would; the late callback changes nothing.'),
      h('section', { id: 'reconciliation-counts', 'aria-label': 'Counts' }, facts([
        ['Being chased', String(c.chasing)],
        ['Found', String(c.found)],
        ['Given up', String(c.gave_up)],
        ['Settled', String(c.settled)],
      ])),
      filter);
    const section = h('section', {});
    main.append(section);
    await pagedList(section, path, live, (items) => table('Reconciliation',
      ['Order', 'State', 'Link sent', 'Asked', 'Last answer', 'Next check', 'Payment'],
      items.map((k) => [
        [`#${k.order_id} `, h('code', {}, k.reference)],
        badge(k.state.replaceAll('_', ' '), k.state),
        when(k.purchase_link_at),
        [String(k.attempts), k.attempts === 1 ? ' time' : ' times',
          k.last_checked_at ? [', last ', when(k.last_checked_at)] : ''],
        k.last_error
          ? h('span', { class: 'error-text' }, k.last_error)
          : (k.last_status || '—'),
        k.state === 'chasing' ? when(k.next_check_at) : '—',
        k.payment_id ? `#${k.payment_id}` : '—',
      ]), state === 'chasing' ? 'No card order is being chased.' : 'No card orders match.'));
  }

  // ------------------------------------------------------------------ effects

  const KINDS = ['grant', 'renewal_receipt', 'revoke', 'reminder', 'grace_notice', 'refund',
    'join_approve', 'join_decline', 'bot_message', 'invoice', 'subscription_cancel', 'member_message',
    'fiscal_receipt', 'gateway_refund'];

  async function renderEffects(params) {
    const { main, live } = page('Telegram effects');
    const status = params.has('status') ? params.get('status') : 'failed';
    const kind = params.get('kind') || '';
    const paymentId = params.get('payment_id') || '';
    const filter = h('form', { id: 'efilter', class: 'card inline', method: 'post' },
      field('Status', h('select', { id: 'efilter-status', name: 'status' },
        [['failed', 'failed (dead letters)'], ['pending', 'pending'], ['done', 'done'], ['', 'any status']]
          .map(([v, t]) => h('option', { value: v, selected: v === status }, t)))),
      field('Kind', h('select', { id: 'efilter-kind', name: 'kind' },
        h('option', { value: '' }, 'any kind'),
        KINDS.map((k) => h('option', { value: k, selected: k === kind }, k.replaceAll('_', ' '))))),
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Show')));
    filter.addEventListener('submit', (e) => {
      e.preventDefault();
      const q = new URLSearchParams({ status: filter.elements.status.value });
      if (filter.elements.kind.value) q.set('kind', filter.elements.kind.value);
      if (paymentId) q.set('payment_id', paymentId);
      go('#/effects?' + q);
    });
    main.append(filter);

    const q = new URLSearchParams();
    if (status) q.set('status', status);
    if (kind) q.set('kind', kind);
    if (paymentId) q.set('payment_id', paymentId);
    if (status === 'failed' || status === '') {
      const retryQuery = new URLSearchParams(q);
      retryQuery.delete('status');
      const retryAll = h('button', { type: 'button', id: 'retry-all' },
        kind ? `Retry every failed ${kind.replaceAll('_', ' ')} effect` : 'Retry every failed effect shown');
      retryAll.addEventListener('click', () => busy(retryAll, async () => {
        try {
          const r = await post(retryAll, '/effects/retry' + (retryQuery.toString() ? '?' + retryQuery : ''));
          await renderEffects(params);
          say(`${r.retried} dead letter${r.retried === 1 ? '' : 's'} sent back to the queue.`);
        } catch (err) { fail(err); }
      }));
      main.append(h('p', { class: 'hint' }, 'Fix the cause first (bot made admin, user unblocked the bot, Telegram back), then retry: each goes back to the queue with a fresh 72-hour budget.'),
        h('p', {}, retryAll));
    }
    const section = h('section', {});
    main.append(section);
    await pagedList(section, '/effects' + (q.toString() ? '?' + q : ''), live, (items) => table('Effects',
      ['Effect', 'Status', 'Member', 'Attempts', 'Next attempt / done', 'Telegram’s error', 'Actions'],
      items.map((e) => [
        [`#${e.id} `, h('strong', {}, e.kind)],
        badge(e.status),
        [`user ${e.user_id}`, e.chat_id ? ` in chat ${e.chat_id}` : '',
          e.membership_id ? [' · membership #', String(e.membership_id)] : '',
          e.payment_id ? [' · payment #', String(e.payment_id)] : ''],
        String(e.attempts),
        e.status === 'done' ? when(e.done_at) : when(e.next_attempt_at),
        e.last_error ? h('span', { class: 'error-text' }, e.last_error) : '—',
        e.status === 'done' ? '—' : retryButton(e, params),
      ]), status === 'failed' ? 'No dead letters.' : 'No effects match.'));
  }

  function retryButton(e, params) {
    const b = h('button', { type: 'button', class: 'small', 'aria-label': `Retry effect #${e.id}` }, 'Retry');
    b.addEventListener('click', () => busy(b, async () => {
      try {
        const r = await post(b, `/effects/${e.id}/retry`);
        await renderEffects(params);
        say(`Effect #${r.id} is ${r.status} again, due ${dateFormat.format(new Date(r.next_attempt_at))}.`);
      } catch (err) { fail(err); }
    }));
    return b;
  }

  // ------------------------------------------------------------------ sweep

  async function renderSweep() {
    const { main, live } = page('Sweep');
    const o = await api('GET', '/overview');
    if (!live()) return;
    const last = h('section', { 'aria-labelledby': 'sweep-last' },
      h('h2', { id: 'sweep-last' }, 'Last sweep'), sweepSummary(o.last_sweep, o.last_sweep_change_at));
    const result = h('section', { id: 'sweep-result', 'aria-labelledby': 'sweep-result-title', hidden: true },
      h('h2', { id: 'sweep-result-title' }, 'This run'));
    const button = h('button', { type: 'button', id: 'run-sweep' }, 'Run the sweep now');
    button.addEventListener('click', () => busy(button, async () => {
      try {
        const r = await post(button, '/sweep');
        result.replaceChildren(h('h2', { id: 'sweep-result-title' }, 'This run'), facts([
          ['Examined', String(r.examined)],
          ['Moved to grace', String(r.to_grace)],
          ['Moved to expired', String(r.to_expired)],
          ['Skipped (being renewed)', String(r.skipped)],
          ['Took', `${r.duration_ms} ms`],
        ]));
        result.hidden = false;
        const now = await api('GET', '/overview');
        last.replaceChildren(h('h2', { id: 'sweep-last' }, 'Last sweep'),
          sweepSummary(now.last_sweep, now.last_sweep_change_at));
        say('Sweep finished: ' + reportText(r) + '.');
      } catch (err) { fail(err); }
    }));
    main.append(
      h('p', {}, 'The sweep moves memberships past their expiry to grace, and past their grace to expired (removing the member from the channel). It also runs on its schedule when SWEEP_INTERVAL_SECS is set.'),
      h('p', {}, button), result, last);
  }

  // ------------------------------------------------------------------ audits

  /** The categories of an audit's report: [key, title, what it means]. */
  const AUDIT_CATEGORIES = [
    ['live_but_banned', 'Paid but banned', 'Live access, but banned in the chat. Fix unbans them.'],
    ['not_live_but_in_chat', 'In the chat without access', 'No live membership, but in the chat. Fix removes them.'],
    ['live_not_in_chat', 'Paid but not in the chat', 'Informational: they may still join with their link.'],
    ['exempt', 'Exempt', 'Chat administrators and users on the exemption list: never touched.'],
    ['unknown_to_telegram', 'Unknown to Telegram', 'Deleted accounts: nothing to do.'],
  ];

  /**
   * A channel's member list audited against Telegram: the latest report (counts, then the
   * users of each category), "Run audit" (report only) and "Fix" (audit and repair). A running
   * audit is looked at again every second while the page shows.
   */
  async function renderAudit(channelId, refresh) {
    const [channel, latest] = await Promise.all([
      api('GET', `/channels/${channelId}`),
      api('GET', `/audits?channel_id=${channelId}&limit=1`),
    ]);
    const { main, live } = page(`Audit: ${channel.title}`, !refresh);
    if (!live()) return;
    const audit = latest.items[0] || null;
    const running = audit && audit.status === 'running';
    const startButton = (id, label, fix) => {
      const b = h('button', { type: 'button', id, class: fix ? 'danger' : null, disabled: running }, label);
      b.addEventListener('click', () => busy(b, async () => {
        try {
          const r = await post(b, `/channels/${channelId}/audit`, { fix });
          say(`Audit #${r.audit_id} started${fix ? ' (fixing what it finds)' : ''}.`);
          await renderAudit(channelId, true);
        } catch (err) { fail(err); }
      }));
      return b;
    };
    main.append(
      h('p', {}, 'An audit asks Telegram about everyone who ever had a membership of this channel and compares the chat with the database. “Run audit” only reports; “Fix” audits again and queues the unban or removal each wrong row needs (administrators and exempt users are never touched).'),
      h('div', { class: 'actions' },
        startButton('run-audit', 'Run audit', false),
        startButton('fix-audit', 'Fix', true),
        link(`#/channels/${channelId}`, 'Back to the channel', { class: 'button secondary' })));
    const section = h('section', { id: 'audit-report', 'aria-labelledby': 'audit-report-title' },
      h('h2', { id: 'audit-report-title' }, 'Latest report'));
    main.append(section);
    if (!audit) {
      section.append(h('p', { class: 'empty' }, 'This channel has not been audited yet.'));
      return;
    }
    section.append(facts([
      ['Audit', [`#${audit.id} `, badge(audit.status), audit.fix ? [' ', badge('fix', 'info')] : null]],
      ['Checked', `${audit.checked} of ${audit.total}`],
      ['Started', when(audit.started_at)],
      ['Finished', when(audit.finished_at)],
      audit.error ? ['Error', h('span', { class: 'error-text' }, audit.error)] : null,
    ]));
    section.append(table('Findings by category', ['Category', 'Users', 'Meaning'],
      AUDIT_CATEGORIES.map(([key, title, meaning]) => [
        title, h('span', { id: `audit-count-${key}` }, String(audit.counts[key])), meaning])));
    for (const [key, title] of AUDIT_CATEGORIES) {
      const rows = audit.rows[key] || [];
      if (!rows.length) continue;
      section.append(h('h3', {}, title),
        table(title, ['Telegram user', 'Subscriber', 'Membership', 'Telegram says'],
          rows.map((r) => [
            h('span', { class: `audit-user-${key}` }, String(r.telegram_user_id)),
            link(`#/subscribers/${r.subscriber_id}`, `Subscriber #${r.subscriber_id}`),
            `#${r.membership_id}`,
            r.telegram_status || 'unknown',
          ])));
    }
    if (running) {
      setTimeout(() => { if (live()) renderAudit(channelId, true).catch(fail); }, 1000);
    }
  }

  // ------------------------------------------------------------------ messages to members

  /** The automations, in the API's order: [kind, name, when it is sent]. */
  const AUTOMATIONS = [
    ['unpaid_checkout', 'Unpaid checkout',
      'A reminder for an order still unpaid this long after its invoice or card page was sent: one per order, with a button back to it. Never once the order is paid, cancelled or replaced, nor after the buyer paid for that channel another way.'],
    ['win_back', 'Win back',
      'A membership expired this long ago and was not renewed: one message per membership end, with a promo code made for that buyer alone.'],
    ['cancel_offer', 'Cancel offer',
      'A buyer cancelled their Telegram Stars subscription: one offer per subscription, with a promo code made for that buyer alone.'],
    ['renewal_failed', 'Renewal failed',
      'Telegram could not renew a Stars subscription: the buyer is told how to renew.'],
  ];

  /** The automations that may carry a promo code. */
  const PROMO_KINDS = ['win_back', 'cancel_offer'];

  /** The placeholders a message text may use, as Project Fluent writes them. */
  const PLACEHOLDERS = ['name', 'channel', 'expires', 'code', 'price'].map((p) => `{ $${p} }`).join(', ');

  function automationName(kind) {
    const found = AUTOMATIONS.find(([k]) => k === kind);
    return found ? found[1] : kind.replaceAll('_', ' ');
  }

  /** The units a delay is shown in, largest first: [unit, minutes]. */
  const DELAY_UNITS = [['days', 1440], ['hours', 60], ['minutes', 1]];

  /** A delay in minutes as [count, unit]: the largest unit it is a whole number of. */
  function delayParts(minutes) {
    const [unit, size] = DELAY_UNITS.find(([, s]) => minutes > 0 && minutes % s === 0) || DELAY_UNITS[2];
    return [minutes / size, unit];
  }

  /** "3 days", "1 hour", "at once". */
  function delayText(minutes) {
    if (!minutes) return 'at once';
    const [n, unit] = delayParts(minutes);
    return `${n} ${n === 1 ? unit.slice(0, -1) : unit}`;
  }

  /** One textarea per language the bot speaks, for a message's Fluent pattern in each. */
  function messageTextFields(f, texts, hint) {
    const t = texts || {};
    return h('fieldset', { class: 'field group', id: `${f}-texts`, tabindex: '-1', 'aria-describedby': `${f}-texts-error` },
      h('legend', {}, 'Text'),
      h('p', { class: 'hint' }, hint),
      h('div', { class: 'grid' }, LANGUAGES.map(([code, name]) => field(`${name} (${code})`,
        h('textarea', { id: `${f}-text-${code}`, name: `text-${code}`, rows: 5, maxlength: 4096 }, t[code] || '')))),
      h('p', { class: 'field-error', id: `${f}-texts-error` }));
  }

  /** The texts the fields say, by language (an empty field is no text in that language). */
  function readTexts(form) {
    const out = {};
    for (const [code] of LANGUAGES) {
      const text = form.elements[`text-${code}`].value.trim();
      if (text) out[code] = text;
    }
    return out;
  }

  function sameTexts(a, b) {
    return LANGUAGES.every(([code]) => ((a || {})[code] || '') === ((b || {})[code] || ''));
  }

  /** The API's field names of message texts, mapped to their inputs. */
  const TEXT_FIELDS = Object.fromEntries(LANGUAGES.map(([code]) => [`texts.${code}`, `text-${code}`]));

  /** A 422 made in the browser, shown as the API's own are. */
  function refuse(form, errors, fields) {
    showFieldErrors(form, new ApiError(422, { errors }), fields);
    fail(new ApiError(422, { detail: 'Some fields are invalid', errors }));
  }

  /** Plan checkboxes, as on a promo code: none ticked means every paid plan. */
  function planChoices(f, planMap, chosen, legend) {
    const paid = Array.from(planMap.values()).filter((p) => p.kind === 'paid');
    return h('fieldset', { class: 'field group', id: `${f}-plan_ids`, tabindex: '-1', 'aria-describedby': `${f}-plan_ids-error` },
      h('legend', {}, legend),
      h('p', { class: 'hint' }, 'None ticked: every paid plan.'),
      paid.length
        ? paid.map((p) => field(p.title,
          h('input', { id: `${f}-plan-${p.id}`, name: `plan-${p.id}`, type: 'checkbox', checked: !!(chosen && chosen.includes(p.id)), dataset: { plan: String(p.id) } })))
        : h('p', { class: 'empty' }, 'No paid plans yet.'),
      h('p', { class: 'field-error', id: `${f}-plan_ids-error` }));
  }

  /** The API's field names of an automation, mapped to their inputs. */
  const AUTOMATION_FIELDS = Object.assign({
    'promo.percent_off': 'percent_off', 'promo.valid_days': 'valid_days', 'promo.plan_ids': 'plan_ids',
  }, TEXT_FIELDS);

  async function renderAutomations() {
    const { main, live } = page('Automations');
    const [list, planMap] = await Promise.all([api('GET', '/automations'), plans(true)]);
    if (!live()) return;
    main.append(h('p', { class: 'hint' },
      'Messages the bot sends by itself when something happens to a buyer, each in the buyer’s language. '
      + 'They are off until switched on; none goes to a buyer who said /stop or blocked the bot, and every text '
      + 'gets the line on how to stop them.'));
    for (const a of list.items) main.append(automationForm(a, planMap));
  }

  /** One automation's card: on or off, delay, texts, promo code; saved with a PATCH of what changed. */
  function automationForm(a, planMap) {
    const f = `auto-${a.kind}`;
    const input = (name, attrs) => h('input', Object.assign({ id: `${f}-${name}`, name }, attrs));
    const [count, unit] = delayParts(a.delay_minutes);
    const description = (AUTOMATIONS.find(([k]) => k === a.kind) || [])[2];
    const withPromo = PROMO_KINDS.includes(a.kind);
    const promo = a.promo || { percent_off: 20, valid_days: 7, plan_ids: null };
    const promoOn = input('promo_on', { type: 'checkbox', checked: !!a.promo });
    const promoBox = withPromo
      ? h('fieldset', { class: 'field group', id: `${f}-promo`, tabindex: '-1', 'aria-describedby': `${f}-promo-error` },
        h('legend', {}, 'Promo code'),
        h('p', { class: 'hint' }, 'A code made for each buyer alone (one use), with a buy button that applies it; { $code } in the text shows it.'),
        field('Give a promo code', promoOn),
        h('div', { class: 'grid' },
          field('Percent off', input('percent_off', { type: 'number', min: 1, max: 100, value: String(promo.percent_off) })),
          field('Valid for (days)', input('valid_days', { type: 'number', min: 1, max: 365, value: String(promo.valid_days) }))),
        planChoices(f, planMap, promo.plan_ids, 'For plans'),
        h('p', { class: 'field-error', id: `${f}-promo-error` }))
      : null;
    const sync = () => {
      if (!promoBox) return;
      for (const el of promoBox.querySelectorAll('input')) {
        if (el !== promoOn) el.disabled = !promoOn.checked;
      }
    };
    promoOn.addEventListener('change', sync);
    const form = h('form', { id: f, class: 'card automation', method: 'post', novalidate: true },
      h('h2', {}, automationName(a.kind), ' ', a.enabled ? badge('on', 'active') : badge('off', 'inactive')),
      h('p', { class: 'hint' }, description),
      facts([
        ['Sent so far', h('span', { id: `${f}-sent` }, `${a.sent} message${a.sent === 1 ? '' : 's'}`)],
        ['Waits', delayText(a.delay_minutes)],
        ['Updated', when(a.updated_at)],
      ]),
      field('On (sends by itself)', input('enabled', { type: 'checkbox', checked: a.enabled })),
      h('div', { class: 'grid' },
        field('Delay', input('delay_minutes', { type: 'number', min: 0, step: 'any', value: String(count), required: true }),
          'How long after the event it is sent; 0 (at once) to 365 days.'),
        field('Unit', h('select', { id: `${f}-delay_unit`, name: 'delay_unit' },
          DELAY_UNITS.map(([u]) => h('option', { value: u, selected: u === unit }, u))))),
      messageTextFields(f, a.texts,
        `Project Fluent, as the bot’s own texts; placeholders: ${PLACEHOLDERS} (the code only with a promo code). `
        + 'A buyer reads it in their language, else in the bot’s default one, else any written; switching it on needs '
        + 'at least one text.'),
      promoBox,
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Save')));
    sync();
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const clientErrors = {};
      const body = {};
      const enabled = form.elements.enabled.checked;
      if (enabled !== a.enabled) body.enabled = enabled;
      const delay = form.elements.delay_minutes.value.trim();
      const size = DELAY_UNITS.find(([u]) => u === form.elements.delay_unit.value)[1];
      const minutes = Math.round(Number(delay) * size * 1000) / 1000;
      if (delay === '' || !Number.isInteger(minutes) || minutes < 0) {
        clientErrors.delay_minutes = 'must be a whole number of minutes (1.5 hours is 90 minutes)';
      } else if (minutes !== a.delay_minutes) {
        body.delay_minutes = minutes;
      }
      const texts = readTexts(form);
      if (!sameTexts(texts, a.texts)) body.texts = texts;
      if (withPromo) {
        let wanted = null;
        if (promoOn.checked) {
          const int = (name) => (form.elements[name].value.trim() === '' ? null : Number(form.elements[name].value));
          const ticked = Array.from(promoBox.querySelectorAll('input[data-plan]')).filter((b) => b.checked).map((b) => Number(b.dataset.plan));
          wanted = { percent_off: int('percent_off'), valid_days: int('valid_days'), plan_ids: ticked.length ? ticked : null };
          if (wanted.percent_off === null) clientErrors['promo.percent_off'] = 'is required';
          if (wanted.valid_days === null) clientErrors['promo.valid_days'] = 'is required';
        }
        const before = a.promo ? { percent_off: a.promo.percent_off, valid_days: a.promo.valid_days, plan_ids: a.promo.plan_ids || null } : null;
        if (JSON.stringify(wanted) !== JSON.stringify(before)) body.promo = wanted;
      }
      if (Object.keys(clientErrors).length) {
        refuse(form, clientErrors, AUTOMATION_FIELDS);
        return;
      }
      if (!Object.keys(body).length) { say('Nothing changed.'); return; }
      await busy(form, async () => {
        try {
          const saved = await api('PATCH', `/automations/${a.kind}`, body);
          form.replaceWith(automationForm(saved, planMap));
          say(`Saved ${automationName(saved.kind)}: ${saved.enabled ? 'on' : 'off'}, ${delayText(saved.delay_minutes)} after the event.`);
        } catch (err) {
          showFieldErrors(form, err, AUTOMATION_FIELDS);
          fail(err);
        }
      });
    });
    return form;
  }

  /** The statuses a broadcast's segment may pick: [value, label]. */
  const SEGMENT_STATUSES = [
    ['active', 'active'], ['grace', 'in grace'], ['trial', 'on a trial'], ['expired', 'expired'], ['never_paid', 'never paid'],
  ];

  /** Who a segment reaches, in words. */
  function segmentText(segment, chans, planMap) {
    const s = segment || {};
    const or = (list) => list.join(' or ');
    const parts = [];
    if (s.channel_ids && s.channel_ids.length) parts.push('of ' + or(s.channel_ids.map((c) => channelName(chans, c))));
    if (s.plan_ids && s.plan_ids.length) parts.push('on ' + or(s.plan_ids.map((p) => planName(planMap, p))));
    if (s.statuses && s.statuses.length) {
      parts.push(or(s.statuses.map((st) => (SEGMENT_STATUSES.find(([v]) => v === st) || [st, st.replaceAll('_', ' ')])[1])));
    }
    if (s.expired_within_days) {
      parts.push(`expired in the last ${s.expired_within_days} day${s.expired_within_days === 1 ? '' : 's'}`);
    }
    if (s.languages && s.languages.length) parts.push('reading ' + or(s.languages.map(languageName)));
    if (!parts.length) return 'Every buyer';
    // Channels or plans without a status or an expiry reach their live members only.
    const live = (s.channel_ids || s.plan_ids) && !s.statuses && !s.expired_within_days;
    return (live ? 'Live members (active or in grace) ' : 'Buyers ') + parts.join(', ');
  }

  /** A broadcast's status, with when a scheduled one goes. */
  function broadcastStatus(b) {
    return [badge(b.status), b.status === 'scheduled' && b.send_at ? [' for ', when(b.send_at)] : null];
  }

  function countText(n) {
    return n === null || n === undefined ? '—' : String(n);
  }

  /** "5 sent · 1 blocked · 0 failed · 0 skipped · 2 pending". */
  function progressText(b) {
    return [['sent', b.sent], ['blocked', b.blocked], ['failed', b.failed], ['skipped', b.skipped], ['pending', b.pending]]
      .map(([what, n]) => `${countText(n)} ${what}`).join(' · ');
  }

  /** The first text of a broadcast (English first), shortened for a list. */
  function textExcerpt(texts) {
    const found = LANGUAGES.find(([code]) => texts && texts[code]);
    if (!found) return '—';
    const text = texts[found[0]];
    return [h('span', { class: 'muted' }, found[0] + ' '), text.length > 80 ? text.slice(0, 79) + '…' : text];
  }

  async function renderBroadcasts() {
    const { main, live } = page('Broadcasts');
    main.append(
      h('p', {}, link('#/broadcasts/new', 'New broadcast', { class: 'button' })),
      h('p', { class: 'hint' },
        'One message to every buyer of a segment, in their language, at most once each. Buyers who said /stop or blocked the bot never get one.'));
    const section = h('section', { id: 'broadcast-list' });
    main.append(section);
    await pagedList(section, '/broadcasts', live, (items) => table('Broadcasts',
      ['Broadcast', 'Text', 'Status', 'Recipients', 'Progress', 'Paid messages', 'Created'],
      items.map((b) => [
        link(`#/broadcasts/${b.id}`, '#' + b.id),
        textExcerpt(b.texts),
        broadcastStatus(b),
        countText(b.recipients),
        progressText(b),
        b.paid ? `${b.paid_messages} (at most ⭐ ${b.paid.max_stars})` : '—',
        when(b.created_at),
      ]), 'No broadcasts yet.'));
  }

  /** The API's field names of a broadcast, mapped to their inputs. */
  const BROADCAST_FIELDS = Object.assign({
    'segment.channel_ids': 'channel_ids', 'segment.plan_ids': 'plan_ids', 'segment.statuses': 'statuses',
    'segment.expired_within_days': 'expired_within_days', 'segment.languages': 'languages',
    button: 'button_plan', 'button.plan_id': 'button_plan', 'button.promo_code': 'promo_code',
    paid: 'max_stars', 'paid.max_stars': 'max_stars',
  }, TEXT_FIELDS);

  /** "3 buyers would get it now: English 1, Українська 2, Русский 0." */
  function previewText(r) {
    const by = r.by_language || {};
    const known = LANGUAGES.map(([code, name]) => `${name} ${by[code] || 0}`);
    const other = Object.keys(by).filter((k) => !LANGUAGES.some(([code]) => code === k)).map((k) => `${k} ${by[k]}`);
    return h('p', {},
      h('strong', { id: 'broadcast-recipients' }, `${r.recipients} buyer${r.recipients === 1 ? '' : 's'}`),
      ` would get it now: ${known.concat(other).join(', ')}.`);
  }

  async function renderBroadcastForm() {
    const [chans, planMap] = await Promise.all([channels(true), plans(true)]);
    const { main, live } = page('New broadcast');
    if (!live()) return;
    const f = 'broadcast';
    const input = (name, attrs) => h('input', Object.assign({ id: `${f}-${name}`, name }, attrs));
    const multi = (name, label, options, hint) => field(label,
      h('select', { id: `${f}-${name}`, name, multiple: true, size: Math.min(Math.max(options.length, 2), 6) },
        options.map(([v, t]) => h('option', { value: String(v) }, t))), hint);
    const boxes = (name, legend, options) => h('fieldset', {
      class: 'field group', id: `${f}-${name}`, tabindex: '-1', 'aria-describedby': `${f}-${name}-error`,
    },
    h('legend', {}, legend),
    h('p', { class: 'hint' }, 'None ticked: any.'),
    options.map(([v, t]) => field(t, input(`${name}-${v}`, { type: 'checkbox', dataset: { pick: name, value: v } }))),
    h('p', { class: 'field-error', id: `${f}-${name}-error` }));
    const planList = Array.from(planMap.values());
    const planLabel = (p) => `${p.title} (${p.channel_ids.map((c) => channelName(chans, c)).join(' + ')})`;

    const segmentBox = h('fieldset', { class: 'group', id: `${f}-segment` },
      h('legend', {}, 'Who gets it'),
      h('p', { class: 'hint' }, 'Every choice narrows it (a buyer must match them all); channels or plans alone reach their '
        + 'live members (active or in grace); nothing chosen: every buyer. A buyer gets it once however many memberships '
        + 'match; buyers who said /stop or blocked the bot are never in it.'),
      h('div', { class: 'grid' },
        multi('channel_ids', 'Channels', Array.from(chans.values()).map((c) => [c.id, c.title]), 'None chosen: any channel. Ctrl or ⌘ picks several.'),
        multi('plan_ids', 'Plans', planList.map((p) => [p.id, planLabel(p)]), 'None chosen: any plan.'),
        field('Expired within (days)', input('expired_within_days', { type: 'number', min: 1, max: 3660, step: 1 }),
          'Only buyers whose membership ended in the last this many days; empty: any time.')),
      h('div', { class: 'grid' },
        boxes('statuses', 'Status', SEGMENT_STATUSES),
        boxes('languages', 'Language', LANGUAGES.map(([code, name]) => [code, `${name} (${code})`]))));
    const preview = h('div', { id: `${f}-preview`, class: 'card preview', 'aria-live': 'polite' },
      h('p', { class: 'muted' }, 'Counting…'));

    const buttonPlan = h('select', { id: `${f}-button_plan`, name: 'button_plan' },
      h('option', { value: '' }, 'No button'),
      planList.filter((p) => p.active && p.kind === 'paid').map((p) => h('option', { value: String(p.id) }, planLabel(p))));
    const promoCode = input('promo_code', { maxlength: 32, autocapitalize: 'characters', autocomplete: 'off' });
    const whenSelect = h('select', { id: `${f}-when`, name: 'when' },
      h('option', { value: 'now' }, 'now'), h('option', { value: 'later' }, 'at a date and time'));
    const sendAt = input('send_at', { type: 'datetime-local', step: 60 });
    const paid = input('paid', { type: 'checkbox' });
    const maxStars = input('max_stars', { type: 'number', min: 1, step: 1 });
    const sync = () => {
      promoCode.disabled = !buttonPlan.value;
      sendAt.disabled = whenSelect.value !== 'later';
      sendAt.closest('.field').hidden = sendAt.disabled;
      maxStars.disabled = !paid.checked;
      maxStars.closest('.field').hidden = maxStars.disabled;
    };
    for (const el of [buttonPlan, whenSelect, paid]) el.addEventListener('change', sync);

    const form = h('form', { id: f, class: 'card', method: 'post', novalidate: true },
      messageTextFields(f, {},
        `Project Fluent, as the bot’s own texts; placeholders: ${PLACEHOLDERS} ({ $channel } and { $expires }: the `
        + 'buyer’s latest membership among the chosen channels; { $code } and { $price }: the button’s). A buyer reads '
        + 'the text in their language, else in the bot’s default one, else any written; the line on how to stop these '
        + 'messages is added.'),
      segmentBox,
      h('h2', {}, 'Recipients'),
      preview,
      h('fieldset', { class: 'group' },
        h('legend', {}, 'Buy button'),
        h('div', { class: 'grid' },
          field('Plan', buttonPlan, 'A button under the message that starts buying this active paid plan.'),
          field('Promo code', promoCode, 'Optional: applied by the button; { $code } in the text shows it.'))),
      h('fieldset', { class: 'group' },
        h('legend', {}, 'When'),
        h('div', { class: 'grid' },
          field('Send', whenSelect),
          field('Send at', sendAt, `In ${timeZone}.`))),
      h('fieldset', { class: 'group' },
        h('legend', {}, 'Speed'),
        field('Paid broadcast (faster)', paid,
          'Sent past Telegram’s free rate (up to 1,000 messages a second), 0.1 Star for each message above it.'),
        field('At most (Stars)', maxStars, 'Past this, it stops paying and the rest go at the free rate.')),
      h('div', { class: 'actions' },
        h('button', { type: 'submit' }, 'Create broadcast'),
        link('#/broadcasts', 'Back to broadcasts', { class: 'button secondary' })));
    main.append(form);
    sync();

    /** The segment the fields say; a malformed field is put in `clientErrors`. */
    const readSegment = (clientErrors) => {
      const segment = {};
      const chosen = (name) => Array.from(form.elements[name].selectedOptions, (o) => Number(o.value));
      const ticked = (name) => Array.from(segmentBox.querySelectorAll(`input[data-pick="${name}"]`))
        .filter((b) => b.checked).map((b) => b.dataset.value);
      for (const [name, values] of [['channel_ids', chosen('channel_ids')], ['plan_ids', chosen('plan_ids')],
        ['statuses', ticked('statuses')], ['languages', ticked('languages')]]) {
        if (values.length) segment[name] = values;
      }
      const within = form.elements.expired_within_days.value.trim();
      if (within !== '') {
        if (!/^\d+$/.test(within) || Number(within) < 1) clientErrors.expired_within_days = 'must be a whole number of days, at least 1';
        else segment.expired_within_days = Number(within);
      }
      return segment;
    };

    // The count follows the segment: asked again a moment after each change; an answer that
    // arrives after a newer question is dropped.
    let asked = 0;
    let timer = null;
    const count = async () => {
      const seq = ++asked;
      const clientErrors = {};
      const segment = readSegment(clientErrors);
      if (Object.keys(clientErrors).length) {
        showFieldErrors(form, new ApiError(422, { errors: clientErrors }), BROADCAST_FIELDS);
        preview.replaceChildren(h('p', { class: 'error-text' }, 'Correct the marked field to count the recipients.'));
        return;
      }
      preview.setAttribute('aria-busy', 'true');
      try {
        const r = await api('POST', '/broadcasts/preview', { segment });
        if (seq !== asked || !live()) return;
        showFieldErrors(form, null);
        preview.replaceChildren(previewText(r));
      } catch (err) {
        if (seq !== asked || !live() || (err instanceof ApiError && err.sessionEnded)) return;
        showFieldErrors(form, err, BROADCAST_FIELDS);
        preview.replaceChildren(h('p', { class: 'error-text' }, 'The recipients could not be counted: ' + describe(err)));
      } finally {
        if (seq === asked) preview.removeAttribute('aria-busy');
      }
    };
    const later = () => {
      clearTimeout(timer);
      timer = setTimeout(count, 250);
    };
    segmentBox.addEventListener('change', later);
    segmentBox.addEventListener('input', later);

    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      clearTimeout(timer);
      const clientErrors = {};
      const texts = readTexts(form);
      if (!Object.keys(texts).length) clientErrors.texts = 'write the message in at least one language';
      const body = { texts, segment: readSegment(clientErrors), button: null, send_at: null, paid: null };
      if (buttonPlan.value) {
        body.button = { plan_id: Number(buttonPlan.value) };
        const code = promoCode.value.trim().toUpperCase();
        if (code) body.button.promo_code = code;
      }
      if (whenSelect.value === 'later') {
        if (!sendAt.value) clientErrors.send_at = 'pick a date and time, or send now';
        else body.send_at = new Date(sendAt.value).toISOString();
      }
      if (paid.checked) {
        const stars = maxStars.value.trim();
        if (!/^\d+$/.test(stars) || Number(stars) < 1) clientErrors.max_stars = 'must be a whole number of Stars, at least 1';
        else body.paid = { max_stars: Number(stars) };
      }
      if (Object.keys(clientErrors).length) {
        refuse(form, clientErrors, BROADCAST_FIELDS);
        return;
      }
      await busy(form, async () => {
        try {
          const b = await post(form, '/broadcasts', body);
          say(b.status === 'scheduled'
            ? `Broadcast #${b.id} is scheduled for ${dateFormat.format(new Date(b.send_at))}.`
            : `Broadcast #${b.id} is being sent to ${b.recipients} buyer${b.recipients === 1 ? '' : 's'}.`);
          go('#/broadcasts');
        } catch (err) {
          showFieldErrors(form, err, BROADCAST_FIELDS);
          fail(err);
        }
      });
    });
    await count();
    form.elements['text-en'].focus();
  }

  /**
   * A broadcast: what it says, who gets it, its progress, and Cancel while it is scheduled or
   * sending. A broadcast being sent is looked at again every two seconds while the page shows
   * (`shown`: the check of the page being refreshed).
   */
  async function renderBroadcast(id, shown) {
    const [b, chans, planMap] = await Promise.all([
      api('GET', `/broadcasts/${id}`), channels(), plans().catch(() => new Map()),
    ]);
    if (shown && !shown()) return;
    const { main, live } = page(`Broadcast #${b.id}`, !shown);
    const done = b.sent + b.blocked + b.failed + b.skipped;
    const open = b.status === 'scheduled' || b.status === 'sending';
    const cancel = open ? h('button', { type: 'button', id: 'cancel-broadcast', class: 'danger' }, 'Cancel broadcast') : null;
    if (cancel) {
      cancel.addEventListener('click', async () => {
        const ok = await confirmDialog(`Cancel broadcast #${b.id}?`,
          b.status === 'scheduled'
            ? 'It will not be sent to anyone.'
            : 'No more of its messages are sent after this; those already sent stay sent.',
          'Cancel broadcast', 'Keep it');
        if (!ok) return;
        await busy(cancel, async () => {
          try {
            const r = await post(cancel, `/broadcasts/${b.id}/cancel`);
            await renderBroadcast(b.id);
            say(`Broadcast #${r.id} is cancelled${r.sent ? ` (${r.sent} sent before it)` : ''}.`);
          } catch (err) { fail(err); }
        });
      });
    }
    const counter = (key, n) => h('span', { id: `broadcast-count-${key}` }, countText(n));
    main.append(
      facts([
        ['Status', h('span', { id: 'broadcast-status' }, broadcastStatus(b))],
        ['Who', segmentText(b.segment, chans, planMap)],
        ['Buy button', b.button
          ? [link(`#/plans/${b.button.plan_id}`, planName(planMap, b.button.plan_id)),
            b.button.promo_code ? [' with the code ', h('code', {}, b.button.promo_code)] : null]
          : 'none'],
        ['Paid', b.paid ? `yes, at most ⭐ ${b.paid.max_stars}` : 'no (Telegram’s free rate)'],
        ['Send at', when(b.send_at)],
        ['Created', when(b.created_at)],
        b.started_at ? ['Started', when(b.started_at)] : null,
        b.finished_at ? ['Finished', when(b.finished_at)] : null,
        b.cancelled_at ? ['Cancelled', when(b.cancelled_at)] : null,
      ]),
      h('section', { id: 'broadcast-progress', 'aria-labelledby': 'broadcast-progress-title' },
        h('h2', { id: 'broadcast-progress-title' }, 'Progress'),
        b.status === 'scheduled'
          ? h('p', { class: 'hint' }, 'Not started: the recipients counted when it was made; the list is fixed when sending starts.')
          : h('p', {}, h('progress', { max: Math.max(b.recipients, 1), value: done, 'aria-label': 'Messages done' }), ' ',
            `${done} of ${b.recipients} done`),
        facts([
          ['Recipients', counter('recipients', b.recipients)],
          ['Sent', counter('sent', b.sent)],
          ['Blocked the bot', counter('blocked', b.blocked)],
          ['Failed', counter('failed', b.failed)],
          ['Skipped (said /stop since, or blocked)', counter('skipped', b.skipped)],
          ['Pending', counter('pending', b.pending)],
          ['Paid messages', b.paid ? counter('paid_messages', b.paid_messages) : '—'],
        ])),
      h('section', { id: 'broadcast-texts', 'aria-labelledby': 'broadcast-texts-title' },
        h('h2', { id: 'broadcast-texts-title' }, 'Text'),
        LANGUAGES.filter(([code]) => b.texts && b.texts[code]).map(([code, name]) => [
          h('h3', {}, `${name} (${code})`), h('p', { class: 'message-text' }, b.texts[code])])),
      h('div', { class: 'actions' }, cancel, link('#/broadcasts', 'Back to broadcasts', { class: 'button secondary' })));
    if (b.status === 'sending') {
      setTimeout(() => { if (live()) renderBroadcast(id, live).catch(fail); }, 2000);
    }
  }

  /** The messages sent (or queued) to one buyer: broadcasts and automations. */
  function messagesTable(items) {
    return table('Messages sent', ['When', 'Message', 'Outcome', 'Text'],
      items.map((m) => [
        when(m.sent_at || m.created_at),
        m.kind === 'broadcast'
          ? (m.broadcast_id ? link(`#/broadcasts/${m.broadcast_id}`, `Broadcast #${m.broadcast_id}`) : 'Broadcast')
          : automationName(m.kind),
        [m.outcome ? badge(m.outcome) : badge('pending'), m.note ? [' ', h('span', { class: 'muted' }, m.note)] : null],
        m.text
          ? h('span', { class: 'message-text' }, m.text)
          : h('span', { class: 'muted' }, m.outcome === null ? 'not sent yet' : '—'),
      ]), 'No messages sent to this buyer yet.');
  }

  // ------------------------------------------------------------------ screens in their own files

  /**
   * Screens kept in their own files (`referrals.js`, `door.js`), loaded before this one: each left a
   * factory in `window.subgateScreens` that gets the helpers every screen shares and answers
   * its `render(parts, params)`.
   */
  const kit = {
    h, link, table, facts, field, badge, when, money, say, fail, api, post, busy, page, go,
    showFieldErrors, refuse, copyable, confirmDialog, downloadButton, pagedList, actionButton, ApiError,
    channels, channelName,
  };
  const screens = Object.fromEntries(Object.entries(window.subgateScreens || {})
    .map(([name, make]) => [name, make(kit)]));

  // ------------------------------------------------------------------ start

  async function start() {
    $('tz').textContent = 'Times are shown in ' + timeZone + '.';
    $('sign-out').addEventListener('click', () => signOut('Signed out.'));
    $('skip').addEventListener('click', (e) => {
      e.preventDefault();
      const h1 = document.querySelector('main h1');
      (h1 || $('main')).focus();
    });
    window.addEventListener('hashchange', route);
    try {
      const res = await fetch('currencies.json', { cache: 'no-cache' });
      if (res.ok) exponents = await res.json();
    } catch { /* amounts fall back to two decimals */ }
    route();
  }

  start();
})();
