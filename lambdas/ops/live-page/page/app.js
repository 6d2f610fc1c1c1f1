// The live page's script: hand-written, no build step, no library. It takes the state the server
// pushes (server-sent events; polling when they fail), draws the counts, the charts (inline SVG, each
// with its figures as a table) and the review queue, shows one operation's timeline, and sends a
// review action only after the confirmation step. Everything is written with textContent: no figure
// or reason from the database is ever parsed as HTML.
const $ = (id) => document.getElementById(id);
const SVG = 'http://www.w3.org/2000/svg';
let state = null;
let shown = null; // the timeline on screen: { key, operation }

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') node.className = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

const num = (n) => (n === null || n === undefined ? '–' : String(n));
const ms = (n) => (n === null || n === undefined ? '–' : n >= 10000 ? `${(n / 1000).toFixed(1)} s` : `${Math.round(n)} ms`);
const ago = (s) => (s < 90 ? `${s} s` : s < 5400 ? `${Math.round(s / 60)} min` : `${(s / 3600).toFixed(1)} h`);

function setText(id, value) {
  const node = $(id);
  if (node) node.textContent = num(value);
}

// ── State ─────────────────────────────────────────────────────────────────────────────────────────

function render(s) {
  state = s;
  $('title').textContent = s.title;
  document.title = `${s.title} — live page`;
  $('target').textContent = s.target;
  const banner = $('mode-banner');
  banner.className = `banner ${s.actionsAllowed ? 'actions' : 'readonly'}`;
  banner.textContent = s.actionsAllowed
    ? `Actions allowed — as ${s.actor ?? 'the identity STS verifies'}; each runs as the ops command and is audited`
    : 'Read-only — started without --allow-actions';
  $('updated').textContent = `Updated ${new Date(s.asOf).toLocaleTimeString()}`;
  $('problem').hidden = true;

  const f = s.flow;
  setText('queue-waiting', f.queue?.waiting);
  setText('queue-notVisible', f.queue?.notVisible);
  setText('queue-dlq', f.queue?.dlq);
  $('queue-note').hidden = f.queue !== null;
  setText('in-flight', f.inFlight);
  setText('open-total', f.charges.pending + f.charges.unknown + f.refunds.pending + f.refunds.unknown);
  setText('stripe-succeeded', f.charges.succeeded + f.refunds.succeeded);
  setText('stripe-failed', f.charges.failed + f.refunds.failed);
  setText('stripe-review', f.review.size);
  setText('outbox-unpublished', f.outbox.unpublished);
  setText('rejected-24h', f.rejected24h);
  for (const [kind, counts] of [['charge', f.charges], ['refund', f.refunds]]) {
    for (const k of ['pending', 'unknown', 'succeeded', 'failed', 'inReview', 'total']) setText(`${kind}-${k}`, counts[k]);
  }
  drawCharts(s);
  renderReview(s);
  $('action-form').hidden = !(s.actionsAllowed && shown?.operation?.inReview);
  $('action-readonly').hidden = s.actionsAllowed || !shown?.operation?.inReview;
}

function problem(text) {
  const p = $('problem');
  p.textContent = `The figures could not be read: ${text}`;
  p.hidden = false;
}

// ── Charts (inline SVG) ───────────────────────────────────────────────────────────────────────────

const W = 360, H = 160, L = 44, R = 8, T = 10, B = 24;

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

