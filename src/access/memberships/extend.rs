//! Grants and extensions, one statement each (`extend.sql`).

use super::*;

/// [`extend()`] in one statement (one round trip): the membership as it was (`b`), the upsert
/// (`m`), its event (`ev`) and its effect (`fx`), returning the membership, the event's id and
/// the status and `expires_at` it had before. `$3` is the term in days, NULL for lifetime
/// (`'infinity'`). The effect is a receipt when the membership held access by its status
/// before, else a grant ([`effect_of_extension`]) — and none when a membership that held access
/// ends no later than before (a lifetime one extended again: `infinity + days` is `infinity`);
/// its row is built as `changes::enqueue_effect` builds one (same payload, key, and channel and
/// subscriber locks).
///
/// The subscriber row is key-share locked first (`sub`, which the upsert reads its row from,
/// so the lock is taken before the membership row's): an upsert that updates an existing row
/// makes no foreign-key check, so nothing else would make it wait for a concurrent change of
/// the subscriber's `telegram_user_id` (which locks the row `FOR UPDATE`, then refuses while a
/// membership holds access). Either the change waits for this transaction and then sees the
/// membership live, or this statement waits for the change and its effect names the new
/// account (a locking read returns the newest row version). A subscriber deleted meanwhile
/// leaves `sub` empty and the statement writes nothing.
///
/// `b` is a plain read: the caller holds the pair's advisory lock, which every writer of this
/// membership takes first, so the statement's snapshot (taken after that lock) shows the row as
/// the upsert finds it. The upsert locks the row, last in the lock order.
const EXTEND_SQL: &str = include_str!("extend.sql");

/// Grants or extends: `expires_at = GREATEST(current, database now) + days`, `status = active`
/// (a lifetime membership stays lifetime: `infinity + days` is `infinity`).
/// The term starts when the change is applied, never at a time the caller was told about (a
/// gateway's `paid_at`): a delayed delivery must not eat days of the term, and a live membership
/// still extends from its own expiry. Writes the event and enqueues its effect, as
/// [`record_event`] does, in the same statement as the upsert ([`EXTEND_SQL`]). Returns the
/// membership and whether it was created. The caller holds the pair's advisory lock.
pub async fn extend(
    tx: &Transaction<'_>,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
    days: i32,
    cause: Cause,
) -> Result<(Membership, bool), ApiError> {
    extend_at_least(tx, subscriber_id, channel_id, Term::Days(days), cause, None).await
}

/// What [`EXTEND_SQL`]'s parameters `$1`–`$11` are bound to, for one extension (and, in the same
/// places, those of the payment core's fast write, `payments/fast_write.sql`).
pub(crate) struct Extension {
    /// `$1`.
    subscriber_id: SubscriberId,
    /// `$2`.
    channel_id: ChannelId,
    /// `$3`: the term in days; NULL: lifetime.
    days: Option<i32>,
    /// `$4`: the status written.
    status: Status,
    /// `$5`: the event's cause.
    cause: EventCause,
    /// `$6`: the paying payment, if any.
    payment_id: Option<i64>,
    /// `$7`: the effect when the membership held access before.
    receipt: Kind,
    /// `$8`: the effect when it did not.
    grant: Kind,
    /// `$9`: the key prefix of `receipt`.
    receipt_prefix: &'static str,
    /// `$10`: the key prefix of `grant`.
    grant_prefix: &'static str,
    /// `$11`: the earliest end of the new term, if any.
    at_least: Option<DateTime<Utc>>,
}

