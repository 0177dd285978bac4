// subgate Mini App: the paywall at a channel's door (`/app/?c=<channel>&r=<join request>`) and
// the buyer's portal (`/app/`). A client of the Mini App API (/app/api/), nothing more.
//
// - Who the buyer is, what they may buy, at what price and in which language is the API's
//   answer: every call carries Telegram's signed initData (`Authorization: tma …`), and the page
//   shows what comes back. Its own words (buttons, headings) are the small dictionary below,
//   in the language the API names (before its first answer, the Telegram user's).
// - Telegram.WebApp comes from telegram-web-app.js; when `window.Telegram` is already there
//   when this runs (a Telegram client that injects it, or a test's stand-in), it is used as is.
// - Every screen is built with DOM calls and textContent (never innerHTML with data), and the
//   server's Content-Security-Policy allows no inline script or style.
'use strict';

(() => {
  const tg = (window.Telegram && window.Telegram.WebApp) || null;
  const LANGUAGES = ['en', 'uk', 'ru'];

  // ------------------------------------------------------------------ words

  const WORDS = {
    en: {
      loading: 'Loading…',
      open_in_telegram: 'Open this from Telegram',
      open_in_telegram_body: 'This page works inside Telegram. Open it with the button in the bot or the channel.',
      too_many: 'Too many requests. Please wait a moment and try again.',
      offline: 'No connection. Check the internet and try again.',
      failed: 'Something went wrong. Please try again.',
      retry: 'Try again',
      choose_plan: 'Choose a plan',
      no_plans: 'Nothing is on sale here right now.',
      try_free: 'Try free',
      buy: 'Buy',
      pay_card: 'Pay by card',
      pay_wayforpay: 'Pay by card (WayForPay)',
      pay_stripe: 'Pay by card (Stripe)',
      pay_monobank: 'Pay by card (Monobank)',
      days: { one: '{n} day', other: '{n} days' },
      for_period: 'for {period}',
      every_period: 'every {period}, renews by itself',
      lifetime_access: 'lifetime access',
      trial: 'Free trial',
      bundle: 'Also includes: {list}',
      full: 'No seats left',
      lifetime_held: 'You already have lifetime access',
      not_on_sale: 'Not on sale',
      promo_label: 'Promo code',
      promo_apply: 'Apply',
      promo_applied: 'Code {code} applied',
      promo_refused: 'Code {code} cannot be used',
      member_until: 'You are a member until {date}.',
      member_lifetime: 'You have lifetime access.',
      member_status: 'Your membership: {status}.',
      waiting_payment: 'Waiting for your payment…',
      waiting_card: 'Finish the payment on the card page. This screen updates by itself when the payment arrives.',
      payment_slow: 'The payment has not arrived yet. It can take a few minutes; the bot will message you when it does.',
      check_again: 'Check again',
      payment_cancelled: 'The payment was cancelled. You can choose again.',
      payment_failed: 'The payment did not go through. You can try again.',
      done: 'You’re in!',
      done_body: 'Your access to {channel} is ready. The bot has sent you the link in the chat.',
      done_body_door: 'Your access to {channel} is ready.',
      join_waiting: 'Your request to join will be approved in a moment.',
      join_approved: 'Your request to join is approved: open the channel in Telegram.',
      join_declined: 'Your request to join was declined. The bot has sent you the link instead.',
      close: 'Close',
      back_to_plans: 'Back to the plans',
      my_subscriptions: 'My subscriptions',
      hello: 'Hello, {name}',
      memberships: 'Memberships',
      no_memberships: 'You have no memberships yet.',
      until: 'until {date}',
      lifetime: 'lifetime',
      status_active: 'active',
      status_grace: 'grace period',
      status_expired: 'ended',
      status_paused: 'paused',
      renew: 'Renew',
      subscriptions: 'Stars subscriptions',
      renews_on: 'Renews on {date}',
      ends_on: 'Ends on {date}, will not renew',
      cancel: 'Cancel subscription',
      resume: 'Resume subscription',
      cancel_confirm: 'Cancel this subscription? Your access stays until the end of the paid period.',
      payments: 'Payments',
      no_payments: 'No payments yet.',
      refunded: 'Refunded',
      language: 'Language',
      referral: 'Invite friends',
      referral_body: 'Share your link; your code is {code}.',
      referral_link: 'Your link',
      share: 'Share',
    },
    uk: {
      loading: 'Завантаження…',
      open_in_telegram: 'Відкрийте це з Telegram',
      open_in_telegram_body: 'Ця сторінка працює всередині Telegram. Відкрийте її кнопкою в боті чи в каналі.',
      too_many: 'Забагато запитів. Зачекайте трохи й спробуйте ще раз.',
      offline: 'Немає з’єднання. Перевірте інтернет і спробуйте ще раз.',
      failed: 'Щось пішло не так. Спробуйте ще раз.',
      retry: 'Спробувати ще раз',
      choose_plan: 'Оберіть тариф',
      no_plans: 'Зараз тут нічого не продається.',
      try_free: 'Спробувати безкоштовно',
      buy: 'Купити',
      pay_card: 'Оплатити карткою',
      pay_wayforpay: 'Оплатити карткою (WayForPay)',
      pay_stripe: 'Оплатити карткою (Stripe)',
      pay_monobank: 'Оплатити карткою (Monobank)',
      days: { one: '{n} день', few: '{n} дні', many: '{n} днів', other: '{n} дня' },
      for_period: 'на {period}',
      every_period: 'кожні {period}, подовжується сама',
      lifetime_access: 'доступ назавжди',
      trial: 'Безкоштовна пробна версія',
      bundle: 'Також входить: {list}',
      full: 'Місць немає',
      lifetime_held: 'У вас уже є доступ назавжди',
      not_on_sale: 'Не продається',
      promo_label: 'Промокод',
      promo_apply: 'Застосувати',
      promo_applied: 'Код {code} застосовано',
      promo_refused: 'Код {code} не можна використати',
      member_until: 'Ви учасник до {date}.',
      member_lifetime: 'У вас доступ назавжди.',
      member_status: 'Ваша участь: {status}.',
      waiting_payment: 'Чекаємо на вашу оплату…',
      waiting_card: 'Завершіть оплату на сторінці картки. Цей екран оновиться сам, щойно оплата надійде.',
      payment_slow: 'Оплата ще не надійшла. Це може тривати кілька хвилин; бот напише вам, щойно вона надійде.',
      check_again: 'Перевірити ще раз',
      payment_cancelled: 'Оплату скасовано. Можете обрати знову.',
      payment_failed: 'Оплата не пройшла. Спробуйте ще раз.',
      done: 'Ви з нами!',
      done_body: 'Доступ до «{channel}» готовий. Бот надіслав вам посилання в чаті.',
      done_body_door: 'Доступ до «{channel}» готовий.',
      join_waiting: 'Ваш запит на вступ буде схвалено за мить.',
      join_approved: 'Ваш запит на вступ схвалено: відкрийте канал у Telegram.',
      join_declined: 'Ваш запит на вступ відхилено. Бот надіслав вам посилання натомість.',
      close: 'Закрити',
      back_to_plans: 'Назад до тарифів',
      my_subscriptions: 'Мої підписки',
      hello: 'Вітаємо, {name}',
      memberships: 'Участь у каналах',
      no_memberships: 'Ви ще ніде не берете участі.',
      until: 'до {date}',
      lifetime: 'назавжди',
      status_active: 'активна',
      status_grace: 'пільговий період',
      status_expired: 'завершена',
      status_paused: 'призупинена',
      renew: 'Подовжити',
      subscriptions: 'Підписки за зірки',
      renews_on: 'Подовжиться {date}',
      ends_on: 'Завершиться {date}, без подовження',
      cancel: 'Скасувати підписку',
      resume: 'Відновити підписку',
      cancel_confirm: 'Скасувати цю підписку? Доступ залишиться до кінця оплаченого періоду.',
      payments: 'Платежі',
      no_payments: 'Платежів ще немає.',
      refunded: 'Повернено',
      language: 'Мова',
      referral: 'Запросіть друзів',
      referral_body: 'Поділіться своїм посиланням; ваш код {code}.',
      referral_link: 'Ваше посилання',
      share: 'Поділитися',
    },
    ru: {
      loading: 'Загрузка…',
      open_in_telegram: 'Откройте это из Telegram',
      open_in_telegram_body: 'Эта страница работает внутри Telegram. Откройте её кнопкой в боте или в канале.',
      too_many: 'Слишком много запросов. Подождите немного и попробуйте снова.',
      offline: 'Нет соединения. Проверьте интернет и попробуйте снова.',
      failed: 'Что-то пошло не так. Попробуйте снова.',
      retry: 'Попробовать снова',
      choose_plan: 'Выберите тариф',
      no_plans: 'Сейчас здесь ничего не продаётся.',
      try_free: 'Попробовать бесплатно',
      buy: 'Купить',
      pay_card: 'Оплатить картой',
      pay_wayforpay: 'Оплатить картой (WayForPay)',
      pay_stripe: 'Оплатить картой (Stripe)',
      pay_monobank: 'Оплатить картой (Monobank)',
      days: { one: '{n} день', few: '{n} дня', many: '{n} дней', other: '{n} дня' },
      for_period: 'на {period}',
      every_period: 'каждые {period}, продлевается сама',
      lifetime_access: 'доступ навсегда',
      trial: 'Бесплатный пробный период',
      bundle: 'Также входит: {list}',
      full: 'Мест нет',
      lifetime_held: 'У вас уже есть доступ навсегда',
      not_on_sale: 'Не продаётся',
      promo_label: 'Промокод',
      promo_apply: 'Применить',
      promo_applied: 'Код {code} применён',
      promo_refused: 'Код {code} нельзя использовать',
      member_until: 'Вы участник до {date}.',
      member_lifetime: 'У вас доступ навсегда.',
      member_status: 'Ваше участие: {status}.',
      waiting_payment: 'Ждём вашу оплату…',
      waiting_card: 'Завершите оплату на странице карты. Этот экран обновится сам, как только оплата поступит.',
      payment_slow: 'Оплата ещё не поступила. Это может занять несколько минут; бот напишет вам, как только она поступит.',
      check_again: 'Проверить снова',
      payment_cancelled: 'Оплата отменена. Можете выбрать снова.',
      payment_failed: 'Оплата не прошла. Попробуйте снова.',
      done: 'Вы с нами!',
      done_body: 'Доступ к «{channel}» готов. Бот отправил вам ссылку в чате.',
      done_body_door: 'Доступ к «{channel}» готов.',
      join_waiting: 'Ваша заявка на вступление будет одобрена через мгновение.',
      join_approved: 'Ваша заявка на вступление одобрена: откройте канал в Telegram.',
      join_declined: 'Ваша заявка на вступление отклонена. Бот отправил вам ссылку взамен.',
      close: 'Закрыть',
      back_to_plans: 'Назад к тарифам',
      my_subscriptions: 'Мои подписки',
      hello: 'Здравствуйте, {name}',
      memberships: 'Участие в каналах',
      no_memberships: 'Вы пока нигде не участвуете.',
      until: 'до {date}',
      lifetime: 'навсегда',
      status_active: 'активно',
      status_grace: 'льготный период',
      status_expired: 'завершено',
      status_paused: 'приостановлено',
      renew: 'Продлить',
      subscriptions: 'Подписки за звёзды',
      renews_on: 'Продлится {date}',
      ends_on: 'Закончится {date}, без продления',
      cancel: 'Отменить подписку',
      resume: 'Возобновить подписку',
      cancel_confirm: 'Отменить эту подписку? Доступ сохранится до конца оплаченного периода.',
      payments: 'Платежи',
      no_payments: 'Платежей пока нет.',
      refunded: 'Возвращено',
      language: 'Язык',
      referral: 'Пригласите друзей',
      referral_body: 'Поделитесь своей ссылкой; ваш код {code}.',
      referral_link: 'Ваша ссылка',
      share: 'Поделиться',
    },
  };

  /** The languages' own names, for the switcher. */
  const LANGUAGE_NAMES = { en: 'English', uk: 'Українська', ru: 'Русский' };

  const GATEWAYS = { telegram_stars: 'Telegram Stars', wayforpay: 'WayForPay', stripe: 'Stripe' };

  /** A language this page speaks, from any tag (`uk`, `ru-RU`, `pt-br`…); else English. */
  function pick(tag) {
    const base = String(tag || '').toLowerCase().split('-')[0];
    return LANGUAGES.includes(base) ? base : 'en';
  }

  let lang = pick(tg && tg.initDataUnsafe && tg.initDataUnsafe.user && tg.initDataUnsafe.user.language_code);

  function setLanguage(tag) {
    lang = pick(tag);
    document.documentElement.lang = lang;
  }

  /** The page's word `key` in the current language, `{name}`s replaced from `vars`. */
  function t(key, vars) {
    const text = WORDS[lang][key] !== undefined ? WORDS[lang][key] : WORDS.en[key];
    return String(text).replace(/\{(\w+)\}/g, (all, name) =>
      vars && vars[name] !== undefined && vars[name] !== null ? String(vars[name]) : '');
  }

  /** "30 days" in the current language's plural form. */
  function days(n) {
    const forms = WORDS[lang].days;
    const form = new Intl.PluralRules(lang).select(n);
    return (forms[form] || forms.other).replace('{n}', new Intl.NumberFormat(lang).format(n));
  }

  /** A date (RFC 3339) as the buyer reads dates; '' when absent or unreadable. */
  function date(value, withTime) {
    if (!value) return '';
    const d = new Date(value);
    if (!Number.isFinite(d.getTime())) return '';
    const options = withTime ? { dateStyle: 'medium', timeStyle: 'short' } : { dateStyle: 'long' };
    return new Intl.DateTimeFormat(lang, options).format(d);
  }

  // ------------------------------------------------------------------ DOM

  /**
   * Builds an element. `attrs`: `class`, `text`, `on<event>` handlers, booleans (set when
   * true), anything else as an attribute; null/undefined/false skipped. Children: nodes,
   * strings, arrays, or null/false (skipped).
   */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') el.textContent = String(v);
      else if (k === 'class') el.className = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false || c === '') continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const main = document.getElementById('main');

  function show(...nodes) {
    main.replaceChildren(...nodes.flat().filter(Boolean));
    window.scrollTo(0, 0);
  }

  // ------------------------------------------------------------------ Telegram

  /** Telegram's theme parameters as the page's CSS variables (`bg_color` → `--tg-theme-bg-color`). */
  function applyTheme() {
    const root = document.documentElement;
    const params = (tg && tg.themeParams) || {};
    for (const [key, value] of Object.entries(params)) {
      if (typeof value === 'string' && value) {
        root.style.setProperty('--tg-theme-' + key.replace(/_/g, '-'), value);
      }
    }
    root.dataset.scheme = tg && tg.colorScheme === 'dark' ? 'dark' : 'light';
  }

  function call(name, ...args) {
    if (tg && typeof tg[name] === 'function') return tg[name](...args);
    return undefined;
  }

  /** Asks the buyer to confirm, in Telegram's own dialog where there is one. */
  function confirmed(message) {
    return new Promise((resolve) => {
      if (tg && typeof tg.showConfirm === 'function'
          && (typeof tg.isVersionAtLeast !== 'function' || tg.isVersionAtLeast('6.2'))) {
        tg.showConfirm(message, (ok) => resolve(Boolean(ok)));
      } else {
        resolve(true);
      }
    });
  }

  // ------------------------------------------------------------------ the API

  /** A refused or failed call: `status` (0 when the network failed) and the API's words. */
  class Failure extends Error {
    constructor(status, detail) {
      super(detail || 'HTTP ' + status);
      this.status = status;
      this.detail = detail;
    }
  }

  async function api(method, path, body) {
    let response;
    try {
      response = await fetch('/app/api/' + path, {
        method,
        headers: { Authorization: 'tma ' + tg.initData, 'Content-Type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch {
      throw new Failure(0, '');
    }
    if (response.ok) return response.json();
    let detail = '';
    try {
      const problem = await response.json();
      if (problem && typeof problem.detail === 'string') detail = problem.detail;
    } catch {
      // Not a problem document: the status alone decides the words.
    }
    throw new Failure(response.status, detail);
  }

  /** What to tell the buyer about a failure, for a line of a screen that stays. */
  function failureText(e) {
    if (!(e instanceof Failure)) return t('failed');
    if (e.status === 0) return t('offline');
    if (e.status === 429) return t('too_many');
    return e.detail || t('failed');
  }

  /** The screen for the buyer who is not (or no longer) known: open the page from Telegram. */
  function openFromTelegram() {
    show(h('section', { class: 'screen', id: 'open-in-telegram' },
      h('div', { class: 'big', 'aria-hidden': 'true', text: '✈️' }),
      h('h1', { text: t('open_in_telegram') }),
      h('p', { class: 'note', text: t('open_in_telegram_body') })));
  }

  /** A failure that stops the screen: its words and a button that tries again. */
  function failed(e, again) {
    if (e instanceof Failure && e.status === 401) {
      openFromTelegram();
      return;
    }
    if (!(e instanceof Failure)) console.error(e);
    show(h('section', { class: 'screen', id: 'failure' },
      h('p', { class: 'message error', role: 'alert', text: failureText(e) }),
      h('button', { type: 'button', onclick: again, text: t('retry') })));
  }

  function loading() {
    show(h('p', { class: 'note', id: 'loading', text: t('loading') }));
  }

  // ------------------------------------------------------------------ navigation

  /** Goes to `search` (`?c=…` or ''), keeping the fragment Telegram put the launch data in. */
  function go(search) {
    history.pushState({ within: true }, '', location.pathname + search + location.hash);
    route();
  }

  function route() {
    const query = new URLSearchParams(location.search);
    const channel = query.get('c');
    if (channel) {
      paywall(channel, query.get('r'), null);
      // Telegram's back button returns to the portal when the page itself came from there.
      if (tg && tg.BackButton && history.state && history.state.within) tg.BackButton.show();
    } else {
      if (tg && tg.BackButton) tg.BackButton.hide();
      portal();
    }
  }

  // ------------------------------------------------------------------ the paywall

  /** The words under a plan's price: its period, or that it is for life. */
  function periodText(plan) {
    if (plan.period_days === null || plan.period_days === undefined) return t('lifetime_access');
    return t(plan.recurring ? 'every_period' : 'for_period', { period: days(plan.period_days) });
  }

  function priceNode(plan) {
    if (plan.trial) return h('span', { class: 'price' }, t('trial'));
    if (plan.discounted) {
      return h('span', { class: 'price' }, h('s', { text: plan.price.text }), plan.discounted.text);
    }
    return h('span', { class: 'price', text: plan.price.text });
  }

  const UNAVAILABLE = { full: 'full', lifetime: 'lifetime_held', not_on_sale: 'not_on_sale' };

  function memberNote(member) {
    if (!member) return null;
    let text;
    if (member.status === 'active' || member.status === 'grace') {
      text = member.expires_at ? t('member_until', { date: date(member.expires_at) }) : t('member_lifetime');
    } else {
      const status = WORDS[lang]['status_' + member.status];
      if (!status) return null;
      text = t('member_status', { status });
    }
    return h('p', { class: 'message', id: 'member', text });
  }

  async function paywall(channelId, joinRequest, promoCode) {
    loading();
    let offer;
    try {
      const query = new URLSearchParams({ channel_id: channelId });
      if (promoCode) query.set('promo_code', promoCode);
      offer = await api('GET', 'offer?' + query);
    } catch (e) {
      failed(e, () => paywall(channelId, joinRequest, promoCode));
      return;
    }
    setLanguage(offer.language);
    document.title = offer.channel.title;
    drawOffer(offer, channelId, joinRequest, null);
  }

  function drawOffer(offer, channelId, joinRequest, note) {
    const accepted = offer.promo_code && offer.promo_code.accepted ? offer.promo_code.code : null;
    const plans = offer.plans || [];
    const input = h('input', {
      id: 'promo-code', name: 'promo_code', autocomplete: 'off', autocapitalize: 'characters',
      spellcheck: 'false', maxlength: '64',
    });
    if (offer.promo_code) input.value = offer.promo_code.code;
    let promoResult = null;
    if (offer.promo_code) {
      promoResult = offer.promo_code.accepted
        ? h('p', { class: 'promo-result ok', id: 'promo-result', text: t('promo_applied', { code: offer.promo_code.code }) })
        : h('p', { class: 'promo-result refused', id: 'promo-result', role: 'alert',
          text: offer.promo_code.reason || t('promo_refused', { code: offer.promo_code.code }) });
    }
    const promo = h('form', {
      class: 'promo', id: 'promo', novalidate: true,
      onsubmit: (event) => {
        event.preventDefault();
        paywall(channelId, joinRequest, input.value.trim() || null);
      },
    }, input, h('button', { type: 'submit', id: 'promo-apply', text: t('promo_apply') }));

    const cards = plans.map((plan) => {
      const why = UNAVAILABLE[plan.availability];
      const bundle = (plan.bundle_with || []).filter(Boolean);
      return h('li', { class: 'card plan', 'data-plan': plan.id },
        h('h3', { text: plan.name }),
        h('div', { class: 'row' }, priceNode(plan), h('span', { class: 'period', text: periodText(plan) })),
        bundle.length ? h('p', { class: 'hint', text: t('bundle', { list: bundle.join(', ') }) }) : null,
        h('div', { class: 'actions' }, why
          ? h('span', { class: 'tag off', text: t(why) })
          : h('button', {
            type: 'button', class: 'wide buy', 'data-plan': plan.id,
            text: plan.trial ? t('try_free') : t('buy'),
            onclick: (event) => buy(event.currentTarget, offer, plan, accepted, channelId, joinRequest),
          })));
    });

    show(
      h('h1', { id: 'channel-title', text: offer.channel.title }),
      offer.channel.description ? h('p', { class: 'description', text: offer.channel.description }) : null,
      memberNote(offer.member),
      note ? h('p', { class: 'message error', role: 'alert', id: 'note', text: note }) : null,
      h('h2', { text: t('choose_plan') }),
      plans.length ? h('ul', { class: 'list', id: 'plans' }, cards) : h('p', { class: 'note', text: t('no_plans') }),
      h('label', { for: 'promo-code', text: t('promo_label') }),
      promo,
      promoResult,
      h('nav', { class: 'bottom' },
        h('button', { type: 'button', class: 'plain', id: 'to-portal', text: t('my_subscriptions'), onclick: () => go('') })),
    );
  }

  async function buy(button, offer, plan, promoCode, channelId, joinRequest) {
    button.disabled = true;
    const body = { plan_id: plan.id };
    if (promoCode) body.promo_code = promoCode;
    if (joinRequest) body.join_request = joinRequest;
    let answer;
    try {
      answer = await api('POST', 'orders', body);
    } catch (e) {
      button.disabled = false;
      if (e instanceof Failure && e.status === 401) {
        openFromTelegram();
        return;
      }
      drawOffer(offer, channelId, joinRequest, failureText(e));
      return;
    }
    const order = answer.order;
    const pay = answer.pay || {};
    const back = () => drawOffer(offer, channelId, joinRequest, null);
    if (pay.granted) {
      waitForAccess(order, offer, back, 'stars');
    } else if (pay.stars_invoice_url) {
      if (typeof tg.openInvoice !== 'function') {
        // A Telegram client older than invoices in Mini Apps (6.1) opens the link as a chat.
        call('openTelegramLink', pay.stars_invoice_url);
        waitForAccess(order, offer, back, 'stars');
        return;
      }
      waiting(t('waiting_payment'), back);
      tg.openInvoice(pay.stars_invoice_url, (status) => {
        if (status === 'paid' || status === 'pending') waitForAccess(order, offer, back, 'stars');
        else if (status === 'cancelled') drawOffer(offer, channelId, joinRequest, t('payment_cancelled'));
        else drawOffer(offer, channelId, joinRequest, t('payment_failed'));
      });
    } else if (pay.card_urls) {
      const links = Object.entries(pay.card_urls).filter(([, url]) => typeof url === 'string' && url);
      if (!links.length) {
        drawOffer(offer, channelId, joinRequest, t('failed'));
        return;
      }
      if (links.length === 1) call('openLink', links[0][1]);
      waitForAccess(order, offer, back, 'card', links);
    } else {
      drawOffer(offer, channelId, joinRequest, t('failed'));
    }
  }

  /** The screen while a payment is under way; `links`: card pages the buyer may (re)open. */
  function waiting(text, back, links, extra) {
    const gatewayWords = { wayforpay: 'pay_wayforpay', stripe: 'pay_stripe', monobank: 'pay_monobank' };
    show(h('section', { class: 'screen', id: 'waiting' },
      h('div', { class: 'big', 'aria-hidden': 'true', text: '⏳' }),
      h('p', { text }),
      (links || []).map(([gateway, url]) => h('button', {
        type: 'button', class: 'wide card-link', 'data-gateway': gateway,
        text: links.length > 1 ? t(gatewayWords[gateway] || 'pay_card') : t('pay_card'),
        onclick: () => call('openLink', url),
      })),
      extra || null,
      h('div', null, h('button', { type: 'button', class: 'plain', text: t('back_to_plans'), onclick: back }))));
  }

  /** The poll under way: a newer one (or another screen) ends the older. */
  let polling = null;

  /**
   * Polls the order until it gives access, then says so. Stars and free orders arrive within
   * seconds; a card payment may take the buyer minutes on the gateway's page.
   */
  async function waitForAccess(order, offer, back, how, links) {
    const started = Date.now();
    const patience = how === 'card' ? 15 * 60 * 1000 : 2 * 60 * 1000;
    const text = how === 'card' ? t('waiting_card') : t('waiting_payment');
    waiting(text, back, links);
    const token = {};
    polling = token;
    for (;;) {
      if (polling !== token || !document.getElementById('waiting')) return;
      let state = null;
      try {
        state = await api('GET', 'orders/' + encodeURIComponent(order.id));
      } catch (e) {
        if (e instanceof Failure && e.status === 401) {
          openFromTelegram();
          return;
        }
        if (e instanceof Failure && e.status !== 0 && e.status !== 429 && e.status < 500) {
          failed(e, () => waitForAccess(order, offer, back, how, links));
          return;
        }
      }
      if (polling !== token || !document.getElementById('waiting')) return;
      if (state && state.access) {
        youreIn(order, offer, state.join_request);
        return;
      }
      if (Date.now() - started > patience) {
        waiting(t('payment_slow'), back, links, h('button', {
          type: 'button', id: 'check-again', text: t('check_again'),
          onclick: () => waitForAccess(order, offer, back, how, links),
        }));
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, how === 'card' ? 3000 : 1000));
    }
  }

  /** The words for a join request's state at the door. */
  const JOIN_WORDS = { waiting: 'join_waiting', approved: 'join_approved', declined: 'join_declined' };

  function youreIn(order, offer, joinRequest) {
    const join = JOIN_WORDS[joinRequest];
    show(h('section', { class: 'screen', id: 'done' },
      h('div', { class: 'big', 'aria-hidden': 'true', text: '🎉' }),
      h('h1', { text: t('done') }),
      // At the door the request itself is let in (no link is sent), unless it was declined.
      h('p', { text: t(join && joinRequest !== 'declined' ? 'done_body_door' : 'done_body', { channel: offer.channel.title }) }),
      join ? h('p', { class: 'note', id: 'join-request', text: t(join) }) : null,
      h('button', { type: 'button', id: 'close', text: t('close'), onclick: () => call('close') }),
      h('div', null, h('button', { type: 'button', class: 'plain', text: t('my_subscriptions'), onclick: () => go('') }))));
    if (tg && tg.HapticFeedback && typeof tg.HapticFeedback.notificationOccurred === 'function') {
      tg.HapticFeedback.notificationOccurred('success');
    }
    if (joinRequest === 'waiting') followJoinRequest(order);
  }

  /**
   * Access is granted; the join request waiting at the door is let in a moment later. Asks
   * about the order every 2 s for up to 2 minutes and says what became of the request, while
   * the "you're in" screen is shown.
   */
  async function followJoinRequest(order) {
    const started = Date.now();
    const token = {};
    polling = token;
    while (Date.now() - started < 2 * 60 * 1000) {
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const note = document.getElementById('join-request');
      if (polling !== token || !note) return;
      let state = null;
      try {
        state = await api('GET', 'orders/' + encodeURIComponent(order.id));
      } catch (e) {
        if (e instanceof Failure && e.status !== 0 && e.status !== 429 && e.status < 500) return;
      }
      const words = state && state.join_request !== 'waiting' && JOIN_WORDS[state.join_request];
      if (words) {
        note.textContent = t(words);
        return;
      }
    }
  }

  // ------------------------------------------------------------------ the portal

  async function portal() {
    loading();
    let me;
    try {
      me = await api('GET', 'me');
    } catch (e) {
      failed(e, portal);
      return;
    }
    drawPortal(me, null);
  }

  function statusWord(status) {
    return WORDS[lang]['status_' + status] || WORDS.en['status_' + status] || '';
  }

  function drawPortal(me, note) {
    setLanguage(me.subscriber && me.subscriber.language);
    document.title = t('my_subscriptions');
    const memberships = me.memberships || [];
    const subscriptions = me.subscriptions || [];
    const payments = me.payments || [];
    const name = me.subscriber && me.subscriber.name;

    const membershipItems = memberships.map((m) => {
      const when = m.lifetime ? t('lifetime') : (m.expires_at ? t('until', { date: date(m.expires_at) }) : '');
      return h('li', { class: 'card membership', 'data-channel': m.channel_id },
        h('h3', { text: m.channel_title }),
        h('div', { class: 'row' },
          statusWord(m.status) ? h('span', { class: m.status === 'expired' ? 'tag off' : 'tag', text: statusWord(m.status) }) : null,
          when ? h('span', { class: 'period expiry', text: when }) : null),
        m.renew_plan_id !== null && m.renew_plan_id !== undefined && !m.lifetime
          ? h('div', { class: 'actions' }, h('button', {
            type: 'button', class: 'renew', 'data-channel': m.channel_id, text: t('renew'),
            onclick: () => go('?c=' + encodeURIComponent(m.channel_id)),
          }))
          : null);
    });

    const subscriptionItems = subscriptions.map((s) => h('li', { class: 'card subscription', 'data-subscription': s.id },
      h('h3', { text: s.channel_title }),
      h('div', { class: 'row' },
        s.price_text ? h('span', { class: 'price', text: s.price_text }) : null,
        s.expires_at ? h('span', { class: 'period', text: t(s.cancelled ? 'ends_on' : 'renews_on', { date: date(s.expires_at) }) }) : null),
      h('div', { class: 'actions' }, h('button', {
        type: 'button', class: s.cancelled ? 'resume' : 'danger cancel', 'data-subscription': s.id,
        text: s.cancelled ? t('resume') : t('cancel'),
        onclick: (event) => changeSubscription(event.currentTarget, me, s),
      }))));

    const paymentItems = payments.map((p) => h('li', { class: 'card receipt', 'data-payment': p.id },
      h('div', { class: 'row' },
        h('span', { class: 'amount', text: p.amount_text }),
        h('span', { class: 'period', text: date(p.paid_at, true) })),
      h('p', { class: 'hint' }, [p.channel_title, GATEWAYS[p.gateway] || p.gateway].filter(Boolean).join(' · ')),
      p.refunded ? h('span', { class: 'refunded', text: t('refunded') }) : null));

    const select = h('select', { id: 'language', name: 'language' },
      LANGUAGES.map((code) => h('option', { value: code, text: LANGUAGE_NAMES[code] })));
    select.value = lang;
    select.addEventListener('change', () => changeLanguage(select, me));

    let referral = null;
    if (me.referral && me.referral.link) {
      const link = h('input', { id: 'referral-link', readonly: true });
      link.value = me.referral.link;
      referral = [
        h('h2', { text: t('referral') }),
        h('div', { class: 'card', id: 'referral' },
          h('p', { text: t('referral_body', { code: me.referral.code }) }),
          h('label', { for: 'referral-link', text: t('referral_link') }),
          link,
          h('div', { class: 'actions' }, h('button', {
            type: 'button', id: 'share', text: t('share'),
            onclick: () => call('openTelegramLink', 'https://t.me/share/url?url=' + encodeURIComponent(me.referral.link)),
          }))),
      ];
    }

    show(
      h('h1', { text: t('my_subscriptions') }),
      name ? h('p', { class: 'note', id: 'hello', text: t('hello', { name }) }) : null,
      note ? h('p', { class: 'message error', role: 'alert', id: 'note', text: note }) : null,
      h('h2', { text: t('memberships') }),
      membershipItems.length
        ? h('ul', { class: 'list', id: 'memberships' }, membershipItems)
        : h('p', { class: 'note', id: 'memberships', text: t('no_memberships') }),
      subscriptionItems.length ? [h('h2', { text: t('subscriptions') }), h('ul', { class: 'list', id: 'subscriptions' }, subscriptionItems)] : null,
      h('h2', { text: t('payments') }),
      paymentItems.length
        ? h('ul', { class: 'list', id: 'payments' }, paymentItems)
        : h('p', { class: 'note', id: 'payments', text: t('no_payments') }),
      referral,
      h('label', { for: 'language', text: t('language') }),
      select,
    );
  }

  async function changeSubscription(button, me, subscription) {
    const cancel = !subscription.cancelled;
    if (cancel && !(await confirmed(t('cancel_confirm')))) return;
    button.disabled = true;
    try {
      const answer = await api('POST', 'subscriptions/' + encodeURIComponent(subscription.id) + (cancel ? '/cancel' : '/resume'));
      const changed = answer.subscription;
      const subscriptions = (me.subscriptions || []).map((s) => (s.id === changed.id ? changed : s));
      drawPortal({ ...me, subscriptions }, null);
    } catch (e) {
      if (e instanceof Failure && e.status === 401) {
        openFromTelegram();
        return;
      }
      drawPortal(me, failureText(e));
    }
  }

  async function changeLanguage(select, me) {
    select.disabled = true;
    try {
      drawPortal(await api('PUT', 'me/language', { language: select.value }), null);
    } catch (e) {
      if (e instanceof Failure && e.status === 401) {
        openFromTelegram();
        return;
      }
      drawPortal(me, failureText(e));
    }
  }

  // ------------------------------------------------------------------ start

  setLanguage(lang);
  applyTheme();
  if (tg) {
    call('ready');
    call('expand');
    if (typeof tg.onEvent === 'function') {
      tg.onEvent('themeChanged', applyTheme);
      tg.onEvent('backButtonClicked', () => history.back());
    }
  }
  window.addEventListener('popstate', route);
  if (!tg || !tg.initData) {
    openFromTelegram();
  } else {
    route();
  }
})();
