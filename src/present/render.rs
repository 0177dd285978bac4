//! Pure rendering of the bot's messages, keyboards and button data, and Telegram's limits.
//!
//! Telegram refuses a message over 4096 characters, callback data over 64 bytes, an invoice
//! title over 32 or description over 255 characters, a callback answer over 200 characters.
//! Any of those refusals would turn a buyer's button press into silence, so every text that
//! carries something staff typed (a channel title or description, up to 255 and 1000
//! characters) goes through [`clip`], and lists take only as many entries as fit. Telegram
//! counts characters in UTF-16 code units, so that is what [`units`] counts (an emoji is two);
//! clipping never splits a character, never leaves a dangling joiner or modifier of an emoji
//! sequence, and marks the cut with `…`. Text is sent without a parse mode, so a title
//! containing `<`, `*` or `_` is shown as typed and cannot break a message.
//!
//! Button data is `<letter>:<id>` ([`Callback`]), at most 22 bytes; anything else a button
//! press carries is refused by [`Callback::parse`].

use serde_json::{Value, json};

use super::texts::{self, Language};
use crate::common::{
    currency::{self, Money},
    expiry::Expiry,
};

/// Longest message text.
pub const MESSAGE_MAX: usize = 4096;
/// Longest callback data, in bytes.
pub const CALLBACK_DATA_MAX: usize = 64;
/// Longest invoice title.
pub const INVOICE_TITLE_MAX: usize = 32;
/// Longest invoice description.
pub const INVOICE_DESCRIPTION_MAX: usize = 255;
/// Longest callback answer (the notification or alert text).
pub const CALLBACK_ANSWER_MAX: usize = 200;
/// Longest button text we make (Telegram cuts longer ones on screen anyway).
pub const BUTTON_MAX: usize = 60;
/// A channel title in a list or a button.
const TITLE_IN_LIST_MAX: usize = 80;
/// A channel description in the list (the deep-link offer shows it whole).
const DESCRIPTION_IN_LIST_MAX: usize = 200;
/// A description in a single offer, leaving room for the rest of the message.
const DESCRIPTION_IN_OFFER_MAX: usize = 3000;

/// Length as Telegram counts it: UTF-16 code units.
pub fn units(s: &str) -> usize {
    s.encode_utf16().count()
}

/// True for characters that only modify the one before them: a cut must not leave one
/// dangling at the end, nor end right after a zero-width joiner.
fn is_modifier(c: char) -> bool {
    matches!(c,
        '\u{200D}'                 // zero-width joiner (emoji sequences)
        | '\u{FE00}'..='\u{FE0F}'  // variation selectors
        | '\u{1F3FB}'..='\u{1F3FF}' // skin tones
        | '\u{0300}'..='\u{036F}'  // combining diacritics
        | '\u{20D0}'..='\u{20FF}'  // combining marks for symbols (keycaps)
        | '\u{E0020}'..='\u{E007F}' // tag characters (flag sequences)
    )
}

/// `s` cut to at most `max` UTF-16 units, with `…` at the cut. Never splits a character; drops
/// a trailing joiner or modifier together with the emoji sequence it would have continued.
pub fn clip(s: &str, max: usize) -> String {
    if units(s) <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        if used + c.len_utf16() > max - 1 {
            break;
        }
        used += c.len_utf16();
        out.push(c);
    }
    // The cut may fall inside an emoji sequence (base, modifiers, joiner, next base, …):
    // when the next character still belongs to it, or what is kept ends in a joiner, drop the
    // whole cut sequence rather than show half of it.
    let next_is_modifier = s[out.len()..].chars().next().is_some_and(is_modifier);
    if next_is_modifier || out.ends_with('\u{200D}') {
        loop {
            while out.ends_with(is_modifier) {
                out.pop();
            }
            out.pop();
            if !out.ends_with('\u{200D}') {
                break;
            }
        }
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('…');
    out
}

/// Text on one line: line breaks, tabs and other control characters become spaces, runs of
/// spaces one space, no space at either end.
pub fn one_line(s: &str) -> String {
    s.split(|c: char| c.is_control() || c.is_whitespace())
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A channel's title for buyers: on one line, or `Channel <id>` when nothing printable is left
/// (a title of only spaces or control characters).
pub fn title(l: Language, title: &str, channel_id: i32) -> String {
    let line = one_line(title);
    if line.is_empty() {
        texts::channel_fallback(l, channel_id)
    } else {
        line
    }
}

/// A price as buyers of `l` read it: `250 ⭐` for Stars, `99.00 UAH` (English), `99,00 ₴`
/// (Ukrainian) otherwise. The number is formatted with ICU4X's locale data for the language
/// (decimal separator, grouping from five digits on, so `2000 ⭐` stays one word); the
/// currency's sign or code is the language's message (`price-money`).
pub fn price(l: Language, money: &Money) -> String {
    let Money {
        amount_minor,
        currency: code,
    } = money;
    if code == "XTR" {
        return texts::price_stars(l, &number(l, *amount_minor, 0));
    }
    let exponent = currency::minor_unit_exponent(code).unwrap_or(2);
    texts::price_money(l, &number(l, *amount_minor, exponent), code)
}

/// `minor` units as a number with `exponent` decimals, formatted for `l`.
fn number(l: Language, minor: i64, exponent: u32) -> String {
    use icu_decimal::{
        DecimalFormatter,
        input::Decimal,
        options::{DecimalFormatterOptions, GroupingStrategy},
    };
    thread_local! {
        // Built once per thread (ICU4X's formatters are not `Sync`); the data is compiled in.
        static FORMATTERS: Vec<(Language, DecimalFormatter)> = {
            let mut options = DecimalFormatterOptions::default();
            options.grouping_strategy = Some(GroupingStrategy::Min2);
            Language::ALL
                .into_iter()
                .map(|l| {
                    let f = DecimalFormatter::try_new(l.icu_locale().into(), options)
                        .expect("ICU4X's compiled data has every language the bot speaks");
                    (l, f)
                })
                .collect()
        };
    }
    let exponent = i16::try_from(exponent).unwrap_or(0);
    let mut d = Decimal::from(minor);
    d.multiply_pow10(-exponent);
    d.pad_end(-exponent);
    FORMATTERS.with(|all| {
        all.iter()
            .find(|(lang, _)| *lang == l)
            .map(|(_, f)| f.format(&d).to_string())
            .unwrap_or_else(|| d.to_string())
    })
}

/// A billing period as buyers read it, with the language's plural form.
pub fn period(l: Language, days: i32) -> String {
    texts::period(l, days)
}

/// What one purchase of a plan lasts: [`period`], or `None` for lifetime access (the texts say
/// "lifetime" in their own words).
pub fn term(l: Language, period_days: Option<i32>) -> Option<String> {
    period_days.map(|d| period(l, d))
}

/// What a button press asks for. The data is `<letter>:<positive id>` in ASCII.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callback {
    /// Buy (or renew) channel `id`'s default plan.
    Buy(i32),
    /// Buy plan `id` (a trial plan: start the trial).
    Plan(i64),
    /// The next page of the catalogue, after channel `id`.
    More(i32),
    /// Cancel the renewal of Stars subscription `id`.
    CancelRenewal(i64),
    /// Speak language `n` (1-based, in the order of [`Language::ALL`]) from now on.
    Language(u8),
}

