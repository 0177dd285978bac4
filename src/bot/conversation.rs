//! Commands and buttons: what the bot answers, and what it leaves to the outbox.
//!
//! Every step runs inside the update's transaction ([`super::handle`]) and returns the one Bot
//! API call for the webhook reply: a `sendMessage` answering a command, an
//! `answerCallbackQuery` answering a button. Reads here take no locks: what they show, the buy
//! button and the payment core decide again under locks.

use deadpool_postgres::{GenericClient, Transaction};
use serde_json::Value;

use super::{
    buy,
    catalogue::{catalogue, channel_offer, plan_offer},
    codes, guesses,
    render::{self, Callback, Command, DeepLink, MembershipView, SubscriptionView},
    texts::{self, Language},
    update::{Action, Sender},
};
use crate::{
    access::{
        buyer_view::{self, LatestSubscription},
        subscribers,
    },
    catalog::plans,
    common::{error::ApiError, ids::SubscriberId},
    config::Config,
    payments::star_subscriptions::{self, CancelRefusal, CancelledBy},
    referrals::{
        affiliates, attribution,
        buyer_links::{self, Earns, OwnLink},
    },
};

/// The conversation step for `action` (`remembered`: the language remembered for the buyer);
/// returns the webhook reply.
pub(super) async fn act(
    tx: &Transaction<'_>,
    config: &Config,
    remembered: Option<Language>,
    action: &Action,
) -> Result<Option<Value>, ApiError> {
    let from = action.from();
    let l = Language::choose(remembered, from.language_code.as_deref());
    match action {
        Action::Text {
            chat_id,
            from,
            text,
        } => command(tx, config, l, *chat_id, from, text).await.map(Some),
        Action::Button {
            query_id,
            from,
            data,
        } => button(tx, config, l, query_id, from, data.as_deref())
            .await
            .map(Some),
    }
}

/// Whether `action` is a command that only reads — the catalogue, an offer, `/subscriptions`,
/// help, a usage line — and so can be answered without a transaction or a record
/// ([`answer_reading`]).
pub(super) fn reads_only(action: &Action) -> bool {
    match action {
        Action::Text { text, .. } => only_reads(&render::parse_command(text)),
        Action::Button { .. } => false,
    }
}

fn only_reads(command: &Command) -> bool {
    match command {
        Command::Start(Some(payload)) => !matches!(
            render::deep_link(payload),
            Some(DeepLink::Plan { code: Some(_), .. } | DeepLink::Referral { .. })
        ),
        Command::Code(code) => code.is_none(),
        Command::Language(code) => code.as_deref().and_then(Language::of_tag).is_none(),
        Command::Start(None) | Command::Help | Command::Subscriptions | Command::Other => true,
        Command::Stop | Command::Referral => false,
    }
}

/// The reply to a command that only reads ([`reads_only`]), on any connection; `None` for
/// anything else.
pub(super) async fn answer_reading(
    client: &impl GenericClient,
    config: &Config,
    remembered: Option<Language>,
    action: &Action,
) -> Result<Option<Value>, ApiError> {
    let Action::Text {
        chat_id,
        from,
        text,
    } = action
    else {
        return Ok(None);
    };
    let l = Language::choose(remembered, from.language_code.as_deref());
    let command = render::parse_command(text);
    tracing::info!(user_id = from.id, ?command, "bot command");
    Ok(read_command(client, config, l, from.id, &command)
        .await?
        .map(|rendered| render::send_message(*chat_id, &rendered)))
}

/// What a command that only reads shows; `None` for one that writes.
async fn read_command(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    user_id: i64,
    command: &Command,
) -> Result<Option<render::Rendered>, ApiError> {
    if !only_reads(command) {
        return Ok(None);
    }
    Ok(Some(match command {
        Command::Start(None) | Command::Help => {
            catalogue(client, config, l, user_id, None, 0).await?.0
        }
        Command::Start(Some(payload)) => match render::deep_link(payload) {
            Some(DeepLink::Channel(id)) => {
                match channel_offer(client, config, l, user_id, id).await? {
                    Some(o) => render::offer(l, None, &o),
                    None => {
                        let intro = texts::unknown_channel(l);
                        catalogue(client, config, l, user_id, Some(&intro), 0)
                            .await?
                            .0
                    }
                }
            }
            Some(DeepLink::Plan { id, .. }) => {
                plan_page(client, config, l, user_id, id, None).await?
            }
            Some(DeepLink::Referral { .. }) => unreachable!("only_reads: a click writes"),
            None => catalogue(client, config, l, user_id, None, 0).await?.0,
        },
        Command::Code(_) => render::Rendered {
            text: texts::code_usage(l),
            rows: Vec::new(),
        },
        Command::Language(_) => render::language_choice(l),
        Command::Subscriptions => subscriptions(client, config, l, user_id).await?,
        Command::Stop | Command::Referral => unreachable!("only_reads: they write"),
        Command::Other => render::Rendered {
            text: texts::help(l),
            rows: Vec::new(),
        },
    }))
}