/** Lines over seconds since the first sample; series: [{ name, color, dash, points: [{x, y}] }]. */
function lineChart(svg, series, unit) {
  svg.replaceChildren();
  const all = series.flatMap((s) => s.points);
  const xMax = Math.max(1, ...all.map((p) => p.x));
  const yMax = Math.max(1, ...all.map((p) => p.y));
  const x = (v) => L + (v / xMax) * (W - L - R);
  const y = (v) => H - B - (v / yMax) * (H - T - B);
  svg.append(svgEl('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#4a4a4a' }));
  svg.append(svgEl('line', { x1: L, y1: T, x2: L, y2: H - B, stroke: '#4a4a4a' }));
  const label = (text, attrs) => {
    const t = svgEl('text', { 'font-size': 11, fill: '#1a1a1a', ...attrs });
    t.textContent = text;
    svg.append(t);
  };
  label(`${Math.round(yMax * 10) / 10}${unit}`, { x: L - 4, y: T + 8, 'text-anchor': 'end' });
  label('0', { x: L - 4, y: H - B, 'text-anchor': 'end' });
  label('0 s', { x: L, y: H - 6 });
  label(`${Math.round(xMax)} s`, { x: W - R, y: H - 6, 'text-anchor': 'end' });
  series.forEach((s, i) => {
    if (s.points.length === 0) return;
    svg.append(svgEl('polyline', { points: s.points.map((p) => `${x(p.x).toFixed(1)},${y(p.y).toFixed(1)}`).join(' '), fill: 'none', stroke: s.color, 'stroke-width': 2, 'stroke-dasharray': s.dash ?? '' }));
    if (series.length > 1) {
      svg.append(svgEl('line', { x1: L + 8 + i * 70, y1: T + 4, x2: L + 28 + i * 70, y2: T + 4, stroke: s.color, 'stroke-width': 2, 'stroke-dasharray': s.dash ?? '' }));
      label(s.name, { x: L + 32 + i * 70, y: T + 8 });
    }
  });
}

function figureRows(figure, rows) {
  const body = figure.querySelector('tbody');
  body.replaceChildren(...rows.map((cells) => el('tr', {}, ...cells.map((c, i) => el(i === 0 ? 'th' : 'td', i === 0 ? { scope: 'row' } : { class: 'n' }, c)))));
}

/** At most `n` evenly spaced rows for the figures tables. */
const thin = (items, n = 12) => (items.length <= n ? items : items.filter((_, i) => i % Math.ceil(items.length / n) === 0 || i === items.length - 1));

function drawCharts(s) {
  const t0 = s.samples[0]?.at ?? Date.now();
  const sec = (at) => (at - t0) / 1000;

  const rate = $('chart-rate');
  const rates = s.rates.map((r) => ({ x: sec(r.at), y: r.perSecond }));
  lineChart(rate.querySelector('svg'), [{ name: 'settled/s', color: '#0b5cad', points: rates }], '/s');
  const peak = rates.reduce((m, p) => Math.max(m, p.y), 0);
  const settled = s.samples.at(-1)?.settled ?? 0;
  rate.querySelector('svg').setAttribute('aria-label', `Operations settled per second over ${Math.round(sec(s.samples.at(-1)?.at ?? t0))} s: now ${(rates.at(-1)?.y ?? 0).toFixed(1)}, peak ${peak.toFixed(1)}; ${settled} settled in all`);
  figureRows(rate, thin(rates).map((p) => [p.x.toFixed(0), p.y.toFixed(1)]));

  const lat = $('chart-latency');
  const known = s.samples.filter((p) => p.p50Ms !== null);
  const last = known.at(-1);
  lineChart(lat.querySelector('svg'), [
    { name: 'p50', color: '#1b6e3a', points: known.map((p) => ({ x: sec(p.at), y: p.p50Ms / 1000 })) },
    { name: 'p95', color: '#a4161a', dash: '5 3', points: known.map((p) => ({ x: sec(p.at), y: p.p95Ms / 1000 })) },
  ], ' s');
  lat.querySelector('svg').setAttribute('aria-label', last ? `First send to final, over the charges final so far: p50 ${ms(last.p50Ms)}, p95 ${ms(last.p95Ms)}` : 'First send to final: not known here (the local run measures it)');
  figureRows(lat, thin(known).map((p) => [sec(p.at).toFixed(0), num(p.p50Ms), num(p.p95Ms)]));

  const faults = $('chart-faults');
  const counted = s.samples.filter((p) => p.faults !== null);
  lineChart(faults.querySelector('svg'), [{ name: 'faults', color: '#7a4d00', points: counted.map((p) => ({ x: sec(p.at), y: p.faults })) }], '');
  const byKind = Object.entries(s.faultsByKind ?? {}).sort((a, b) => b[1] - a[1]);
  faults.querySelector('svg').setAttribute('aria-label', s.faultsByKind === null ? 'Faults: not counted here (the fake Stripe counts them in a local run)' : `Faults met so far: ${counted.at(-1)?.faults ?? 0}${byKind.length ? ` — ${byKind.map(([k, n]) => `${k} ${n}`).join(', ')}` : ''}`);
  figureRows(faults, byKind.map(([k, n]) => [k, String(n)]));
}