impl Callback {
    /// The button's `callback_data`.
    pub fn data(self) -> String {
        match self {
            Callback::Buy(id) => format!("b:{id}"),
            Callback::Plan(id) => format!("p:{id}"),
            Callback::More(id) => format!("l:{id}"),
            Callback::CancelRenewal(id) => format!("x:{id}"),
            Callback::Language(n) => format!("g:{n}"),
        }
    }

    /// Parses data made by [`Callback::data`]; anything else (forged, from an older version,
    /// not ours) is `None`.
    pub fn parse(data: &str) -> Option<Callback> {
        let (kind, id) = data.split_once(':')?;
        if id.is_empty() || id.len() > 19 || !id.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let id: i64 = id.parse().ok()?;
        if id <= 0 {
            return None;
        }
        match kind {
            "b" => i32::try_from(id).ok().map(Callback::Buy),
            "l" => i32::try_from(id).ok().map(Callback::More),
            "p" => Some(Callback::Plan(id)),
            "x" => Some(Callback::CancelRenewal(id)),
            "g" => u8::try_from(id)
                .ok()
                .filter(|n| usize::from(*n) <= Language::ALL.len())
                .map(Callback::Language),
            _ => None,
        }
    }
}

/// A command in a message to the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/start`, with the deep link's payload if any.
    Start(Option<String>),
    /// `/help`.
    Help,
    /// `/subscriptions`.
    Subscriptions,
    /// `/code`, with the code if one was given.
    Code(Option<String>),
    /// `/language`, with a language code if one was given.
    Language(Option<String>),
    /// Any other text.
    Other,
}

/// Reads a command: `/start`, `/start <payload>`, `/start@<bot> <payload>`, `/help`,
/// `/subscriptions`, `/code <CODE>`, `/language [<code>]`.
pub fn parse_command(text: &str) -> Command {
    let text = text.trim();
    let (head, rest) = match text.split_once(char::is_whitespace) {
        Some((head, rest)) => (head, rest.trim()),
        None => (text, ""),
    };
    let name = head.split('@').next().unwrap_or(head);
    match name {
        "/start" => Command::Start((!rest.is_empty()).then(|| rest.to_string())),
        "/help" => Command::Help,
        "/subscriptions" => Command::Subscriptions,
        "/code" => Command::Code((!rest.is_empty()).then(|| rest.to_string())),
        "/language" => Command::Language((!rest.is_empty()).then(|| rest.to_string())),
        _ => Command::Other,
    }
}

/// The channel a deep-link payload names: `c<id>`.
pub fn deep_link_channel(payload: &str) -> Option<i32> {
    let id = payload.strip_prefix('c')?;
    if id.is_empty() || id.len() > 10 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok().filter(|id: &i32| *id > 0)
}

/// What a deep link's payload opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeepLink {
    /// `c<id>`: a channel's plans.
    Channel(i32),
    /// `p<id>`, or `p<id>-<CODE>`: one plan, with a promo code to apply first.
    Plan { id: i64, code: Option<String> },
}

/// Reads a deep-link payload: `c<id>`, `p<id>` or `p<id>-<CODE>` (Telegram allows `A-Z a-z 0-9
/// _ -` in a start parameter; the code is checked against the promo codes, not here, beyond
/// its length of 1..32).
pub fn deep_link(payload: &str) -> Option<DeepLink> {
    if let Some(id) = deep_link_channel(payload) {
        return Some(DeepLink::Channel(id));
    }
    let rest = payload.strip_prefix('p')?;
    let (id, code) = match rest.split_once('-') {
        Some((id, code)) => (id, Some(code)),
        None => (rest, None),
    };
    if id.is_empty() || id.len() > 18 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: i64 = id.parse().ok().filter(|id: &i64| *id > 0)?;
    let code = match code {
        Some(c) if c.is_empty() || c.chars().count() > 32 => return None,
        Some(c) => Some(c.to_string()),
        None => None,
    };
    Some(DeepLink::Plan { id, code })
}

/// Whether a plan can be bought now, by this buyer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Buyable,
    /// A channel of the plan is seat-limited with no seat free (and the buyer is not a member).
    Full,
    /// No configured gateway takes its currency.
    NotOnSale,
    /// The buyer has lifetime access to every channel of the plan already.
    Lifetime,
}