/// Plan `id`'s offer, under `intro` when given; the catalogue saying the plan is unknown when
/// it cannot be shown.
async fn plan_page(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    user_id: i64,
    id: i64,
    intro: Option<String>,
) -> Result<render::Rendered, ApiError> {
    Ok(match plan_offer(client, config, l, user_id, id).await? {
        Some(o) => render::offer(l, intro.as_deref(), &o),
        None => {
            let intro = match intro {
                Some(i) => format!("{}\n\n{i}", texts::unknown_plan(l)),
                None => texts::unknown_plan(l),
            };
            catalogue(client, config, l, user_id, Some(&intro), 0)
                .await?
                .0
        }
    })
}

async fn command(
    tx: &Transaction<'_>,
    config: &Config,
    l: Language,
    chat_id: i64,
    from: &Sender,
    text: &str,
) -> Result<Value, ApiError> {
    let command = render::parse_command(text);
    tracing::info!(user_id = from.id, ?command, "bot command");
    if let Some(rendered) = read_command(tx, config, l, from.id, &command).await? {
        return Ok(render::send_message(chat_id, &rendered));
    }
    let rendered = match command {
        Command::Start(Some(payload)) => match render::deep_link(&payload) {
            Some(DeepLink::Plan {
                id,
                code: Some(code),
            }) => {
                let intro = apply_code(tx, l, from, &code, Some(id)).await?;
                plan_page(tx, config, l, from.id, id, Some(intro)).await?
            }
            Some(DeepLink::Referral { code, plan }) => {
                referral_click(tx, from, &code).await?;
                match plan {
                    Some(id) => plan_page(tx, config, l, from.id, id, None).await?,
                    None => catalogue(tx, config, l, from.id, None, 0).await?.0,
                }
            }
            _ => unreachable!("read_command shows every other deep link"),
        },
        Command::Code(Some(code)) => render::Rendered {
            text: apply_code(tx, l, from, &code, None).await?,
            rows: Vec::new(),
        },
        Command::Language(Some(code)) => match Language::of_tag(&code) {
            Some(chosen) => render::Rendered {
                text: choose_language(tx, from, chosen).await?,
                rows: Vec::new(),
            },
            None => unreachable!("read_command shows the choice for an unknown language"),
        },
        Command::Stop => render::Rendered {
            text: stop(tx, l, from).await?,
            rows: Vec::new(),
        },
        Command::Referral => render::Rendered {
            text: own_referral_link(tx, config, l, from).await?,
            rows: Vec::new(),
        },
        _ => unreachable!("read_command shows every command that only reads"),
    };
    Ok(render::send_message(chat_id, &rendered))
}

async fn button(
    tx: &Transaction<'_>,
    config: &Config,
    l: Language,
    query_id: &str,
    from: &Sender,
    data: Option<&str>,
) -> Result<Value, ApiError> {
    let callback = data.and_then(Callback::parse);
    tracing::info!(user_id = from.id, ?callback, "bot button pressed");
    let Some(callback) = callback else {
        return Ok(render::answer_callback(
            query_id,
            &texts::button_invalid(l),
            true,
        ));
    };
    let bought = match callback {
        Callback::Buy(channel_id) => Some(buy::Target::Channel(channel_id)),
        Callback::Plan(plan_id) => Some(buy::Target::Plan(plan_id)),
        _ => None,
    };
    if let Some(target) = bought {
        let answer = buy::buy(tx, config, l, from, target).await?;
        return Ok(render::answer_callback(
            query_id,
            &answer.text,
            answer.alert,
        ));
    }
    match callback {
        Callback::More(after) => {
            // The page is a second message: the reply answers the button, the outbox sends it.
            let (page, _) = catalogue(tx, config, l, from.id, None, after).await?;
            crate::outbox::bot_messages::enqueue_message(&**tx, from.id, &page, None).await?;
            Ok(render::answer_callback(query_id, "", false))
        }
        Callback::CancelRenewal(id) => {
            let text = cancel_renewal(tx, l, from, id).await?;
            Ok(render::answer_callback(query_id, &text, true))
        }
        Callback::Language(n) => {
            let text = match Callback::language(n) {
                Some(chosen) => choose_language(tx, from, chosen).await?,
                None => texts::button_invalid(l),
            };
            Ok(render::answer_callback(query_id, &text, false))
        }
        Callback::Crypto(order_id, asset) => {
            let answer = match Callback::crypto_asset(asset) {
                Some(asset) => buy::crypto(tx, config, l, from, order_id, asset).await?,
                None => buy::Answer {
                    text: texts::button_invalid(l),
                    alert: true,
                },
            };
            Ok(render::answer_callback(
                query_id,
                &answer.text,
                answer.alert,
            ))
        }
        Callback::Buy(_) | Callback::Plan(_) => unreachable!("handled above"),
    }
}