// ── Review queue ──────────────────────────────────────────────────────────────────────────────────

function evidenceOf(op) {
  const parts = [`attempts ${op.attempts}`, `key generation ${op.keyGeneration}`];
  if (op.externalId) parts.push(`Stripe id ${op.externalId}`);
  if (op.lastErrorClass || op.lastError) parts.push(`last error ${[op.lastErrorClass, op.lastError].filter(Boolean).join(': ')}`);
  if (op.refundsWaiting) parts.push(`${op.refundsWaiting} refund(s) wait for it`);
  return parts.join(' · ');
}

function renderReview(s) {
  const ops = s.review.operations;
  $('review-size').textContent = `(${s.review.total})`;
  $('review-empty').hidden = ops.length > 0;
  $('review-table').querySelector('tbody').replaceChildren(
    ...ops.map((op) =>
      el('tr', { 'data-operation-id': op.id },
        el('td', {}, op.orderId),
        el('td', {}, op.kind),
        el('td', {}, op.status),
        el('td', { class: 'n' }, ago(op.inReviewSeconds)),
        el('td', {}, op.reviewReason ?? ''),
        el('td', {}, evidenceOf(op)),
        el('td', {}, el('button', { type: 'button', class: 'secondary', 'aria-label': `Open the timeline of ${op.orderId} (${op.kind})`, onclick: () => showTimeline(op.id) }, 'Timeline')),
      ),
    ),
  );
}

// ── Timeline ──────────────────────────────────────────────────────────────────────────────────────

function trailItem(e) {
  const move = e.fromStatus || e.toStatus ? ` ${e.fromStatus ?? '∅'} → ${e.toStatus ?? '∅'}` : '';
  const detail = JSON.stringify(e.detail, null, 2);
  return el('li', { class: e.actor.startsWith('operator:') ? 'operator' : '', 'data-event-id': String(e.id) },
    el('strong', {}, e.action), move, el('br'),
    el('span', { class: 'muted' }, `#${e.id} · ${new Date(e.occurredAt).toLocaleTimeString()} · ${e.actor}${e.step ? ` · ${e.step}` : ''}${e.errorClass ? ` · ${e.errorClass}` : ''}${e.externalId ? ` · ${e.externalId}` : ''}`),
    el('details', {}, el('summary', {}, 'detail'), el('pre', {}, detail)),
  );
}

function stripeTable(objects) {
  if (objects.length === 0) return el('p', {}, 'Nothing.');
  const keys = [...new Set(objects.flatMap((o) => Object.keys(o)))].filter((k) => k !== 'metadata');
  return el('table', { 'aria-labelledby': 'stripe-h' },
    el('thead', {}, el('tr', {}, ...keys.map((k) => el('th', { scope: 'col' }, k)))),
    el('tbody', {}, ...objects.map((o) => el('tr', {}, ...keys.map((k) => el('td', {}, typeof o[k] === 'object' && o[k] !== null ? JSON.stringify(o[k]) : num(o[k])))))),
  );
}