/// One plan as the bot shows it.
#[derive(Debug, Clone)]
pub struct PlanView {
    pub id: i64,
    /// The channel this plan is the default plan of: it is named by the channel (its terms are
    /// the channel's own price fields) and bought with [`Callback::Buy`] of the channel.
    pub default_of: Option<i32>,
    /// The plan's title (the channel's, for a default plan).
    pub name: String,
    pub trial: bool,
    /// The list price.
    pub price: Money,
    /// What the buyer would pay with their promo code, when one applies to this plan.
    pub discounted_minor: Option<i64>,
    /// `None`: lifetime access.
    pub period_days: Option<i32>,
    pub recurring: bool,
    /// The titles of a bundle's other channels (empty: one channel).
    pub bundle_with: Vec<String>,
    pub availability: Availability,
}

impl PlanView {
    /// The button's callback: a default plan is bought by its channel (the button data every
    /// earlier message carries), any other by its id.
    pub fn callback(&self) -> Callback {
        match self.default_of {
            Some(channel) => Callback::Buy(channel),
            None => Callback::Plan(self.id),
        }
    }

    /// The price as buyers read it: `199.00 UAH, was 249.00 UAH` when a code applies.
    fn price_text(&self, l: Language) -> String {
        let list = price(l, &self.price);
        match self.discounted_minor {
            Some(now) if now != self.price.amount_minor => {
                texts::discounted(l, &price(l, &Money::new(now, &self.price.currency)), &list)
            }
            _ => list,
        }
    }

    fn line(&self, l: Language) -> String {
        let term = term(l, self.period_days);
        if self.trial {
            return texts::trial_line(l, term.as_deref().unwrap_or_default());
        }
        texts::price_line(l, &self.price_text(l), term.as_deref(), self.recurring)
    }

    fn button(&self, l: Language) -> Option<Value> {
        if self.availability != Availability::Buyable {
            return None;
        }
        if self.trial {
            let days = term(l, self.period_days).unwrap_or_default();
            return Some(button(&texts::trial_button(l, &days), self.callback()));
        }
        let price = self.price_text(l);
        // The name gives way, never the price.
        let room =
            BUTTON_MAX.saturating_sub(units(&texts::buy_button(l, "", &price, self.recurring)));
        let name = clip(&one_line(&self.name), room.min(TITLE_IN_LIST_MAX));
        Some(button(
            &texts::buy_button(l, &name, &price, self.recurring),
            self.callback(),
        ))
    }
}

/// One channel as the catalogue shows it, with the plans listed under it.
#[derive(Debug, Clone)]
pub struct OfferView {
    pub id: i32,
    pub title: String,
    pub description: Option<String>,
    pub plans: Vec<PlanView>,
}

/// A message to send: its text and inline keyboard (rows of buttons).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rendered {
    pub text: String,
    pub rows: Vec<Vec<Value>>,
}

impl Rendered {
    /// The `reply_markup` of the message, if it has buttons.
    pub fn reply_markup(&self) -> Option<Value> {
        (!self.rows.is_empty()).then(|| json!({ "inline_keyboard": self.rows }))
    }
}

/// A button sending `callback`.
pub fn button(text: &str, callback: Callback) -> Value {
    let data = callback.data();
    debug_assert!(data.len() <= CALLBACK_DATA_MAX);
    json!({"text": clip(text, BUTTON_MAX), "callback_data": data})
}

/// A button opening `url`.
pub fn url_button(text: &str, url: &str) -> Value {
    json!({"text": clip(text, BUTTON_MAX), "url": url})
}

/// Buttons one message carries at most (Telegram allows 100 in an inline keyboard).
const KEYBOARD_MAX: usize = 90;

fn availability_line(l: Language, a: Availability) -> Option<String> {
    match a {
        Availability::Buyable => None,
        Availability::Full => Some(texts::full(l)),
        Availability::NotOnSale => Some(texts::not_on_sale(l)),
        Availability::Lifetime => Some(texts::have_lifetime(l)),
    }
}

/// A channel with only its default plan reads as a channel always did (its price line under
/// its title); any other shows each plan on a line of its own, named.
fn entry(l: Language, o: &OfferView, description_max: usize) -> String {
    let name = clip(&title(l, &o.title, o.id), TITLE_IN_LIST_MAX);
    let mut lines = vec![name];
    if let Some(d) = o
        .description
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        lines.push(clip(d, description_max));
    }
    match o.plans.as_slice() {
        [] => lines.push(texts::not_on_sale(l)),
        [only] if only.default_of == Some(o.id) => {
            lines.push(only.line(l));
            lines.extend(availability_line(l, only.availability));
        }
        plans => {
            for p in plans {
                let name = clip(&title(l, &p.name, o.id), TITLE_IN_LIST_MAX);
                lines.push(texts::plan_line(l, &name, &p.line(l)));
                if !p.bundle_with.is_empty() {
                    let others: Vec<String> = p
                        .bundle_with
                        .iter()
                        .map(|t| clip(&one_line(t), TITLE_IN_LIST_MAX))
                        .collect();
                    lines.push(texts::bundle_line(l, &others));
                }
                if let Some(a) = availability_line(l, p.availability) {
                    lines.push(texts::plan_note(&a));
                }
            }
        }
    }
    lines.join("\n")
}

fn buttons_of(l: Language, o: &OfferView) -> Vec<Vec<Value>> {
    o.plans
        .iter()
        .filter_map(|p| p.button(l))
        .map(|b| vec![b])
        .collect()
}

