// subgate staff console: the Door screen, the join requests that came to a channel's or
// group's Mini App door (its own link opens the paywall). A client of `GET /api/join-requests`
// only: the door decides (`src/telegram/door.rs`); this screen shows who waits there, how the
// door answered them and what became of them. Loaded before app.js, which calls the factory
// below with the helpers every screen shares (`kit`) and routes `#/door` to its `render`.
'use strict';

(() => {
  window.subgateScreens = Object.assign(window.subgateScreens || {}, { door: make });

  function make(kit) {
    const { h, link, table, field, badge, when, page, go, pagedList, channels, channelName } = kit;

    /** How the door answered a request's query, in a person's words. */
    const ANSWERS = {
      web_app: 'Mini App opened',
      approve: 'Approved at once',
      queue: 'Queued',
    };

    /** A request's state: [value, words, badge kind]. */
    const STATES = [
      ['waiting', 'waiting', 'grace'],
      ['approved', 'approved', 'active'],
      ['declined', 'declined', 'expired'],
    ];

    function stateBadge(state) {
      const s = STATES.find(([v]) => v === state);
      return s ? badge(s[1], s[2]) : badge(state);
    }

    /** The Telegram user, with their subscriber's page when the service knows them. */
    function userCell(r) {
      return [h('span', { class: 'nowrap' }, String(r.user_id)),
        r.subscriber_id
          ? [' ', link(`#/subscribers/${r.subscriber_id}`, `Subscriber #${r.subscriber_id}`)]
          : [' ', h('span', { class: 'muted' }, '(not a subscriber yet)')]];
    }

    /** The order the Mini App made for the request, on its buyer's page (which lists orders). */
    function orderCell(r) {
      if (!r.order_id) return '—';
      return r.subscriber_id
        ? link(`#/subscribers/${r.subscriber_id}`, `Order #${r.order_id}`, { title: `The buyer’s page, subscriber #${r.subscriber_id}` })
        : `Order #${r.order_id}`;
    }

    /**
     * When it was decided, and whether Telegram has been told yet. A request approved at once
     * was told in the door's own answer.
     */
    function decidedCell(r) {
      if (!r.decided_at) return '—';
      const told = r.answered_at || r.answer === 'approve';
      return [when(r.decided_at),
        told ? null : [' ', h('span', { class: 'muted' }, '(Telegram not told yet)')]];
    }

    function requestsTable(items, chans, state) {
      return table('Join requests at the door',
        ['Request', 'Channel or group', 'Telegram user', 'Door answered', 'State', 'Order', 'Requested', 'Decided'],
        items.map((r) => [
          '#' + r.id,
          link(`#/channels/${r.channel_id}`, channelName(chans, r.channel_id)),
          userCell(r),
          ANSWERS[r.answer] || r.answer,
          stateBadge(r.state),
          orderCell(r),
          when(r.requested_at),
          decidedCell(r),
        ]),
        state === 'waiting' ? 'No one is waiting at the door.' : 'No join requests match.');
    }

    /**
     * `#/door?channel_id=&state=`: the requests at Mini App doors, oldest first, those waiting
     * unless another state (or `state=`, every state) is asked for.
     */
    async function render(parts, params) {
      const { main, live } = page('Door');
      const state = params.has('state') ? params.get('state') : 'waiting';
      const channelId = params.get('channel_id') || '';
      const chans = await channels();
      if (!live()) return;
      const filter = h('form', { id: 'dfilter', class: 'card inline', method: 'post' },
        field('Channel or group', h('select', { id: 'dfilter-channel', name: 'channel_id' },
          h('option', { value: '' }, 'All channels and groups'),
          Array.from(chans.values()).map((c) => h('option', { value: String(c.id), selected: String(c.id) === channelId }, c.title)))),
        field('State', h('select', { id: 'dfilter-state', name: 'state' },
          STATES.map(([v, t]) => h('option', { value: v, selected: v === state }, t)),
          h('option', { value: '', selected: state === '' }, 'every state'))),
        h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Show')));
      filter.addEventListener('submit', (e) => {
        e.preventDefault();
        const q = new URLSearchParams();
        if (filter.elements.channel_id.value) q.set('channel_id', filter.elements.channel_id.value);
        q.set('state', filter.elements.state.value);
        go('#/door?' + q);
      });
      main.append(
        h('p', { class: 'hint' },
          'People who asked to join a channel or group whose door is the Mini App paywall. '
          + 'Members, exempt users and administrators are approved at once; anyone else gets the Mini App to '
          + 'pay or start a trial, and waits here until their access is granted (approved) or their order runs '
          + 'out unpaid or the request outlives its query (declined). A request not decided in time is queued '
          + 'and decided as soon as it can be.'),
        filter);
      const q = new URLSearchParams();
      if (channelId) q.set('channel_id', channelId);
      if (state) q.set('state', state);
      const section = h('section', { id: 'door-list' });
      main.append(section);
      await pagedList(section, '/join-requests?' + q, live, (items) => requestsTable(items, chans, state));
    }

    return { render };
  }
})();
