//! The catalogue as a buyer sees it: the active channels with their plans, one channel's offer,
//! one plan's, each plan with what this buyer may do with it (buy, try free, nothing: full,
//! held for life, not on sale). Reads only: a catalogue may be a moment stale.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;

use super::{
    codes, gateway,
    render::{self, Availability, OfferView, PlanView},
    texts::Language,
};
use crate::{
    access::subscribers,
    catalog::{
        channels::{self, Offer},
        plans::{self, Plan},
    },
    common::{error::ApiError, ids::SubscriberId},
    config::Config,
    orders::{seats, trials},
};

/// Channels one catalogue message lists at most (fewer when long descriptions fill it).
const PAGE: i64 = 10;

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
pub(super) async fn catalogue(
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
pub(super) async fn channel_offer(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    user_id: i64,
    channel_id: i32,
) -> Result<Option<OfferView>, ApiError> {
    channel_offer_with(client, config, l, user_id, channel_id, None).await
}

/// [`channel_offer`], priced with `code` when given (a code the buyer typed on the Mini App's
/// page, not yet kept) instead of the one they gave the bot.
pub(super) async fn channel_offer_with(
    client: &impl GenericClient,
    config: &Config,
    l: Language,
    user_id: i64,
    channel_id: i32,
    code: Option<codes::Code>,
) -> Result<Option<OfferView>, ApiError> {
    let Some(c) = channels::offer(client, channel_id)
        .await?
        .filter(|c| c.active)
    else {
        return Ok(None);
    };
    let plans = plans::active_of_channel(client, c.id).await?;
    let mut viewer = viewer(client, user_id).await?;
    if code.is_some() {
        viewer.code = code;
    }
    let mut known = Channels::default();
    Ok(Some(
        view(client, config, l, c, plans, &mut known, &viewer).await?,
    ))
}

/// One active plan under its first channel; `None` when there is no such plan, it is not
/// active, or it is not to be shown to this viewer ([`plan_view`]).
pub(super) async fn plan_offer(
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
