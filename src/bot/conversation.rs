//! Commands and buttons: what the bot answers, and what it leaves to the outbox.
//!
//! Every step runs inside the update's transaction ([`super::handle`]) and returns the one Bot
//! API call for the webhook reply: a `sendMessage` answering a command, an
//! `answerCallbackQuery` answering a button. Reads here take no locks (a catalogue may be a
//! moment stale; the buy button and the payment core decide under locks).

use std::collections::HashMap;

use deadpool_postgres::{GenericClient, Transaction};
use serde_json::Value;

use super::{
    buy, codes, gateway, guesses,
    render::{
        self, Availability, Callback, Command, DeepLink, MembershipView, OfferView, PlanView,
        SubscriptionView,
    },
    texts::{self, Language},
    update::{Action, Sender},
};
use crate::{
    access::{
        buyer_view::{self, LatestSubscription},
        subscribers,
    },
    catalog::{
        channels::{self, Offer},
        plans::{self, Plan},
    },
    common::{error::ApiError, ids::SubscriberId},
    config::Config,
    orders::{seats, trials},
    payments::star_subscriptions::{self, CancelRefusal, CancelledBy},
};

/// Channels one catalogue message lists at most (fewer when long descriptions fill it).
const PAGE: i64 = 10;

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
            Some(DeepLink::Plan { code: Some(_), .. })
        ),
        Command::Code(code) => code.is_none(),
        Command::Language(code) => code.as_deref().and_then(Language::of_tag).is_none(),
        Command::Start(None) | Command::Help | Command::Subscriptions | Command::Other => true,
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
            None => catalogue(client, config, l, user_id, None, 0).await?.0,
        },
        Command::Code(_) => render::Rendered {
            text: texts::code_usage(l),
            rows: Vec::new(),
        },
        Command::Language(_) => render::language_choice(l),
        Command::Subscriptions => subscriptions(client, config, l, user_id).await?,
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
        Callback::Buy(_) | Callback::Plan(_) => unreachable!("handled above"),
    }
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
        return Ok(texts::code_too_many(l, retry_after_secs));
    }
    let code = codes::by_text(tx, text, Some(buyer)).await?;
    // An inactive code reads as an unknown one, so guessing tells nothing about either.
    let Some(code) = code.filter(|c| c.refusal() != Some(texts::CodeRefusal::Inactive)) else {
        guesses::wrong(tx, from.id).await?;
        crate::common::metrics::bot_code_guess("wrong");
        return Ok(texts::code_refused(l, &shown, texts::CodeRefusal::Unknown));
    };
    if let Some(why) = code.refusal() {
        // The buyer's own pending order may be what holds the use that the refusal counts:
        // the code is applied there, not used up.
        if let Some(applied) = code.already_applied(tx, buyer, l).await? {
            return Ok(applied);
        }
        crate::common::metrics::bot_code_guess("refused");
        return Ok(texts::code_refused(l, code.text(), why));
    }
    let gives = match code.gives(tx, l).await? {
        Ok(gives) => gives,
        Err(why) => {
            crate::common::metrics::bot_code_guess("refused");
            return Ok(texts::code_refused(l, code.text(), why));
        }
    };
    if let Some(plan) = match for_plan {
        Some(id) => plans::get(tx, id).await?,
        None => None,
    } && let Err(why) = code.price_for(tx, Some(buyer), &plan).await?
    {
        crate::common::metrics::bot_code_guess("refused");
        return Ok(texts::code_refused(l, code.text(), why));
    }
    crate::common::metrics::bot_code_guess("applied");
    codes::store(tx, buyer, &code).await?;
    tracing::info!(
        subscriber_id = buyer.0,
        promo_code_id = code.id(),
        "bot promo code kept"
    );
    Ok(texts::code_applied(l, code.text(), &gives))
}

/// Who is looking at the catalogue: their subscriber row if they have one, the promo code they
/// gave the bot, and the channels they have lifetime access to.
struct Viewer {
    subscriber: Option<SubscriberId>,
    code: Option<codes::Code>,
    lifetime: Vec<i32>,
}

async fn viewer(client: &impl GenericClient, user_id: i64) -> Result<Viewer, ApiError> {
    let subscriber = subscribers::of_telegram_user(client, user_id)
        .await?
        .map(SubscriberId);
    let Some(s) = subscriber else {
        return Ok(Viewer {
            subscriber,
            code: None,
            lifetime: Vec::new(),
        });
    };
    let (code, lifetime) = tokio::try_join!(
        codes::stored(client, s),
        crate::access::memberships::lifetime_channels(client, s)
    )?;
    Ok(Viewer {
        subscriber,
        code,
        lifetime,
    })
}

/// The channels of plans being shown, read once each.
#[derive(Default)]
struct Channels(HashMap<i32, Option<Offer>>);

impl Channels {
    async fn get(
        &mut self,
        client: &impl GenericClient,
        id: i32,
    ) -> Result<Option<&Offer>, ApiError> {
        if let std::collections::hash_map::Entry::Vacant(e) = self.0.entry(id) {
            e.insert(channels::offer(client, id).await?);
        }
        Ok(self.0.get(&id).and_then(Option::as_ref))
    }
}

