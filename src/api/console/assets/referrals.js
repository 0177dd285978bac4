// subgate staff console: the Referrals screens (the program's rules, the affiliates, and an
// affiliate's page with its commission ledger and payouts). A client of the referrals API only:
// every rule (who earns what, when a line is payable, what a payout nets) is the API's, shown
// and asked for here. Loaded before app.js, which calls the factory below with the helpers
// every screen shares (`kit`) and routes `#/referrals…` to its `render`.
'use strict';

(() => {
  window.subgateScreens = Object.assign(window.subgateScreens || {}, { referrals: make });

  function make(kit) {
    const {
      h, link, table, facts, field, badge, when, money, say, fail, api, post, busy, page,
      showFieldErrors, refuse, copyable, confirmDialog, downloadButton, pagedList, actionButton, ApiError,
    } = kit;

    /** `#/referrals` (the program and the affiliates) and `#/referrals/affiliates/<id>`. */
    async function render(parts) {
      if (parts[0] === 'affiliates' && parts[1]) return renderAffiliate(Number(parts[1]));
      return renderReferrals();
    }

    // ---------------------------------------------------------------- the program

    const ATTRIBUTIONS = [
      ['first_click', 'First click: the first affiliate a buyer came from keeps them for the window'],
      ['last_click', 'Last click: every click attributes the buyer anew'],
    ];

    /** The program's whole-number fields: [name, label, min, max, hint, optional]. */
    const NUMBERS = [
      ['window_days', 'Window (days)', 1, 365, 'How long after a click a first purchase earns.'],
      ['hold_days', 'Hold (days)', 0, 180, 'How long a line stays pending before it can be paid (refunds come first).'],
      ['first_percent', 'First purchase (%)', 0, 90, 'Of the payment net of Telegram’s own affiliate fee, rounded down.'],
      ['renewal_percent', 'Renewals (%)', 0, 90, 'Of each renewal, for the months below.'],
      ['renewal_months', 'Renewals earn for (months)', 0, 120, 'After the attribution; 0: renewals earn nothing.'],
      ['buyer_reward_days', 'Reward days for a buyer who brings a buyer', 1, 365,
        'Added to the referrer’s membership of the channel bought; empty: none.', true],
      ['max_reward_days_per_month', 'Most reward days a month', 1, 3660,
        'Per referrer, per calendar month (UTC); empty: no limit.', true],
    ];

    function programForm(p) {
      const input = (name, attrs) => h('input', Object.assign({ id: `rp-${name}`, name }, attrs));
      const form = h('form', { id: 'rp', class: 'card', method: 'post', novalidate: true },
        h('h2', {}, 'Program ', p.enabled ? badge('on', 'active') : badge('off', 'inactive')),
        h('p', { class: 'hint' }, 'Last changed ', when(p.updated_at), '.'),
        field('On (clicks attribute buyers, payments earn)', input('enabled', { type: 'checkbox', checked: p.enabled })),
        field('Attribution', h('select', { id: 'rp-attribution', name: 'attribution' },
          ATTRIBUTIONS.map(([v, t]) => h('option', { value: v, selected: v === p.attribution }, t)))),
        h('div', { class: 'grid' },
          NUMBERS.map(([name, label, min, max, hint]) => field(label,
            input(name, { type: 'number', min, max, step: 1, inputmode: 'numeric', value: p[name] === null ? '' : String(p[name]) }),
            hint))),
        field('Buyers get their own link (the bot’s /referral)', input('buyer_links', { type: 'checkbox', checked: p.buyer_links })),
        h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Save program')));
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        const body = {};
        const errors = {};
        for (const name of ['enabled', 'buyer_links']) {
          if (form.elements[name].checked !== p[name]) body[name] = form.elements[name].checked;
        }
        if (form.elements.attribution.value !== p.attribution) body.attribution = form.elements.attribution.value;
        for (const [name, , , , , optional] of NUMBERS) {
          const text = form.elements[name].value.trim();
          let value;
          if (text === '') {
            if (!optional) { errors[name] = 'is required'; continue; }
            value = null;
          } else if (/^-?\d+$/.test(text)) {
            value = Number(text);
          } else {
            errors[name] = 'must be a whole number';
            continue;
          }
          if (value !== p[name]) body[name] = value;
        }
        if (Object.keys(errors).length) { refuse(form, errors); return; }
        if (!Object.keys(body).length) { say('Nothing changed.'); return; }
        await busy(form, async () => {
          try {
            const saved = await api('PATCH', '/referral-program', body);
            form.replaceWith(programForm(saved));
            say(`Saved the program: ${saved.enabled ? 'on' : 'off'}, ${saved.first_percent}% of first purchases, `
              + `${saved.renewal_percent}% of renewals for ${saved.renewal_months} months.`);
          } catch (err) {
            showFieldErrors(form, err);
            fail(err);
          }
        });
      });
      return form;
    }

    // ---------------------------------------------------------------- affiliates

    /** Turns an affiliate on or off (`PATCH /affiliates/<id> {"active"}`), then `redraw()`. */
    function activeButton(a, redraw) {
      return actionButton(a.active ? 'Deactivate' : 'Activate', `affiliate ${a.name}`, async () => {
        const saved = await api('PATCH', `/affiliates/${a.id}`, { active: !a.active });
        await redraw();
        say(saved.active
          ? `${saved.name} is active again: their link attributes buyers.`
          : `${saved.name} is deactivated: their link no longer attributes buyers; what they earned stays.`);
      });
    }

    /**
     * The list as `GET /affiliates` gives it: who they are and their link. What each brought
     * (buyers, sums, balance) is their summary, one request per affiliate: it is on their page.
     */
    function affiliatesTable(items, redraw) {
      return table('Affiliates', ['Affiliate', 'Code', 'Link', 'Status', 'Since', 'Actions'],
        items.map((a) => [
          [link(`#/referrals/affiliates/${a.id}`, a.name),
            a.subscriber_id ? [' ', badge('buyer', 'trial')] : null],
          h('code', {}, a.code),
          a.link ? copyable(a.link, `affiliate-${a.id}-link`, `link of ${a.name}`) : '—',
          a.active ? badge('active') : badge('inactive'),
          when(a.created_at),
          activeButton(a, redraw),
        ]), 'No affiliates yet.');
    }

    function newAffiliateForm(onCreated) {
      const form = h('form', { id: 'aff', class: 'card', method: 'post', novalidate: true },
        h('h2', {}, 'New affiliate'),
        h('div', { class: 'grid' },
          field('Name', h('input', { id: 'aff-name', name: 'name', type: 'text', maxlength: 200, required: true, autocomplete: 'off' })),
          field('Subscriber id (a buyer who brings buyers)', h('input', { id: 'aff-subscriber_id', name: 'subscriber_id', type: 'number', min: 1, step: 1 }),
            'Optional: their own purchases never earn them anything.'),
          field('Code', h('input', { id: 'aff-code', name: 'code', type: 'text', maxlength: 32, autocomplete: 'off', autocapitalize: 'characters' }),
            'Optional: A–Z, 0–9 and _, 3 to 32 characters; made up when empty.')),
        h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create affiliate')));
      form.addEventListener('submit', (e) => {
        e.preventDefault();
        const body = { name: form.elements.name.value.trim() };
        const subscriber = form.elements.subscriber_id.value.trim();
        if (subscriber) {
          if (!/^\d+$/.test(subscriber)) { refuse(form, { subscriber_id: 'must be a subscriber’s id (a whole number)' }); return; }
          body.subscriber_id = Number(subscriber);
        }
        const code = form.elements.code.value.trim().toUpperCase();
        if (code) body.code = code;
        busy(form, async () => {
          try {
            const created = await post(form, '/affiliates', body);
            form.reset();
            showFieldErrors(form, null);
            await onCreated(created);
          } catch (err) {
            showFieldErrors(form, err);
            fail(err);
          }
        });
      });
      return form;
    }

    async function renderReferrals() {
      const { main, live } = page('Referrals');
      const program = await api('GET', '/referral-program');
      if (!live()) return;
      const notice = h('div', { id: 'affiliate-created' });
      const section = h('section', { id: 'affiliate-list', 'aria-labelledby': 'affiliates-title' });
      const redraw = async () => {
        section.replaceChildren(h('h2', { id: 'affiliates-title' }, 'Affiliates'));
        await pagedList(section, '/affiliates', live, (items) => affiliatesTable(items, redraw));
      };
      main.append(
        h('p', { class: 'hint' },
          'Buyers who come through an affiliate’s link are attributed to them; their payments earn the affiliate a '
          + 'commission line, payable after the hold and taken back with a refund.'),
        programForm(program),
        notice,
        newAffiliateForm(async (a) => {
          notice.replaceChildren(h('div', { class: 'card notice', role: 'region', 'aria-label': 'New affiliate' },
            h('p', {}, `${a.name} is an affiliate with the code `, h('code', {}, a.code), '. Their link:'),
            a.link ? copyable(a.link, 'affiliate-new-link', `link of ${a.name}`) : h('p', { class: 'muted' }, 'No link: the bot’s username is not set.')));
          say(`Created affiliate ${a.name} (${a.code}).`);
          await redraw();
        }),
        section);
      await redraw();
    }

    // ---------------------------------------------------------------- an affiliate

    const KINDS = { first: 'first purchase', renewal: 'renewal', reversal: 'reversal' };

    /**
     * The summary's per-currency figures, one row each, with "Record payout": the earning
     * lines by status (`commission`), the reversal lines' sum (zero or negative) and the
     * balance a payout would pay now.
     */
    function currencyTable(a, rows, redraw) {
      return table('Revenue and commission by currency',
        ['Currency', 'Revenue', 'Pending', 'Payable', 'Paid', 'Reversed', 'Reversals', 'Balance', 'Payout'],
        rows.map((c) => [
          c.currency,
          money(c.revenue_minor, c.currency),
          money(c.commission.pending, c.currency),
          money(c.commission.payable, c.currency),
          money(c.commission.paid, c.currency),
          money(c.commission.reversed, c.currency),
          money(c.reversals_minor, c.currency),
          h('strong', {}, money(c.balance_minor, c.currency)),
          payoutButton(a, c, redraw),
        ]), 'Nothing earned yet.');
    }

    function payoutButton(a, c, redraw) {
      const b = h('button', { type: 'button', class: 'small', id: `payout-${c.currency}`, 'aria-label': `Record payout in ${c.currency} to ${a.name}` },
        'Record payout');
      b.addEventListener('click', async () => {
        const amount = money(c.balance_minor, c.currency).textContent;
        const ok = await confirmDialog(`Record a payout to ${a.name}?`,
          `Every payable ${c.currency} line is marked paid, less what earlier reversals took back: about ${amount} `
          + 'as shown now (the API counts it again). Record it once the money is sent; it cannot be undone here.',
          'Record payout', 'Not now');
        if (!ok) return;
        await busy(b, async () => {
          try {
            const p = await post(b, '/payouts', { affiliate_id: a.id, currency: c.currency });
            await redraw();
            say(`Recorded payout #${p.id} to ${a.name}: ${money(p.amount_minor, p.currency).textContent} `
              + `for ${p.lines} line${p.lines === 1 ? '' : 's'}.`);
          } catch (err) {
            if (err instanceof ApiError && err.status === 409) {
              fail(new ApiError(409, {
                detail: `Nothing to pay ${a.name} in ${c.currency} now: no line is payable yet (lines wait out the hold), `
                  + 'or earlier reversals take back at least as much as is payable. '
                  + `The server said: ${err.problem.detail || err.problem.title || 'conflict'}.`,
              }));
            } else {
              fail(err);
            }
          }
        });
      });
      return b;
    }

    function linesTable(items) {
      return table('Commission lines', ['Line', 'Kind', 'Amount', 'Currency', 'Status', 'Payable at', 'Payment'],
        items.map((l) => [
          '#' + l.id,
          KINDS[l.kind] || l.kind,
          money(l.amount_minor, l.currency),
          l.currency,
          badge(l.status),
          when(l.payable_at),
          paymentLink(l),
        ]), 'No commission lines yet.');
    }

    /** A line's payment, linked to its buyer's page (which lists their payments) when known. */
    function paymentLink(l) {
      const buyer = l.subscriber_id;
      return buyer
        ? link(`#/subscribers/${buyer}`, `Payment #${l.payment_id}`, { title: `The buyer’s page, subscriber #${buyer}` })
        : `Payment #${l.payment_id}`;
    }

    function payoutsTable(items) {
      return table('Payouts', ['Payout', 'Amount', 'Lines', 'Recorded'],
        items.map((p) => [
          '#' + p.id,
          money(p.amount_minor, p.currency),
          String(p.lines),
          when(p.created_at),
        ]), 'No payouts yet.');
    }

    async function renderAffiliate(id) {
      const [a, s] = await Promise.all([api('GET', `/affiliates/${id}`), api('GET', `/affiliates/${id}/summary`)]);
      const { main, live } = page(`Affiliate: ${a.name}`);
      const redraw = () => renderAffiliate(id);
      const count = (key, n) => h('span', { id: `affiliate-${key}` }, n === null || n === undefined ? '—' : String(n));
      const summary = h('section', { id: 'affiliate-summary', 'aria-labelledby': 'affiliate-summary-title' },
        h('h2', { id: 'affiliate-summary-title' }, 'What they brought'),
        facts([
          ['Clicks', count('clicks', s.clicks)],
          ['Attributed buyers', count('attributed', s.attributed_buyers)],
          ['Paying buyers', count('paying', s.paying_buyers)],
        ]),
        h('div', { id: 'affiliate-currencies' }, currencyTable(a, s.currencies || [], redraw)),
        h('p', { class: 'hint' },
          'Revenue: the payments the lines were computed on (net of Telegram’s own affiliate fee), less those taken back. '
          + 'Pending: within the hold. Payable: past the hold, not paid yet. Reversed: taken back by a refund or a dispute '
          + 'before it was paid. Reversals: lines taken back after they were paid, netted from the next payout. '
          + 'Balance: what a payout would pay now (below zero, it carries into the next one).'));
      const lines = h('section', { id: 'affiliate-lines', 'aria-labelledby': 'affiliate-lines-title' },
        h('h2', { id: 'affiliate-lines-title' }, 'Commission lines'),
        h('p', { class: 'actions' },
          downloadButton('Download CSV', `/commissions.csv?affiliate_id=${a.id}`, `commissions-affiliate-${a.id}.csv`)));
      const payouts = h('section', { id: 'affiliate-payouts', 'aria-labelledby': 'affiliate-payouts-title' },
        h('h2', { id: 'affiliate-payouts-title' }, 'Payouts'));
      main.append(
        facts([
          ['Code', h('code', {}, a.code)],
          ['Link', a.link ? copyable(a.link, 'affiliate-link', `link of ${a.name}`) : '—'],
          ['Status', [a.active ? badge('active') : badge('inactive'), ' ', activeButton(a, redraw)]],
          a.subscriber_id ? ['A buyer', link(`#/subscribers/${a.subscriber_id}`, `Subscriber #${a.subscriber_id}`)] : null,
          ['Since', when(a.created_at)],
        ]),
        summary, lines, payouts,
        h('p', {}, link('#/referrals', 'All affiliates', { class: 'button secondary' })));
      await Promise.all([
        pagedList(lines, `/commissions?affiliate_id=${a.id}`, live, linesTable),
        pagedList(payouts, `/payouts?affiliate_id=${a.id}`, live, payoutsTable),
      ]);
    }

    return { render };
  }
})();