/// The catalogue: `intro` (if any), then as many of `offers` as fit in one message, each with
/// a buy button per plan that can be bought, and a "more" button when offers were left out or
/// `more` says the database has more. Returns the message and how many offers it shows.
pub fn catalogue(
    l: Language,
    intro: Option<&str>,
    offers: &[OfferView],
    more: bool,
) -> (Rendered, usize) {
    let mut text = String::new();
    if let Some(intro) = intro {
        text.push_str(intro);
        text.push_str("\n\n");
    }
    if offers.is_empty() {
        text.push_str(&texts::catalogue_empty(l));
        return (
            Rendered {
                text: clip(&text, MESSAGE_MAX),
                rows: Vec::new(),
            },
            0,
        );
    }
    text.push_str(&texts::catalogue_header(l));
    let footer = format!("\n\n{}", texts::catalogue_footer(l));
    let mut rows = Vec::new();
    let mut shown = 0;
    for (i, o) in offers.iter().enumerate() {
        let piece = format!("\n\n{}. {}", i + 1, entry(l, o, DESCRIPTION_IN_LIST_MAX));
        let buttons = buttons_of(l, o);
        // The first entry always fits (its parts are clipped); later ones only if the footer
        // (and the "more" button) still fit after them.
        if shown > 0
            && (units(&text) + units(&piece) + units(&footer) > MESSAGE_MAX
                || rows.len() + buttons.len() + 1 > KEYBOARD_MAX)
        {
            break;
        }
        text.push_str(&piece);
        rows.extend(buttons);
        shown += 1;
    }
    text.push_str(&footer);
    if more || shown < offers.len() {
        let last = offers[shown - 1].id;
        rows.push(vec![button(&texts::more_button(l), Callback::More(last))]);
    }
    (
        Rendered {
            text: clip(&text, MESSAGE_MAX),
            rows,
        },
        shown,
    )
}

/// One channel's offer (a deep link), or one plan's (its channel with only that plan): the
/// whole description and the buy buttons, after `intro` if any.
pub fn offer(l: Language, intro: Option<&str>, o: &OfferView) -> Rendered {
    let mut text = String::new();
    if let Some(intro) = intro {
        text.push_str(&clip(intro, 500));
        text.push_str("\n\n");
    }
    text.push_str(&format!(
        "{}\n\n{}",
        entry(l, o, DESCRIPTION_IN_OFFER_MAX),
        texts::catalogue_footer(l)
    ));
    let mut rows = buttons_of(l, o);
    rows.truncate(KEYBOARD_MAX);
    Rendered {
        text: clip(&text, MESSAGE_MAX),
        rows,
    }
}

/// One of the buyer's memberships as `/subscriptions` shows it.
#[derive(Debug, Clone)]
pub struct MembershipView {
    pub channel_id: i32,
    pub title: String,
    /// `active`, `grace` or `expired`.
    pub status: String,
    /// When it ends (lifetime access: never).
    pub expires_at: Expiry,
    /// The renew button's callback (the plan the buyer last paid for the channel, else its
    /// default plan), when it can be bought again now.
    pub renew: Option<Callback>,
    pub subscription: Option<SubscriptionView>,
}

/// The Stars subscription of a live membership.
#[derive(Debug, Clone)]
pub struct SubscriptionView {
    pub id: i64,
    /// `Some(next renewal)` while it renews; `None` once cancelled.
    pub renews_at: Option<String>,
}

/// `/subscriptions`: each membership with its status and expiry, a renew button (unless a
/// live Stars subscription renews it anyway) and, for a live Stars subscription, a
/// cancel-renewal button. Memberships that do not fit are summed up in a last line.
pub fn subscriptions(l: Language, memberships: &[MembershipView]) -> Rendered {
    if memberships.is_empty() {
        return Rendered {
            text: texts::subscriptions_empty(l),
            rows: Vec::new(),
        };
    }
    let mut text = texts::subscriptions_header(l);
    let mut rows = Vec::new();
    // Room for the "…and N more" line.
    let reserve = 40;
    for (i, m) in memberships.iter().enumerate() {
        let name = clip(&title(l, &m.title, m.channel_id), TITLE_IN_LIST_MAX);
        let mut piece = format!(
            "\n\n{name}\n{}",
            texts::membership_line(l, &m.status, m.expires_at)
        );
        let live = m.status != "expired";
        match &m.subscription {
            Some(SubscriptionView {
                renews_at: Some(at),
                ..
            }) if live => {
                piece.push('\n');
                piece.push_str(&texts::renews_automatically(l, at));
            }
            Some(SubscriptionView {
                renews_at: None, ..
            }) if live => {
                piece.push('\n');
                piece.push_str(&texts::renewal_off(l));
            }
            _ => {}
        }
        if i > 0 && units(&text) + units(&piece) + reserve > MESSAGE_MAX {
            text.push_str(&format!(
                "\n\n{}",
                texts::subscriptions_more(l, memberships.len() - i)
            ));
            break;
        }
        text.push_str(&piece);
        let renewing = live
            && m.subscription
                .as_ref()
                .is_some_and(|s| s.renews_at.is_some());
        if let Some(renew) = m.renew.filter(|_| !renewing && !m.expires_at.is_never()) {
            rows.push(vec![button(&texts::renew_button(l, &name), renew)]);
        }
        if let Some(s) = m.subscription.as_ref().filter(|_| renewing) {
            rows.push(vec![button(
                &texts::cancel_renewal_button(l, &name),
                Callback::CancelRenewal(s.id),
            )]);
        }
    }
    Rendered {
        text: clip(&text, MESSAGE_MAX),
        rows,
    }
}

/// `/language`: the choice of languages, each button in the language's own name.
pub fn language_choice(l: Language) -> Rendered {
    Rendered {
        text: texts::language_choose(l),
        rows: Language::ALL
            .iter()
            .zip(1u8..)
            .map(|(lang, n)| vec![button(lang.own_name(), Callback::Language(n))])
            .collect(),
    }
}

impl Callback {
    /// The language a [`Callback::Language`] button chooses.
    pub fn language(n: u8) -> Option<Language> {
        Language::ALL.get(usize::from(n).checked_sub(1)?).copied()
    }
}

/// The webhook reply sending `r` to chat `chat_id`.
pub fn send_message(chat_id: i64, r: &Rendered) -> Value {
    let mut call = json!({
        "method": "sendMessage",
        "chat_id": chat_id,
        "text": clip(&r.text, MESSAGE_MAX),
        "link_preview_options": {"is_disabled": true},
    });
    if let Some(markup) = r.reply_markup() {
        call["reply_markup"] = markup;
    }
    call
}

