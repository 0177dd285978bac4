//! `GET /api/overview`: the day's numbers on one page, for the staff console's first screen —
//! members by status and seats per channel, revenue by currency over the last 30 days, payments
//! and Telegram effects waiting for staff, the channels where the bot lost its rights, and the
//! last sweep.
//!
//! Read in one read-only REPEATABLE READ transaction, so every number comes from the same
//! snapshot (a payment applied meanwhile moves a member and the revenue together, or neither).
//! Seats are counted by [`seats::seats_taken`], the function every seat decision uses; the
//! channels and their member counts come from [`channels::member_counts`].

use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_postgres::IsolationLevel;

use super::{ApiQuery, auth::Staff};
use crate::{
    access::sweep::SweepRun, app::state::AppState, catalog::channels, common::error::ApiError,
    config::Doors, db, orders::seats, outbox::effects,
};

/// The body of `GET /api/overview`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Overview {
    /// Database time of the snapshot.
    pub as_of: DateTime<Utc>,
    /// Every channel, by id.
    pub channels: Vec<ChannelCounts>,
    /// Applied payments whose `paid_at` is in the last 30 days, by currency (refunded ones are
    /// not revenue).
    pub revenue_30d: Vec<Revenue>,
    /// Payments by the outcomes that wait for staff or a refund.
    pub payments: PaymentCounts,
    /// Telegram effects still to perform and dead letters.
    pub effects: EffectCounts,
    /// The channels where the bot lacks the rights to manage members (`telegram_status`
    /// `no_rights`), by id: their access effects wait until the rights are back.
    pub channels_without_rights: Vec<channels::WithoutRights>,
    /// The last sweep this server process finished (null after a restart until one runs).
    pub last_sweep: Option<SweepRun>,
    /// When a sweep last changed a membership (from `membership_events`, any process).
    pub last_sweep_change_at: Option<DateTime<Utc>>,
    /// Which payment doors are live (configured), and whether fiscal receipts are.
    pub doors: Doors,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = OverviewChannel)]
pub struct ChannelCounts {
    pub id: i32,
    pub title: String,
    pub active: bool,
    pub seat_limit: Option<i32>,
    /// Seats taken as the seat rule counts them (live members and valid holds); null for a
    /// channel without a limit.
    pub seats_taken: Option<i64>,
    pub members: MemberCounts,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = OverviewMembers)]
pub struct MemberCounts {
    pub active: i64,
    pub grace: i64,
    pub expired: i64,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = OverviewRevenue)]
pub struct Revenue {
    pub currency: String,
    /// An exact integer of any size ([`crate::db::exact_sum`]).
    pub amount_minor: i128,
    pub payments: i64,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = OverviewPayments)]
pub struct PaymentCounts {
    pub needs_review: i64,
    pub refund_pending: i64,
    pub refund_failed: i64,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = OverviewEffects)]
pub struct EffectCounts {
    pub pending: i64,
    pub failed: i64,
    /// Pending access effects (grants, revokes, join decisions, unbans) waiting in chats
    /// where the bot has no rights (counted in `pending` too).
    pub paused_no_rights: i64,
}

/// `GET /api/overview` takes no parameters (an unknown one is a 400, as on every list).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// `GET /api/overview`.
#[utoipa::path(get, path = "/overview", operation_id = "getOverview", tag = "operations",
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The day's numbers, from one snapshot.", body = Overview),
        (status = 400, description = "A query parameter (it takes none).",
            body = super::schemas::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn get(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(NoParams {}): ApiQuery<NoParams>,
) -> Result<Json<Overview>, ApiError> {
    let mut client = state.db.get().await?;
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let mut channels = Vec::new();
    for c in channels::member_counts(&tx).await? {
        let seats_taken = match c.seat_limit {
            Some(_) => Some(seats::seats_taken(&tx, c.id).await?),
            None => None,
        };
        channels.push(ChannelCounts {
            id: c.id,
            title: c.title,
            active: c.active,
            seat_limit: c.seat_limit,
            seats_taken,
            members: MemberCounts {
                active: c.members_active,
                grace: c.members_grace,
                expired: c.members_expired,
            },
        });
    }
    let channels_without_rights = channels::without_rights(&tx).await?;
    let paused_no_rights = effects::paused_by_rights(&tx).await?;
    let revenue_30d = tx
        .query(
            "SELECT currency, sum(amount_minor)::text AS amount_minor, count(*) AS payments
             FROM payments
             WHERE outcome = 'applied' AND paid_at > statement_timestamp() - interval '30 days'
             GROUP BY currency ORDER BY currency",
            &[],
        )
        .await?
        .iter()
        .map(|r| {
            Ok(Revenue {
                currency: r.try_get("currency")?,
                amount_minor: db::exact_sum(r, "amount_minor")?,
                payments: r.try_get("payments")?,
            })
        })
        .collect::<Result<_, ApiError>>()?;
    let r = tx
        .query_one(
            "SELECT count(*) FILTER (WHERE outcome = 'needs_review') AS needs_review,
                    count(*) FILTER (WHERE outcome = 'refund_pending') AS refund_pending,
                    count(*) FILTER (WHERE outcome = 'refund_failed') AS refund_failed,
                    (SELECT count(*) FROM effects WHERE status = 'pending') AS effects_pending,
                    (SELECT count(*) FROM effects WHERE status = 'failed') AS effects_failed,
                    (SELECT at FROM membership_events WHERE cause = 'sweep'
                      ORDER BY id DESC LIMIT 1) AS last_sweep_change_at,
                    statement_timestamp() AS as_of
             FROM payments WHERE outcome IN ('needs_review', 'refund_pending', 'refund_failed')",
            &[],
        )
        .await?;
    tx.commit().await?;
    Ok(Json(Overview {
        as_of: r.try_get("as_of")?,
        channels,
        revenue_30d,
        payments: PaymentCounts {
            needs_review: r.try_get("needs_review")?,
            refund_pending: r.try_get("refund_pending")?,
            refund_failed: r.try_get("refund_failed")?,
        },
        effects: EffectCounts {
            pending: r.try_get("effects_pending")?,
            failed: r.try_get("effects_failed")?,
            paused_no_rights,
        },
        channels_without_rights,
        last_sweep: state.last_sweep.get(),
        last_sweep_change_at: r.try_get("last_sweep_change_at")?,
        doors: state.config.doors(),
    }))
}