impl Extension {
    /// The extension of the pair's membership by `term` for `cause`, ending no earlier than
    /// `at_least` (see [`extend_at_least`]); a term of less than a day is refused.
    pub(crate) fn new(
        subscriber_id: SubscriberId,
        channel_id: ChannelId,
        term: Term,
        cause: Cause,
        at_least: Option<DateTime<Utc>>,
    ) -> Result<Extension, ApiError> {
        let days = match term {
            Term::Days(days) if days < 1 => {
                return Err(ApiError::internal(
                    "a membership is extended by at least one day",
                ));
            }
            Term::Days(days) => Some(days),
            Term::Lifetime => None,
        };
        let (cause, payment_id) = cause.parts();
        // The statement picks one of the two when the term ends later (or the membership did
        // not hold access), and none otherwise ([`effect_of_extension`]).
        let later = |held| effect_of_extension(held, true).expect("a later term is told");
        let (receipt, grant) = (later(true), later(false));
        let prefix = |kind| effects::transition_prefix(kind).expect("a transition's effect");
        Ok(Extension {
            subscriber_id,
            channel_id,
            days,
            status: Status::Active,
            cause,
            payment_id,
            receipt,
            grant,
            receipt_prefix: prefix(receipt),
            grant_prefix: prefix(grant),
            at_least,
        })
    }

    /// The values of `$1`–`$11`, in order.
    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 11] {
        [
            &self.subscriber_id,
            &self.channel_id,
            &self.days,
            &self.status,
            &self.cause,
            &self.payment_id,
            &self.receipt,
            &self.grant,
            &self.receipt_prefix,
            &self.grant_prefix,
            &self.at_least,
        ]
    }
}

/// [`extend()`] by `term`, with the new term ending no earlier than `at_least` when given: a Stars
/// subscription charge's membership lasts until the subscription's next renewal plus a slack
/// (`payments::star_subscriptions::SLACK_SECS`), however late the charge is applied.
/// [`Term::Lifetime`] sets `expires_at = 'infinity'` and `status = active` (`at_least` is moot),
/// with its event and its grant or receipt like any extension; extending a membership that is
/// already lifetime and holds access changes nothing but its status and `updated_at`, and
/// writes its event with no effect (there is nothing new to tell).
pub async fn extend_at_least(
    tx: &Transaction<'_>,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
    term: Term,
    cause: Cause,
    at_least: Option<DateTime<Utc>>,
) -> Result<(Membership, bool), ApiError> {
    let extension = Extension::new(subscriber_id, channel_id, term, cause, at_least)?;
    let row = db::row_opt(tx, EXTEND_SQL, &extension.params()).await?;
    // No row: the subscriber was deleted after the caller looked it up.
    let row = row.ok_or(ApiError::NotFound("subscriber"))?;
    let after = Membership::from_row(&row)?;
    let status_before: Option<Status> = row.try_get("status_before")?;
    // The kind the statement chose, against the rule every other change follows (checked in
    // debug builds, so by every test that extends a membership; release builds skip the copy).
    #[cfg(debug_assertions)]
    {
        let before = match status_before {
            Some(status) => Some(Membership {
                status,
                expires_at: row.try_get("expires_at_before")?,
                ..after.clone()
            }),
            None => None,
        };
        debug_assert_eq!(
            effect_of_change(before.as_ref(), &after),
            effect_of_extension(
                before.as_ref().is_some_and(|b| b.status.holds_access()),
                before
                    .as_ref()
                    .is_none_or(|b| after.expires_at > b.expires_at)
            )
        );
    }
    Ok((after, status_before.is_none()))
}

/// The effect an extension asks for, decided by whether the membership held access by its
/// status before ([`Status::holds_access`]) and whether its term now ends later:
/// [`effect_of_change`] of a change to `active`. A grant when the membership is new or ended; a
/// receipt when its member is extended — every finite expiry ends later, since an extension
/// adds at least one day to `GREATEST(expiry, now)` or makes it lifetime; nothing when it was
/// lifetime already (the SQL of [`EXTEND_SQL`] makes the same choice).
pub(super) fn effect_of_extension(held_access: bool, ends_later: bool) -> Option<Kind> {
    match (held_access, ends_later) {
        (false, _) => Some(Kind::Grant),
        (true, true) => Some(Kind::RenewalReceipt),
        (true, false) => None,
    }
}