/// The webhook reply answering button press `query_id` with `text`, as an alert (a dialog the
/// buyer closes) or a passing notification.
pub fn answer_callback(query_id: &str, text: &str, alert: bool) -> Value {
    json!({
        "method": "answerCallbackQuery",
        "callback_query_id": query_id,
        "text": clip(text, CALLBACK_ANSWER_MAX),
        "show_alert": alert,
    })
}

/// The alert of a buyer the hold rules hold back until `when` ([`texts::hold_limited`]): the
/// channel's title is shortened so that the whole text, the time to try again included, fits
/// a callback answer (a cut at the end would drop the time).
pub fn hold_limited_answer(l: Language, channel_title: &str, when: &str, cooldown: bool) -> String {
    let room =
        CALLBACK_ANSWER_MAX.saturating_sub(units(&texts::hold_limited(l, "", when, cooldown)));
    texts::hold_limited(l, &clip(channel_title, room), when, cooldown)
}

/// An invoice's title: the plan's title (the channel's, for its default plan) on one line,
/// within Telegram's 32 characters.
pub fn invoice_title(l: Language, plan_title: &str, channel_id: i32) -> String {
    clip(&title(l, plan_title, channel_id), INVOICE_TITLE_MAX)
}

/// An invoice's description: the plan's description (the channel's, for its default plan), or
/// a default naming the period (`None`: lifetime) and what it gives access to, within
/// Telegram's 255 characters and never empty.
pub fn invoice_description(
    l: Language,
    description: Option<&str>,
    plan_title: &str,
    channel_id: i32,
    days: Option<i32>,
) -> String {
    let text = match description.map(str::trim).filter(|d| !d.is_empty()) {
        Some(d) => d.to_string(),
        None => texts::invoice_description(
            l,
            &clip(&title(l, plan_title, channel_id), 200),
            term(l, days).as_deref(),
        ),
    };
    clip(&text, INVOICE_DESCRIPTION_MAX)
}