/// `/stop`: no more broadcasts or automations for the buyer (made a subscriber if need be, so
/// the wish is kept for later), confirmed in their language; `/start` undoes it
/// ([`super::handle`]).
async fn stop(tx: &Transaction<'_>, l: Language, from: &Sender) -> Result<String, ApiError> {
    let buyer = buy::upsert_subscriber(tx, from).await?;
    subscribers::stop_marketing(tx, buyer).await?;
    tracing::info!(
        subscriber_id = buyer,
        "buyer opted out of broadcasts and automations"
    );
    Ok(texts::marketing_stopped(l))
}

/// `/start r_<code>`: the click is recorded and may attribute the buyer
/// ([`attribution::click`]); the buyer sees what a plain `/start` (or the plan's link) shows
/// either way, so a code's fate tells a guesser nothing.
async fn referral_click(tx: &Transaction<'_>, from: &Sender, code: &str) -> Result<(), ApiError> {
    let buyer = buy::upsert_subscriber(tx, from).await?;
    if attribution::click(tx, code, buyer).await?.is_none() {
        tracing::info!(
            subscriber_id = buyer,
            "referral click of an unknown or inactive code ignored"
        );
    }
    Ok(())
}

/// `/referral`: the buyer's own link (made on their first ask) and what it earns them, when
/// the program lets buyers have one and the bot has a username to link to.
async fn own_referral_link(
    tx: &Transaction<'_>,
    config: &Config,
    l: Language,
    from: &Sender,
) -> Result<String, ApiError> {
    let Some(bot) = config.telegram_bot_username.as_deref() else {
        return Ok(texts::referral_unavailable(l));
    };
    let buyer = buy::upsert_subscriber(tx, from).await?;
    Ok(match buyer_links::own_link(tx, buyer).await? {
        OwnLink::Unavailable => texts::referral_unavailable(l),
        OwnLink::Refused => texts::referral_refused(l),
        OwnLink::Code { code, earns } => {
            let link = affiliates::link(bot, &code);
            match earns {
                Earns::Days(days) => texts::referral_link_days(l, &link, days),
                Earns::Percent(p) => texts::referral_link_percent(l, &link, &texts::percent(l, p)),
                Earns::Nothing => texts::referral_link(l, &link),
            }
        }
    })
}

/// `/language <code>` or a language button: the buyer's language from now on (remembered on
/// their subscriber row, made if need be); the answer is in the language chosen.
async fn choose_language(
    tx: &Transaction<'_>,
    from: &Sender,
    chosen: Language,
) -> Result<String, ApiError> {
    let buyer = buy::upsert_subscriber(tx, from).await?;
    subscribers::set_language(tx, buyer, Some(chosen)).await?;
    tracing::info!(subscriber_id = buyer, language = %chosen, "bot language chosen");
    Ok(texts::language_chosen(chosen))
}

/// `/code CODE` (or a deep link's code, `for_plan` its plan): keeps a usable code for the
/// buyer's next order and says what it gives; or says why not, keeping any code given before.
/// Past the limit on wrong codes ([`guesses`]) the code is not looked up at all.
async fn apply_code(
    tx: &Transaction<'_>,
    l: Language,
    from: &Sender,
    text: &str,
    for_plan: Option<i64>,
) -> Result<String, ApiError> {
    Ok(match keep_code(tx, l, from, text, for_plan).await? {
        Ok(said) | Err(said) => said,
    })
}