async function showTimeline(key, { keepResult = false } = {}) {
  $('timeline-key').value = key;
  // An action's answer belongs to its operation: another timeline starts without it.
  if (!keepResult) {
    $('action-result').className = '';
    $('action-result').textContent = '';
  }
  const res = await fetch(`/api/timeline?key=${encodeURIComponent(key)}`);
  const body = await res.json();
  const box = $('timeline');
  box.hidden = false;
  if (!res.ok || !body.show?.ok) {
    shown = { key, operation: null };
    $('timeline-title').textContent = `No timeline for ${key}`;
    $('timeline-summary').textContent = body.error ?? body.show?.error?.message ?? 'not found';
    $('trail').replaceChildren();
    $('stripe-objects').replaceChildren();
    $('stripe-source').textContent = '';
    $('action-form').hidden = true;
    $('action-readonly').hidden = true;
    return;
  }
  const r = body.show.result;
  const op = r.operation;
  shown = { key, operation: op };
  $('timeline-title').textContent = `${op.kind} ${op.orderId} — ${op.status}${op.inReview ? ' (in review)' : ''}`;
  $('timeline-title').setAttribute('data-operation-id', op.id);
  $('timeline-summary').textContent =
    `operation ${op.id} · ${op.amount} ${op.currency} · key generation ${op.keyGeneration} · ${r.auditTrail.length} audit events · ${r.outcomeEvents.length} outcome events` +
    (op.reviewReason ? ` · review reason: ${op.reviewReason}` : '');
  $('trail').replaceChildren(...r.auditTrail.map(trailItem));
  $('stripe-source').textContent = body.stripe ? `${body.stripe.source}${body.stripe.note ? ` — ${body.stripe.note}` : ''}` : '';
  $('stripe-objects').replaceChildren(body.stripe ? stripeTable(body.stripe.objects) : el('p', {}, 'Not read.'));
  $('action-form').hidden = !(state?.actionsAllowed && op.inReview);
  $('action-readonly').hidden = !!state?.actionsAllowed || !op.inReview;
}

$('timeline-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const key = $('timeline-key').value.trim();
  if (key) void showTimeline(key);
});

// ── Actions: the form, then the confirmation step, then the ops command ───────────────────────────

let pending = null;

function requestFromForm() {
  const form = $('action-form');
  const choice = form.elements.action.value;
  const reason = $('action-reason').value.trim();
  const proof = $('action-proof').value.trim();
  const [action, as] = choice.startsWith('resolve-') ? ['resolve', choice.slice('resolve-'.length)] : [choice, null];
  return { operationId: shown.operation.id, action, as, proof: as === 'succeeded' ? proof : null, reason };
}

function previewArgv(r) {
  const reason = ['--reason', r.reason];
  if (r.action === 'resolve') return ['review', 'resolve', r.operationId, '--as', r.as, ...(r.proof ? [r.proof.startsWith('re_') ? '--refund' : '--payment-intent', r.proof] : []), ...reason];
  if (r.action === 'reissue') return ['review', 'reissue', r.operationId, '--confirm-no-charge', ...reason];
  return ['review', 'note', r.operationId, ...reason];
}

const quote = (a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", "'\\''")}'`);

$('action-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const r = requestFromForm();
  if (!r.reason) {
    $('action-reason').focus();
    return;
  }
  pending = r;
  $('confirm-command').textContent = `npm run ops -- ${previewArgv(r).map(quote).join(' ')}`;
  $('confirm').showModal();
  $('confirm-cancel').focus();
});

$('confirm-cancel').addEventListener('click', () => {
  pending = null;
  $('confirm').close();
});

$('confirm-run').addEventListener('click', async () => {
  const r = pending;
  pending = null;
  $('confirm').close();
  if (!r) return;
  const out = $('action-result');
  out.className = 'result';
  out.textContent = 'Running…';
  const res = await fetch('/api/actions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...r, confirmed: true }) });
  const body = await res.json();
  const response = body.response;
  if (!res.ok || !response?.ok) {
    out.className = 'result err';
    out.textContent = `Not done: ${body.error ?? response?.error?.message ?? res.statusText}`;
  } else {
    out.className = 'result ok';
    const audit = response.result.auditEvent;
    out.textContent = `Done: ${response.command}${audit ? ` — audit event #${audit.id} ${audit.action} by ${audit.actor}` : ''}`;
    $('action-reason').value = '';
  }
  await showTimeline(r.operationId, { keepResult: true });
});

// ── Live updates: server-sent events, polling when they fail ──────────────────────────────────────

async function poll() {
  try {
    const res = await fetch('/api/state');
    const body = await res.json();
    if (res.ok) render(body);
    else problem(body.error);
  } catch (error) {
    problem(String(error));
  }
}

function connect() {
  if (!('EventSource' in window)) {
    void poll();
    setInterval(poll, 2000);
    return;
  }
  const events = new EventSource('/api/events');
  events.addEventListener('state', (e) => render(JSON.parse(e.data)));
  events.addEventListener('problem', (e) => problem(JSON.parse(e.data).message));
  events.onerror = () => {
    $('updated').textContent = 'Connection lost; retrying…';
  };
}

void poll();
connect();
