//! Telegram Stars subscription charges: which charge renews, the stop of a subscription whose
//! charge fails a check, and the renewals judged again when their subscription starts.

use super::*;

/// The end of a subscription charge's membership at the earliest: the subscription's next
/// renewal plus [`star_subscriptions::SLACK_SECS`].
pub(super) fn slack_after(renews_at: DateTime<Utc>) -> DateTime<Utc> {
    renews_at + chrono::Duration::seconds(star_subscriptions::SLACK_SECS)
}

/// Stops the subscription a refused charge belongs to, in the payment's transaction, and says
/// whether it did (the buyer's notice says so): a refused renewal cancels the order's active
/// subscription — unless its payer is not the subscription's buyer, or no subscription is known
/// yet (`unknown_subscription`: judged again when its first charge arrives) or it is cancelled
/// already; a refused first charge of a subscription gets a row of its own, cancelled from the
/// start. Either way an `editUserStarSubscription(is_canceled = true)` effect is enqueued, so
/// Telegram stops charging for access subgate did not give. `user`: whom to tell Telegram about
/// (the payer, else the order's buyer).
pub(super) async fn stop_subscription(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    recurrence: Recurrence,
    found: &Found,
    reason: Reason,
    user: Option<i64>,
) -> Result<bool, ApiError> {
    let Some(locked) = &found.order else {
        return Ok(false);
    };
    if found.renewal {
        let Some(s) = found.subscription.as_ref().filter(|s| s.is_active()) else {
            return Ok(false);
        };
        if reason == Reason::PayerMismatch {
            return Ok(false);
        }
        star_subscriptions::stop(tx, s, reason).await?;
        return Ok(true);
    }
    if !starts_subscription(p, recurrence, locked) {
        return Ok(false);
    }
    let Some(user) = user.filter(|u| *u > 0) else {
        return Ok(false);
    };
    let charge = star_subscriptions::Charge {
        charge_id: &p.external_id,
        expires_at: recurrence.expires_at(),
        paid_at: p.paid_at,
    };
    star_subscriptions::refused(tx, locked.order.id, charge, reason, user).await?;
    Ok(true)
}

pub(super) const EARLIER_RENEWALS_SQL: &str = concat!(
    "SELECT ",
    payment_columns!(),
    ", payer, subscription_expires_at FROM payments
     WHERE order_id = $1 AND gateway = $2 AND renewal AND outcome = $3 AND reason = $4
     ORDER BY paid_at, id"
);
pub(super) const REJUDGED_SQL: &str = "UPDATE payments
     SET outcome = $2, reason = $3, updated_at = statement_timestamp()
     WHERE id = $1";

/// When a first charge starts subscription `s`: the renewals of its order that arrived before
/// (stored `needs_review`, `unknown_subscription`: no subscription was known then — the first
/// charge's update came late, or only through the reconcile) are judged again, oldest first, as
/// renewals of `s`. One that passes now is applied in place (the same payment row, so a repeat
/// delivery or the reconcile still finds it stored and changes nothing) and extends the
/// membership; one that fails keeps `needs_review` with its new reason and stops the
/// subscription like any refused renewal. Returns the membership after the last one applied.
/// The caller holds the order's locks and has just applied the first charge; the renewals are
/// read without a row lock, since only the payment core writes a stored `needs_review` payment,
/// under its order's lock.
pub(super) async fn rejudge_renewals(
    tx: &Transaction<'_>,
    locked: &LockedOrder,
    s: StarSubscription,
) -> Result<Option<Membership>, ApiError> {
    let rows = db::rows(
        tx,
        EARLIER_RENEWALS_SQL,
        &[
            &locked.order.id,
            &Gateway::TelegramStars,
            &Outcome::NeedsReview,
            &Reason::UnknownSubscription,
        ],
    )
    .await?;
    let mut subscription = s;
    let mut membership = None;
    // The first charge marked the order paid; the locked copy predates that.
    let mut paid = locked.clone();
    paid.order.status = orders::Status::Paid;
    for row in rows {
        let earlier = Payment::from_row(&row)?;
        let payer: Option<String> = row.try_get("payer")?;
        let p = NormalizedPayment {
            gateway: earlier.gateway.clone(),
            external_id: earlier.external_id.clone(),
            order_reference: earlier.order_reference.clone().unwrap_or_default(),
            amount_minor: earlier.amount_minor,
            currency: earlier.currency.clone(),
            paid_at: earlier.paid_at,
            payer_telegram_id: payer.and_then(|p| p.parse().ok()),
        };
        let expires_at: Option<DateTime<Utc>> = row.try_get("subscription_expires_at")?;
        let reason = check_renewal(tx, &p, &paid, Some(&subscription)).await?;
        let outcome = if reason.is_some() {
            Outcome::NeedsReview
        } else {
            Outcome::Applied
        };
        db::execute(tx, REJUDGED_SQL, &[&earlier.id, &outcome, &reason]).await?;
        tracing::info!(
            payment_id = earlier.id,
            subscription_id = subscription.id,
            outcome = %outcome,
            reason = ?reason.map(Reason::as_str),
            "renewal that arrived before its subscription judged again"
        );
        if let Some(reason) = reason {
            if subscription.is_active() && reason != Reason::PayerMismatch {
                subscription = star_subscriptions::stop(tx, &subscription, reason).await?;
            }
            continue;
        }
        let charge = star_subscriptions::Charge {
            charge_id: &p.external_id,
            expires_at,
            paid_at: p.paid_at,
        };
        let renews_at = star_subscriptions::renewed(tx, subscription.id, charge).await?;
        subscription.expires_at = renews_at;
        let m = extend_every_channel(
            tx,
            locked,
            Cause::Payment(earlier.id),
            Some(slack_after(renews_at)),
        )
        .await?;
        earn(tx, &earlier, locked).await?;
        membership = Some(m);
    }
    Ok(membership)
}

/// Whether a charge is a subscription's renewal: the door says so, or (door unknown) it is a
/// Stars charge of a paid order whose subscription another charge started.
pub(super) fn is_renewal(
    p: &NormalizedPayment,
    recurrence: Recurrence,
    locked: Option<&LockedOrder>,
    subscription: Option<&StarSubscription>,
) -> bool {
    match recurrence {
        Recurrence::Renewal(_) => true,
        Recurrence::First(_) | Recurrence::OneOff => false,
        Recurrence::Unknown => {
            p.gateway == Gateway::TelegramStars
                && locked.is_some_and(|l| l.order.status == orders::Status::Paid)
                && subscription.is_some_and(|s| {
                    s.charge_id != p.external_id
                        && p.paid_at
                            >= s.expires_at
                                - chrono::Duration::seconds(star_subscriptions::PERIOD_SECS / 2)
                })
        }
    }
}

/// Whether an applied first payment starts a Stars subscription: the door says so, or (door
/// unknown, e.g. the reconcile of a missed update) it is a Stars payment of a `recurring`
/// plan, whose invoices are subscription links.
pub(super) fn starts_subscription(
    p: &NormalizedPayment,
    recurrence: Recurrence,
    locked: &LockedOrder,
) -> bool {
    match recurrence {
        Recurrence::First(_) => true,
        Recurrence::OneOff | Recurrence::Renewal(_) => false,
        Recurrence::Unknown if p.gateway != Gateway::TelegramStars => false,
        Recurrence::Unknown => locked.plan.recurring,
    }
}