/// [`apply_code`]'s decision: `Ok` with what it says when the code is kept (or already applied
/// to the buyer's pending order), `Err` with why not. The Mini App keeps a code typed on its page
/// through it too.
pub(super) async fn keep_code(
    tx: &Transaction<'_>,
    l: Language,
    from: &Sender,
    text: &str,
    for_plan: Option<i64>,
) -> Result<Result<String, String>, ApiError> {
    let text = text.trim();
    let shown = render::clip(&render::one_line(text), 32).to_uppercase();
    let buyer = SubscriberId(buy::upsert_subscriber(tx, from).await?);
    if let guesses::Gate::Limited { retry_after_secs } = guesses::open(tx, from.id).await? {
        crate::common::metrics::bot_code_guess("limited");
        tracing::warn!(
            user_id = from.id,
            retry_after_secs,
            "bot promo code refused: too many wrong codes"
        );
        return Ok(Err(texts::code_too_many(l, retry_after_secs)));
    }
    let code = codes::by_text(tx, text, Some(buyer)).await?;
    // An inactive code reads as an unknown one, so guessing tells nothing about either.
    let Some(code) = code.filter(|c| c.refusal() != Some(texts::CodeRefusal::Inactive)) else {
        guesses::wrong(tx, from.id).await?;
        crate::common::metrics::bot_code_guess("wrong");
        return Ok(Err(texts::code_refused(
            l,
            &shown,
            texts::CodeRefusal::Unknown,
        )));
    };
    if let Some(why) = code.refusal() {
        // The buyer's own pending order may be what holds the use that the refusal counts:
        // the code is applied there, not used up.
        if let Some(applied) = code.already_applied(tx, buyer, l).await? {
            return Ok(Ok(applied));
        }
        crate::common::metrics::bot_code_guess("refused");
        return Ok(Err(texts::code_refused(l, code.text(), why)));
    }
    let gives = match code.gives(tx, l).await? {
        Ok(gives) => gives,
        Err(why) => {
            crate::common::metrics::bot_code_guess("refused");
            return Ok(Err(texts::code_refused(l, code.text(), why)));
        }
    };
    if let Some(plan) = match for_plan {
        Some(id) => plans::get(tx, id).await?,
        None => None,
    } && let Err(why) = code.price_for(tx, Some(buyer), &plan).await?
    {
        crate::common::metrics::bot_code_guess("refused");
        return Ok(Err(texts::code_refused(l, code.text(), why)));
    }
    crate::common::metrics::bot_code_guess("applied");
    codes::store(tx, buyer, &code).await?;
    tracing::info!(
        subscriber_id = buyer.0,
        promo_code_id = code.id(),
        "bot promo code kept"
    );
    Ok(Ok(texts::code_applied(l, code.text(), &gives)))
}

/// Memberships listed at most (the renderer sums up the rest it cannot fit).
const SUBSCRIPTIONS_MAX: i64 = 100;

/// `/subscriptions`: a renew button buys again the plan the buyer last paid for the channel (a
/// paid plan with a period, still active), else the channel's default plan; a lifetime
/// membership reads "lifetime" and has nothing to renew.
async fn subscriptions(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    user_id: i64,
) -> Result<render::Rendered, ApiError> {
    let rows = buyer_view::of_telegram_user(client, user_id, SUBSCRIPTIONS_MAX).await?;
    let memberships: Vec<MembershipView> = rows
        .iter()
        .map(|m| {
            // Live lifetime access is not bought again.
            let lifetime = m.expires_at.is_never() && m.status.holds_access();
            MembershipView {
                channel_id: m.renew.channel_id,
                title: m.translations.title(l, &m.title).to_string(),
                status: m.status.as_str().to_string(),
                expires_at: m.expires_at,
                renew: if lifetime {
                    None
                } else {
                    super::renew_of(config, &m.renew)
                },
                subscription: m
                    .subscription
                    .as_ref()
                    .and_then(|s| subscription_view(l, s)),
            }
        })
        .collect();
    let mut rendered = render::subscriptions(l, &memberships);
    // The member portal, when the service has a public address for its page.
    if let Some(public_url) = config.public_url.as_deref() {
        rendered.rows.push(vec![render::web_app_button(
            &texts::portal_button(l),
            &format!("{public_url}/app/"),
        )]);
    }
    Ok(rendered)
}

/// What `/subscriptions` shows of a membership's newest Stars subscription: its next renewal
/// while it renews, that it is cancelled once it is; nothing once Telegram stopped charging it.
fn subscription_view(l: Language, s: &LatestSubscription) -> Option<SubscriptionView> {
    match star_subscriptions::Status::parse(&s.status)? {
        star_subscriptions::Status::Active if s.ahead => Some(SubscriptionView {
            id: s.id,
            renews_at: Some(texts::day(l, s.expires_at)),
        }),
        star_subscriptions::Status::Active => None,
        star_subscriptions::Status::Cancelled => Some(SubscriptionView {
            id: s.id,
            renews_at: None,
        }),
    }
}

/// The cancel-renewal button of subscription `id`: only its own buyer may press it.
async fn cancel_renewal(
    tx: &Transaction<'_>,
    l: Language,
    from: &Sender,
    id: i64,
) -> Result<String, ApiError> {
    let owner: Option<i64> = tx
        .query_opt(
            "SELECT s.telegram_user_id FROM star_subscriptions ss
             JOIN subscribers s ON s.id = ss.subscriber_id
             WHERE ss.id = $1",
            &[&id],
        )
        .await?
        .map(|r| r.try_get("telegram_user_id"))
        .transpose()?;
    if owner != Some(from.id) {
        return Ok(texts::button_invalid(l));
    }
    Ok(
        match star_subscriptions::cancel(tx, id, CancelledBy::Buyer).await? {
            Some(Ok(_)) => texts::renewal_cancelled(l),
            Some(Err(CancelRefusal::AlreadyCancelled)) => texts::renewal_already_cancelled(l),
            None => texts::button_invalid(l),
        },
    )
}