/// Whether `viewer` can buy `plan` now: a gateway takes its currency (a trial needs none), the
/// buyer has no lifetime access to all of it already, and each seat-limited channel of it has
/// a seat free or the viewer is a member there already (a renewal needs no seat). Read without
/// locks: the buy button decides again under them.
async fn availability(
    client: &impl GenericClient,
    config: &Config,
    plan: &Plan,
    offers: &[Offer],
    viewer: &Viewer,
) -> Result<Availability, ApiError> {
    if plan.kind == plans::Kind::Paid && gateway(config, &plan.currency).is_none() {
        return Ok(Availability::NotOnSale);
    }
    if plan.channel_ids.iter().all(|c| viewer.lifetime.contains(c)) {
        return Ok(Availability::Lifetime);
    }
    for c in offers {
        let Some(limit) = c.seat_limit else {
            continue;
        };
        if let Some(s) = viewer.subscriber
            && seats::is_live_member(client, s, crate::common::ids::ChannelId(c.id)).await?
        {
            continue;
        }
        if seats::seats_taken(client, c.id).await? >= i64::from(limit) {
            return Ok(Availability::Full);
        }
    }
    Ok(Availability::Buyable)
}

/// How `viewer` sees `plan`; `None` when it is not to be shown: a channel of it is gone or not
/// active, or it is a trial the viewer can no longer use.
async fn plan_view(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    plan: &Plan,
    known: &mut Channels,
    viewer: &Viewer,
) -> Result<Option<PlanView>, ApiError> {
    let mut offers = Vec::new();
    for id in &plan.channel_ids {
        match known.get(client, *id).await? {
            Some(o) if o.active => offers.push(o.clone()),
            _ => return Ok(None),
        }
    }
    let trial = plan.kind == plans::Kind::Trial;
    if trial
        && let Some(s) = viewer.subscriber
        && !trials::eligible(client, s, plan).await?
    {
        return Ok(None);
    }
    let discounted_minor = match &viewer.code {
        Some(code) if !trial => code.price_for(client, viewer.subscriber, plan).await?.ok(),
        _ => None,
    };
    let default_of = plan.is_default.then_some(plan.channel_ids[0]);
    let name = match default_of {
        Some(_) => offers[0].title_in(l).to_string(),
        None => plan.title_in(l).to_string(),
    };
    Ok(Some(PlanView {
        id: plan.id,
        default_of,
        name,
        trial,
        price: plan.price(),
        discounted_minor,
        period_days: plan.period_days,
        recurring: plan.recurring,
        bundle_with: offers[1..]
            .iter()
            .map(|o| o.title_in(l).to_string())
            .collect(),
        availability: availability(client, config, plan, &offers, viewer).await?,
    }))
}

/// The catalogue's view of channel `c` with `plans` under it (`present` knows no rows: the bot
/// turns them into views, with what the viewer may do with each).
async fn view(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    c: Offer,
    plans: Vec<Plan>,
    known: &mut Channels,
    viewer: &Viewer,
) -> Result<OfferView, ApiError> {
    known.0.insert(c.id, Some(c.clone()));
    let mut views = Vec::new();
    for p in &plans {
        views.extend(plan_view(client, config, l, p, known, viewer).await?);
    }
    Ok(OfferView {
        id: c.id,
        title: c.title_in(l).to_string(),
        description: c.description_in(l).map(str::to_string),
        plans: views,
    })
}

/// A page of the catalogue for Telegram user `user_id`: active channels after channel `after`,
/// each with its active plans. A bundle is listed once, under its first channel.
async fn catalogue(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    user_id: i64,
    intro: Option<&str>,
    after: i32,
) -> Result<(render::Rendered, usize), ApiError> {
    // The reads that do not depend on each other go out together (tokio-postgres pipelines
    // them on the connection): a round trip each, not one after the other.
    let (mut channels, viewer) = tokio::try_join!(
        channels::active_offers(client, after, PAGE + 1),
        viewer(client, user_id)
    )?;
    let more = channels.len() as i64 > PAGE;
    channels.truncate(PAGE as usize);
    let plans = futures::future::try_join_all(
        channels
            .iter()
            .map(|c| plans::active_of_channel(client, c.id)),
    )
    .await?;
    let mut known = Channels::default();
    let mut offers = Vec::new();
    for (c, plans) in channels.into_iter().zip(plans) {
        let plans = plans
            .into_iter()
            .filter(|p| p.channel_ids.first() == Some(&c.id))
            .collect();
        offers.push(view(client, config, l, c, plans, &mut known, &viewer).await?);
    }
    Ok(render::catalogue(l, intro, &offers, more))
}

/// One active channel with every active plan that includes it (bundles whose first channel is
/// another included); `None` when there is no such channel or it is not active.
async fn channel_offer(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    user_id: i64,
    channel_id: i32,
) -> Result<Option<OfferView>, ApiError> {
    let Some(c) = channels::offer(client, channel_id)
        .await?
        .filter(|c| c.active)
    else {
        return Ok(None);
    };
    let plans = plans::active_of_channel(client, c.id).await?;
    let viewer = viewer(client, user_id).await?;
    let mut known = Channels::default();
    Ok(Some(
        view(client, config, l, c, plans, &mut known, &viewer).await?,
    ))
}

/// One active plan under its first channel; `None` when there is no such plan, it is not
/// active, or it is not to be shown to this viewer ([`plan_view`]).
async fn plan_offer(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    user_id: i64,
    plan_id: i64,
) -> Result<Option<OfferView>, ApiError> {
    let Some(plan) = plans::get(client, plan_id).await?.filter(|p| p.active) else {
        return Ok(None);
    };
    let Some(c) = channels::offer(client, plan.channel_ids[0])
        .await?
        .filter(|c| c.active)
    else {
        return Ok(None);
    };
    let viewer = viewer(client, user_id).await?;
    let mut known = Channels::default();
    let o = view(
        client,
        config,
        l,
        c,
        vec![plan.clone()],
        &mut known,
        &viewer,
    )
    .await?;
    if o.plans.is_empty() {
        return Ok(None);
    }
    // The plan's own description, when it has one, says more than the channel's.
    let description = plan
        .description_in(l)
        .map(str::to_string)
        .or(o.description.clone());
    Ok(Some(OfferView { description, ..o }))
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
    Ok(render::subscriptions(l, &memberships))
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