/// The notice that a buyer's access to channel `channel_id` (titled `title`) ended, why, and a
/// renew button when the channel can be bought again (`renew`).
pub fn access_ended(
    l: Language,
    ending: texts::Ending,
    title: &str,
    channel_id: i32,
    renew: Option<Callback>,
) -> Rendered {
    let name = self::title(l, title, channel_id);
    let rows = renew
        .map(|r| {
            vec![vec![button(
                &texts::renew_button(l, &clip(&name, TITLE_IN_LIST_MAX)),
                r,
            )]]
        })
        .unwrap_or_default();
    Rendered {
        text: texts::access_ended(l, ending, &name),
        rows,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_hold_limit_answer_keeps_when_to_try_again_whatever_the_title() {
        let when = "2030-01-02 03:04 UTC";
        for cooldown in [true, false] {
            for title in [
                "Short",
                &"Л".repeat(255),
                &"👨\u{200D}👩\u{200D}👧".repeat(60),
            ] {
                let text = super::hold_limited_answer(Language::En, title, when, cooldown);
                assert!(super::units(&text) <= super::CALLBACK_ANSWER_MAX, "{text}");
                assert!(text.ends_with(&format!("after {when}.")), "{text}");
                assert_eq!(super::clip(&text, super::CALLBACK_ANSWER_MAX), text);
            }
        }
        assert!(super::hold_limited_answer(Language::En, "Short", when, true).contains("«Short»"));
    }

    use super::*;

    const EN: Language = Language::En;

    fn plan_view(
        id: i64,
        default_of: Option<i32>,
        name: &str,
        availability: Availability,
    ) -> PlanView {
        PlanView {
            id,
            default_of,
            name: name.to_string(),
            trial: false,
            price: Money::new(250, "XTR"),
            discounted_minor: None,
            period_days: Some(30),
            recurring: false,
            bundle_with: Vec::new(),
            availability,
        }
    }

    fn offer_view(id: i32, title: &str, availability: Availability) -> OfferView {
        OfferView {
            id,
            title: title.to_string(),
            description: Some("d".repeat(1000)),
            plans: vec![plan_view(
                1000 + i64::from(id),
                Some(id),
                title,
                availability,
            )],
        }
    }

    #[test]
    fn clip_counts_utf16_and_never_splits_an_emoji_sequence() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("abcdef", 4), "abc…");
        // 🔥 is two units: four of them are eight.
        assert_eq!(units("🔥🔥🔥🔥"), 8);
        assert_eq!(clip("🔥🔥🔥🔥", 8), "🔥🔥🔥🔥");
        assert_eq!(clip("🔥🔥🔥🔥", 7), "🔥🔥🔥…");
        assert_eq!(clip("🔥🔥🔥🔥", 6), "🔥🔥…");
        // A family (man ZWJ woman ZWJ girl) cut in the middle is dropped whole.
        let family = "ab👨\u{200D}👩\u{200D}👧";
        for max in 3..units(family) {
            let c = clip(family, max);
            assert!(units(&c) <= max, "{max}: {c}");
            assert!(!c.contains('\u{200D}'), "{max}: {c:?}");
        }
        // A skin tone is never left without its hand, nor a hand cut from its tone.
        let wave = "x👋🏽y";
        let c = clip(wave, 4);
        assert!(units(&c) <= 4 && !c.contains('\u{1F3FD}'), "{c:?}");
        assert_eq!(clip("x👋🏽yz", 6), "x👋🏽…", "a whole sequence is kept");
        assert_eq!(clip("", 5), "");
        assert_eq!(clip("abc", 0), "");
    }

    #[test]
    fn titles_are_one_line_and_never_empty() {
        assert_eq!(title(EN, "  My\nchannel\t\u{7}x  ", 3), "My channel x");
        assert_eq!(title(EN, " \n\t ", 3), "Channel 3");
        assert_eq!(title(EN, "🔥🔥🔥", 3), "🔥🔥🔥");
        let emoji_only = "👨\u{200D}👩\u{200D}👧".repeat(20);
        let t = invoice_title(EN, &emoji_only, 9);
        assert!(units(&t) <= INVOICE_TITLE_MAX && !t.is_empty(), "{t}");
        assert!(!t.ends_with('\u{200D}'));
        assert_eq!(invoice_title(EN, "   ", 9), "Channel 9");
    }

    #[test]
    fn invoice_descriptions_are_never_empty_and_fit() {
        let d = invoice_description(EN, None, "Title", 1, Some(30));
        assert_eq!(d, "30 days of access to «Title».");
        assert_eq!(
            invoice_description(EN, Some("  "), "T", 1, Some(1)),
            "1 day of access to «T»."
        );
        assert_eq!(
            invoice_description(EN, None, "T", 1, None),
            "Lifetime access to «T»."
        );
        let long = "é".repeat(1000);
        assert!(
            units(&invoice_description(EN, Some(&long), "T", 1, Some(30)))
                <= INVOICE_DESCRIPTION_MAX
        );
        let long_title = "🔥".repeat(255);
        assert!(
            units(&invoice_description(EN, None, &long_title, 1, None)) <= INVOICE_DESCRIPTION_MAX
        );
    }

    #[test]
    fn prices_and_periods_read_as_people_write_them() {
        assert_eq!(price(EN, &Money::new(250, "XTR")), "250 ⭐");
        assert_eq!(price(EN, &Money::new(9900, "UAH")), "99.00 UAH");
        assert_eq!(price(EN, &Money::new(500, "JPY")), "500 JPY");
        assert_eq!(price(EN, &Money::new(1500, "KWD")), "1.500 KWD");
        assert_eq!(period(EN, 1), "1 day");
        assert_eq!(period(EN, 30), "30 days");
    }

    #[test]
    fn callback_data_round_trips_fits_and_refuses_anything_else() {
        for c in [
            Callback::Buy(1),
            Callback::Buy(i32::MAX),
            Callback::Plan(1),
            Callback::Plan(i64::MAX),
            Callback::More(7),
            Callback::CancelRenewal(i64::MAX),
        ] {
            assert!(c.data().len() <= CALLBACK_DATA_MAX);
            assert_eq!(Callback::parse(&c.data()), Some(c));
        }
        for forged in [
            "",
            "b",
            "b:",
            "b:0",
            "b:-1",
            "b:+1",
            "b:1.0",
            "b: 1",
            "b:99999999999",
            "x:99999999999999999999",
            "z:1",
            "B:1",
            "b:1:2",
            "buy:1",
            "b:١",
            "p:0",
            "p:",
            "P:1",
        ] {
            assert_eq!(Callback::parse(forged), None, "{forged:?}");
        }
    }

    #[test]
    fn commands_and_deep_links() {
        assert_eq!(parse_command("/start"), Command::Start(None));
        assert_eq!(
            parse_command(" /start c12 "),
            Command::Start(Some("c12".into()))
        );
        assert_eq!(
            parse_command("/start@SubGate_bot c12"),
            Command::Start(Some("c12".into()))
        );
        assert_eq!(parse_command("/help"), Command::Help);
        assert_eq!(parse_command("/subscriptions"), Command::Subscriptions);
        assert_eq!(parse_command("/startx"), Command::Other);
        assert_eq!(parse_command("hello"), Command::Other);
        assert_eq!(parse_command("🔥"), Command::Other);
        assert_eq!(deep_link_channel("c12"), Some(12));
        for bad in ["c", "c0", "c-1", "12", "cx", "c99999999999", "c+1"] {
            assert_eq!(deep_link_channel(bad), None, "{bad}");
        }
        assert_eq!(
            parse_command("/code  spring25 "),
            Command::Code(Some("spring25".into()))
        );
        assert_eq!(parse_command("/code"), Command::Code(None));
        assert_eq!(deep_link("c12"), Some(DeepLink::Channel(12)));
        assert_eq!(deep_link("p7"), Some(DeepLink::Plan { id: 7, code: None }));
        assert_eq!(
            deep_link("p7-SPRING-25"),
            Some(DeepLink::Plan {
                id: 7,
                code: Some("SPRING-25".into())
            })
        );
        for bad in [
            "p",
            "p0",
            "p-X",
            "p7-",
            "px",
            "p1x",
            &format!("p1-{}", "A".repeat(33)),
        ] {
            assert_eq!(deep_link(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_catalogue_fits_one_message_and_pages_the_rest() {
        let long_title = "T".repeat(255);
        let offers: Vec<OfferView> = (1..=30)
            .map(|i| offer_view(i, &long_title, Availability::Buyable))
            .collect();
        let (r, shown) = catalogue(EN, Some(&texts::unknown_channel(EN)), &offers, false);
        assert!(units(&r.text) <= MESSAGE_MAX);
        assert!(shown >= 1 && shown < offers.len(), "{shown}");
        assert!(r.text.ends_with(&texts::catalogue_footer(EN)));
        // One buy button per shown offer, then "more" after the last shown.
        assert_eq!(r.rows.len(), shown + 1);
        let more = &r.rows[shown][0];
        assert_eq!(more["callback_data"], Callback::More(shown as i32).data());
        for row in &r.rows {
            for b in row {
                assert!(b["callback_data"].as_str().unwrap().len() <= CALLBACK_DATA_MAX);
                assert!(units(b["text"].as_str().unwrap()) <= BUTTON_MAX);
            }
        }
    }

    #[test]
    fn several_plans_are_listed_each_with_its_button_and_the_discount_in_words() {
        let mut monthly = plan_view(11, Some(1), "Club", Availability::Buyable);
        monthly.price = Money::new(24900, "UAH");
        monthly.discounted_minor = Some(19900);
        let mut life = plan_view(12, None, "Forever", Availability::Buyable);
        life.period_days = None;
        let mut trial = plan_view(13, None, "Taster", Availability::Buyable);
        trial.trial = true;
        trial.price = Money::new(0, "XTR");
        trial.period_days = Some(7);
        let mut bundle = plan_view(14, None, "Both", Availability::Full);
        bundle.bundle_with = vec!["Other".into()];
        let o = OfferView {
            id: 1,
            title: "Club".into(),
            description: None,
            plans: vec![trial, monthly, life, bundle],
        };
        let (r, _) = catalogue(EN, None, &[o], false);
        for part in [
            "• Taster: free for 7 days",
            "• Club: 199.00 UAH, was 249.00 UAH for 30 days",
            "• Forever: 250 ⭐, lifetime access",
            "• Both: 250 ⭐ for 30 days\n  Also gives access to «Other».\n  Full right now",
        ] {
            assert!(r.text.contains(part), "{part:?} in {}", r.text);
        }
        let data: Vec<(&str, &str)> = r
            .rows
            .iter()
            .map(|row| {
                (
                    row[0]["text"].as_str().unwrap(),
                    row[0]["callback_data"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            data,
            [
                ("Try free for 7 days", "p:13"),
                ("Buy: Club · 199.00 UAH, was 249.00 UAH", "b:1"),
                ("Buy: Forever · 250 ⭐", "p:12"),
            ]
        );
        // A long name gives way to the price.
        let mut long = plan_view(15, None, &"Я".repeat(200), Availability::Buyable);
        long.price = Money::new(24900, "UAH");
        long.discounted_minor = Some(19900);
        let b = long.button(EN).unwrap();
        let text = b["text"].as_str().unwrap();
        assert!(
            units(text) <= BUTTON_MAX && text.ends_with("199.00 UAH, was 249.00 UAH"),
            "{text}"
        );
    }

    #[test]
    fn full_and_unsellable_channels_are_shown_without_a_button() {
        let offers = vec![
            offer_view(1, "Open", Availability::Buyable),
            offer_view(2, "Full", Availability::Full),
            offer_view(3, "Card", Availability::NotOnSale),
        ];
        let (r, shown) = catalogue(EN, None, &offers, false);
        assert_eq!(shown, 3);
        assert!(r.text.contains(&texts::full(EN)) && r.text.contains(&texts::not_on_sale(EN)));
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.rows[0][0]["callback_data"], "b:1");
        assert!(r.text.contains("250 ⭐ for 30 days"));
    }

    #[test]
    fn an_empty_catalogue_says_so() {
        let (r, shown) = catalogue(EN, None, &[], false);
        assert_eq!(
            (r.text.as_str(), shown),
            (texts::catalogue_empty(EN).as_str(), 0)
        );
        assert!(r.reply_markup().is_none());
    }

    #[test]
    fn a_single_offer_fits_with_the_longest_description() {
        let mut o = offer_view(4, &"🔥".repeat(255), Availability::Buyable);
        o.description = Some("🔥".repeat(1000));
        let r = offer(EN, None, &o);
        assert!(units(&r.text) <= MESSAGE_MAX);
        assert_eq!(r.rows.len(), 1);
        let reply = send_message(42, &r);
        assert_eq!(reply["method"], "sendMessage");
        assert_eq!(reply["chat_id"], 42);
        assert_eq!(
            reply["reply_markup"]["inline_keyboard"][0][0]["callback_data"],
            "b:4"
        );
    }

    #[test]
    fn subscriptions_show_renewal_state_and_the_right_buttons() {
        let m = |id, status: &str, sub: Option<SubscriptionView>| MembershipView {
            channel_id: id,
            title: format!("C{id}"),
            status: status.into(),
            expires_at: Expiry::At("2030-01-01T00:00:00Z".parse().unwrap()),
            renew: Some(Callback::Buy(id)),
            subscription: sub,
        };
        let r = subscriptions(
            EN,
            &[
                m(1, "active", None),
                m(
                    2,
                    "active",
                    Some(SubscriptionView {
                        id: 7,
                        renews_at: Some("2030-01-01 00:00 UTC".into()),
                    }),
                ),
                m(
                    3,
                    "grace",
                    Some(SubscriptionView {
                        id: 8,
                        renews_at: None,
                    }),
                ),
                m(4, "expired", None),
                MembershipView {
                    expires_at: Expiry::Never,
                    renew: None,
                    ..m(5, "active", None)
                },
                MembershipView {
                    renew: Some(Callback::Plan(9)),
                    ..m(6, "active", None)
                },
            ],
        );
        assert!(
            r.text
                .contains("Renews automatically on 2030-01-01 00:00 UTC.")
        );
        assert!(r.text.contains("C1\nActive until 2030-01-01 00:00 UTC."));
        assert!(
            r.text.contains("C5\nLifetime access: it never expires."),
            "{}",
            r.text
        );
        assert!(r.text.contains(&texts::renewal_off(EN)));
        let data: Vec<&str> = r
            .rows
            .iter()
            .map(|row| row[0]["callback_data"].as_str().unwrap())
            .collect();
        assert_eq!(data, ["b:1", "x:7", "b:3", "b:4", "p:9"]);
        assert_eq!(subscriptions(EN, &[]).text, texts::subscriptions_empty(EN));
    }

    #[test]
    fn many_subscriptions_still_fit() {
        let all: Vec<MembershipView> = (1..=200)
            .map(|i| MembershipView {
                channel_id: i,
                title: "🔥".repeat(255),
                status: "active".into(),
                expires_at: Expiry::At("2030-01-01T00:00:00Z".parse().unwrap()),
                renew: Some(Callback::Buy(i)),
                subscription: None,
            })
            .collect();
        let r = subscriptions(EN, &all);
        assert!(units(&r.text) <= MESSAGE_MAX);
        assert!(r.text.contains("more."));
    }

    #[test]
    fn callback_answers_fit() {
        let a = answer_callback("q", &"x".repeat(500), true);
        assert_eq!(a["method"], "answerCallbackQuery");
        assert!(units(a["text"].as_str().unwrap()) <= CALLBACK_ANSWER_MAX);
        assert_eq!(a["show_alert"], true);
    }

    /// Every text in every language at the longest values it can carry: a 255-character title
    /// of two-unit emoji, the longest period (3660 days), the largest price, the longest date,
    /// a long join link. What Telegram limits is checked at its limit: callback answers (200),
    /// invoice title, label (32) and description (255), pre-checkout refusals (100, in
    /// `telegram::pre_checkout`), button data (64) and messages (4096).
    #[test]
    fn every_text_fits_telegrams_limits_in_every_language_with_the_longest_values() {
        let title = "🔥".repeat(255);
        let long_date: chrono::DateTime<chrono::Utc> = "2030-11-30T23:59:00Z".parse().unwrap();
        let big = Money::new(i64::MAX, "UAH");
        let link = format!("https://t.me/+{}", "A".repeat(64));
        for l in Language::ALL {
            let when = texts::day(l, long_date);
            let price = price(l, &big);
            let days = period(l, 3660);
            let fits = |what: &str, text: &str, max: usize| {
                assert!(
                    units(text) <= max,
                    "{l} {what}: {} > {max}: {text}",
                    units(text)
                );
            };
            // Callback answers: what carries no title fits whole; what names a channel is
            // clipped by `answer_callback`, and the hold answer keeps its time.
            for (what, text) in [
                ("invoice_on_its_way", texts::invoice_on_its_way(l)),
                ("invoice_already_sent", texts::invoice_already_sent(l)),
                ("button_invalid", texts::button_invalid(l)),
                ("channel_unavailable", texts::channel_unavailable(l)),
                ("promo_price_gone", texts::promo_price_gone(l)),
                ("renewal_cancelled", texts::renewal_cancelled(l)),
                (
                    "renewal_already_cancelled",
                    texts::renewal_already_cancelled(l),
                ),
                ("language_chosen", texts::language_chosen(l)),
            ] {
                fits(what, &text, CALLBACK_ANSWER_MAX);
            }
            for text in [
                texts::channel_full(l, &title),
                texts::cannot_be_paid(l, &title),
                texts::already_lifetime(l, &title),
                texts::trial_used(l, &title),
                texts::free_access_granted(l, &[title.clone(), title.clone()]),
                texts::card_unavailable(l, &title),
                texts::already_subscribed(l, &title, &when),
                texts::code_refused_at_order(
                    l,
                    &"C".repeat(32),
                    &texts::CodeRefusal::FirstPurchase.text(l),
                    &price,
                ),
            ] {
                let a = answer_callback("q", &text, true);
                fits("answer", a["text"].as_str().unwrap(), CALLBACK_ANSWER_MAX);
            }
            for cooldown in [true, false] {
                let a = hold_limited_answer(l, &title, &when, cooldown);
                fits("hold_limited_answer", &a, CALLBACK_ANSWER_MAX);
                assert!(a.contains(&when), "{l}: {a}");
            }
            // Invoices.
            fits(
                "invoice_title",
                &invoice_title(l, &title, 1),
                INVOICE_TITLE_MAX,
            );
            fits(
                "invoice_title fallback",
                &invoice_title(l, " ", i32::MAX),
                INVOICE_TITLE_MAX,
            );
            fits(
                "invoice_label",
                &texts::invoice_label(l, Some(&days)),
                INVOICE_TITLE_MAX,
            );
            fits(
                "invoice_label lifetime",
                &texts::invoice_label(l, None),
                INVOICE_TITLE_MAX,
            );
            for d in [Some(3660), None] {
                let text = invoice_description(l, None, &title, 1, d);
                fits("invoice_description", &text, INVOICE_DESCRIPTION_MAX);
                assert!(text.ends_with('.'), "{l}: {text}");
            }
            // Button data.
            for (_, data) in language_choice(l).rows.iter().map(|r| {
                (
                    r[0]["text"].clone(),
                    r[0]["callback_data"].as_str().unwrap().to_string(),
                )
            }) {
                assert!(data.len() <= CALLBACK_DATA_MAX);
                assert!(
                    Callback::language(Callback::parse(&data).map_or(0, |c| match c {
                        Callback::Language(n) => n,
                        _ => 0,
                    }))
                    .is_some()
                );
            }
            // Messages, unclipped.
            let notices = [
                texts::grant(l, &title, &when, &link),
                texts::grant_for_life(l, &title, &link),
                texts::renewal_receipt(l, &title, &when),
                texts::lifetime_receipt(l, &title),
                texts::reminder(l, &title, &when),
                texts::grace_notice(l, &title, &when),
                texts::subscription_offer(l, &title, &price, &days),
                texts::card_offer(l, &title, &price, Some(&days), 1440),
                texts::card_offer(l, &title, &price, None, 1),
                texts::subscription_cancelled(l, &title, Some(&when)),
                texts::code_applied(
                    l,
                    &"C".repeat(32),
                    &texts::code_gives(l, &price, Some(&[title.as_str(); 4].join(", "))),
                ),
                texts::with_subscription_stopped(
                    l,
                    &texts::payment_in_review(l, &title, &price, true),
                    Some(crate::common::vocabulary::Reason::AlreadyLifetime),
                ),
                texts::payment_already_lifetime(l, &title, &price, false),
                texts::payment_refunded(l, &title, &price, false),
                texts::payment_unknown_order(l, &price),
                texts::help(l),
                language_choice(l).text,
            ];
            for text in &notices {
                fits("message", text, MESSAGE_MAX);
            }
            // The catalogue and /subscriptions at their fullest.
            let offers: Vec<OfferView> = (1..=30)
                .map(|i| {
                    let mut o = offer_view(i, &title, Availability::Buyable);
                    o.description = Some("🔥".repeat(1000));
                    o.plans[0].price = big.clone();
                    o.plans[0].period_days = Some(3660);
                    o
                })
                .collect();
            let (r, _) = catalogue(l, Some(&texts::unknown_plan(l)), &offers, true);
            fits("catalogue", &r.text, MESSAGE_MAX);
            for row in &r.rows {
                fits("button", row[0]["text"].as_str().unwrap(), BUTTON_MAX);
            }
            let r = offer(l, Some(&"🔥".repeat(500)), &offers[0]);
            fits("offer", &r.text, MESSAGE_MAX);
        }
    }
}
