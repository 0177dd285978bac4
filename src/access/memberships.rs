//! Memberships: the row that says who may be in which channel until when. This module is the
//! one home of membership reads and writes — grants and extensions (payments and staff grants,
//! [`extend()`]), staff corrections ([`write_correction`]), what a payment refunded at the gateway
//! bought taken back ([`take_back`]), deletions ([`delete`]), the reads of the staff API, the
//! payment core, the seat rule, join requests and the effects worker — and of
//! the events and Telegram effects of every change ([`record_event`]). The one exception is the
//! sweep's batch write, a single statement that writes its transitions, their events and their
//! effects together (`crate::access::sweep::apply_batch`); it selects its rows with
//! [`holds_access_sql!`] like everything here.
//!
//! **Live.** A membership is *live* when its status is `active` or `grace` and database time is
//! before `expires_at` plus the channel's grace period ([`live_sql!`], [`Membership::is_live_at`]).
//! It is the one test of "may this person be in the channel now", used by the seat rule (seats
//! taken, and whether a buyer is already a member) and by join-request approval (the door and
//! the worker): the sweep runs only now and then, and a membership it has not yet expired must
//! neither let a former member back in nor keep a seat. The status half alone
//! ([`Status::holds_access`], [`holds_access_sql!`]) says something else: the record has not been
//! ended yet, so its member was let in and no revoke has been decided. Whatever must not lose a
//! revoke uses it — the sweep's candidates, the revoke of a deleted membership, the refusal to
//! change a subscriber's `telegram_user_id` or a channel's chat while such a membership exists,
//! the effect a change asks for, the worker's "skip this revoke, the member is back" check
//! (asked of the revoke's own chat and Telegram account).
//!
//! **Lifetime.** A lifetime membership has `expires_at = 'infinity'` ([`Expiry::Never`]; a grant
//! of [`Term::Lifetime`]). Every SQL test of time already handles it — it is never `<=` a real
//! time (the sweep and reminders never select it) and `infinity + grace` is `infinity` (it is
//! live while its status holds access) — and every read into Rust goes through [`Expiry`].
//! Buying again what a buyer holds for life is refused ([`lifetime_in_every`]).
//!
//! Every change happens inside a transaction that already holds
//! `pg_advisory_xact_lock(subscriber_id, channel_id)` ([`crate::db::lock_pair`]) — and, on the
//! payment path, the order and channel locks after it — so this module takes only the last lock
//! of the order: the membership row itself. Each change writes one `membership_events` row in
//! the same transaction ([`record_event`]), the audit trail staff read and the one place later
//! side effects hang off: the Telegram effect of a change is decided here
//! ([`effect_of_change`]) and enqueued in the outbox ([`crate::outbox::effects`]) keyed on its event. A
//! deletion leaves no event (events go with the row), so [`delete`] enqueues the revoke of a
//! membership that still held access itself.

use chrono::{DateTime, Duration, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use serde::Serialize;

pub use crate::common::expiry::Expiry;
use crate::{
    common::{
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    db::{self, FromRow},
    outbox::effects::{self, Kind},
};

crate::text_enum! {
    /// A membership's status (API.md "Membership lifecycle"): `active` until `expires_at`,
    /// then `grace` for the channel's grace period, then `expired` — moved on by the sweep
    /// ([`crate::access::sweep::next_sweep_status`]), back to `active` by a payment or staff.
    pub enum Status {
        Active => "active",
        Grace => "grace",
        Expired => "expired",
    }
}

impl Status {
    /// Whether a membership with this status still holds access as far as its record says: it
    /// has not been ended (by the sweep or staff), so its member was let in and no revoke has
    /// been decided. The status half of "live" (see the module doc).
    pub fn holds_access(self) -> bool {
        matches!(self, Status::Active | Status::Grace)
    }
}

/// The select list of [`Membership`] (a macro, so SQL constants can splice it).
macro_rules! membership_columns {
    () => {
        "id, subscriber_id, channel_id, status, expires_at, created_at, updated_at"
    };
}

// The parts, declared after `membership_columns!` so they can splice it.
mod changes;
mod extend;
mod live;
mod reads;
mod reminders;

pub use changes::*;
pub use extend::*;
pub(crate) use live::{holds_access_sql, lifetime_channels_sql, live_sql};
pub use reads::*;
pub use reminders::*;

/// A membership as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 1, "subscriber_id": 1, "channel_id": 1, "status": "active",
    "expires_at": "2025-01-31T10:00:00Z", "created_at": "2025-01-01T10:00:00Z",
    "updated_at": "2025-01-01T10:00:00Z"}))]
pub struct Membership {
    pub id: i64,
    pub subscriber_id: i32,
    pub channel_id: i32,
    pub status: Status,
    /// When the term ends; `"infinity"` for lifetime access.
    pub expires_at: Expiry,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

crate::from_row!(Membership [membership_columns!()] {
    id,
    subscriber_id,
    channel_id,
    status,
    expires_at,
    created_at,
    updated_at,
});

impl Membership {
    /// Whether the membership is live at `now` in a channel with `grace_period_days` (the Rust
    /// twin of [`live_sql!`]; a negative grace counts as zero; a lifetime one is live while its
    /// status holds access).
    pub fn is_live_at(&self, now: DateTime<Utc>, grace_period_days: i32) -> bool {
        let grace = Duration::days(i64::from(grace_period_days.max(0)));
        self.status.holds_access()
            && self.expires_at.at().is_none_or(|expires_at| {
                expires_at
                    .checked_add_signed(grace)
                    .is_none_or(|end| now < end)
            })
    }

    /// Whether this is lifetime access that still holds access: what buying again is refused
    /// for ([`lifetime_in_every`]).
    pub fn is_live_lifetime(&self) -> bool {
        self.status.holds_access() && self.expires_at.is_never()
    }
}

crate::text_enum! {
    /// Who made a change, as its `membership_events` row records it.
    pub enum EventCause {
        Payment => "payment",
        Sweep => "sweep",
        Staff => "staff",
        Trial => "trial",
        Promo => "promo",
        /// The payment that bought the term was refunded at the gateway.
        Refund => "refund",
        /// A buyer-referrer's reward days for a referred buyer's purchase.
        Referral => "referral",
        /// Those days taken back: the referred purchase was refunded.
        ReferralBack => "referral_back",
    }
}

/// Why a membership changed (the changes this module writes; the sweep writes its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Payment(i64),
    Staff,
    /// A trial plan's grant.
    Trial,
    /// A free order's grant (a 100 % promo code).
    Promo,
    /// The payment's refund at the gateway: what it bought taken back ([`take_back`]).
    Refund(i64),
    /// A buyer-referrer's reward days ([`extend()`]).
    Referral,
    /// Reward days taken back ([`take_back_days`]).
    ReferralBack,
}

impl Cause {
    fn parts(self) -> (EventCause, Option<i64>) {
        match self {
            Cause::Payment(id) => (EventCause::Payment, Some(id)),
            Cause::Staff => (EventCause::Staff, None),
            Cause::Trial => (EventCause::Trial, None),
            Cause::Promo => (EventCause::Promo, None),
            Cause::Refund(id) => (EventCause::Refund, Some(id)),
            Cause::Referral => (EventCause::Referral, None),
            Cause::ReferralBack => (EventCause::ReferralBack, None),
        }
    }
}

/// How long a grant lasts: days from `GREATEST(current expiry, database now)`, or for life
/// (`expires_at = 'infinity'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    Days(i32),
    Lifetime,
}

impl Term {
    /// A plan's term: `period_days`, or lifetime when it has none.
    pub fn of_period(period_days: Option<i32>) -> Term {
        period_days.map_or(Term::Lifetime, Term::Days)
    }
}

/// One change of a membership, as staff read its history.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = MembershipEvent)]
pub struct Event {
    pub id: i64,
    pub membership_id: i64,
    pub from_status: Option<Status>,
    pub to_status: Status,
    pub expires_at_before: Option<Expiry>,
    pub expires_at_after: Expiry,
    pub cause: EventCause,
    pub payment_id: Option<i64>,
    pub at: DateTime<Utc>,
}

crate::from_row!(Event ["id, membership_id, from_status, to_status, \
         expires_at_before, expires_at_after, cause, payment_id, at"] {
    id,
    membership_id,
    from_status,
    to_status,
    expires_at_before,
    expires_at_after,
    cause,
    payment_id,
    at,
});

const LOCK_SQL: &str = concat!(
    "SELECT ",
    membership_columns!(),
    " FROM memberships WHERE subscriber_id = $1 AND channel_id = $2 FOR UPDATE"
);
const LOCK_SUBSCRIBER_SQL: &str = "SELECT 1 FROM subscribers WHERE id = $1 FOR KEY SHARE";

/// Locks and reads the membership of (subscriber, channel), if there is one, after a key-share
/// lock of the subscriber row (before the membership's, as [`extend()`] takes it): the effect of
/// the change that follows names the subscriber's Telegram account, which then cannot change
/// until this transaction ends (see `changes::enqueue_effect`). The caller must already hold the
/// pair's advisory lock (and the channel's, [`crate::orders::seats::lock_channel_terms`]).
pub async fn lock(
    tx: &Transaction<'_>,
    subscriber_id: SubscriberId,
    channel_id: ChannelId,
) -> Result<Option<Membership>, ApiError> {
    db::execute(tx, LOCK_SUBSCRIBER_SQL, &[&subscriber_id]).await?;
    db::opt(tx, LOCK_SQL, &[&subscriber_id, &channel_id]).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole statements that judge access by status spell it as `holds_access_sql!` does.
    #[test]
    fn the_whole_statements_spell_holds_access_as_the_predicate_does() {
        let extension = include_str!("memberships/extend.sql");
        assert_eq!(
            extension
                .matches(concat!("WHEN ", holds_access_sql!("b"), " THEN"))
                .count(),
            2
        );
        assert!(extension.contains(concat!("NOT (", holds_access_sql!("b"), ")")));
        for order_terms in [
            include_str!("../orders/lock_order.sql"),
            include_str!("../payments/fast_read.sql"),
        ] {
            assert!(order_terms.contains(concat!(
                "AND ",
                holds_access_sql!("lm"),
                ") AS lifetime_channels"
            )));
        }
    }

    /// A subscriber's memberships are deleted as one membership is, but for which rows go.
    #[test]
    fn every_deletion_revokes_alike() {
        let one = include_str!("memberships/delete.sql");
        let all = include_str!("memberships/delete_of_subscriber.sql");
        let (which, which_all) = ("WHERE id = $1", "WHERE subscriber_id = $1");
        assert_eq!(one.matches(which).count(), 1);
        assert_eq!(one.replace(which, which_all), all);
    }

    fn m(status: &str, expires_in_days: i64) -> Membership {
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        Membership {
            id: 1,
            subscriber_id: 1,
            channel_id: 1,
            status: Status::parse(status).unwrap(),
            expires_at: Expiry::At(t0 + Duration::days(expires_in_days)),
            created_at: t0,
            updated_at: t0,
        }
    }

    fn lifetime(status: &str) -> Membership {
        Membership {
            expires_at: Expiry::Never,
            ..m(status, 0)
        }
    }

    #[test]
    fn an_extension_asks_for_the_effect_its_change_asks_for() {
        // Every extension by days ends at least a day after GREATEST(expiry, now) — before
        // expiry, in grace, long expired, and with an expiry far in the future — unless it was
        // lifetime (infinity + days = infinity); a lifetime one ends at infinity.
        let now = m("active", 0).expires_at;
        for before in [
            None,
            Some(m("active", 5)),
            Some(m("active", 400)),
            Some(m("grace", -1)),
            Some(m("expired", -90)),
            Some(m("expired", 3)),
            Some(lifetime("active")),
            Some(lifetime("grace")),
            Some(lifetime("expired")),
        ] {
            for term in [
                Term::Days(1),
                Term::Days(30),
                Term::Days(3660),
                Term::Lifetime,
            ] {
                let start = before.as_ref().map_or(now, |b| b.expires_at.max(now));
                let mut after = m("active", 0);
                after.expires_at = match (term, start) {
                    (Term::Days(days), Expiry::At(t)) => {
                        Expiry::At(t + Duration::days(days.into()))
                    }
                    (Term::Days(_), Expiry::Never) | (Term::Lifetime, _) => Expiry::Never,
                };
                let held = before.as_ref().is_some_and(|b| b.status.holds_access());
                let later = before
                    .as_ref()
                    .is_none_or(|b| after.expires_at > b.expires_at);
                assert_eq!(
                    effect_of_extension(held, later),
                    effect_of_change(before.as_ref(), &after),
                    "before {before:?}, {term:?}"
                );
                let was_lifetime = before.as_ref().is_some_and(Membership::is_live_lifetime);
                assert_eq!(
                    effect_of_extension(held, later).is_none(),
                    was_lifetime,
                    "only a live lifetime membership is told nothing: {before:?}, {term:?}"
                );
            }
        }
    }

    #[test]
    fn changes_map_to_effects() {
        use Kind::*;
        let cases: &[(Option<Membership>, Membership, Option<Kind>)] = &[
            (None, m("active", 30), Some(Grant)),
            (Some(m("expired", 0)), m("active", 30), Some(Grant)),
            (Some(m("active", 5)), m("active", 35), Some(RenewalReceipt)),
            (Some(m("grace", -1)), m("active", 29), Some(RenewalReceipt)),
            // A staff back-dating (or a no-op) is not a renewal.
            (Some(m("active", 30)), m("active", 1), None),
            (Some(m("active", 30)), m("active", 30), None),
            (Some(m("active", 30)), m("expired", 30), Some(Revoke)),
            (Some(m("grace", 0)), m("expired", 0), Some(Revoke)),
            (Some(m("active", 0)), m("grace", 0), Some(GraceNotice)),
            (Some(m("expired", 0)), m("expired", 5), None),
            (Some(m("expired", 0)), m("grace", 5), None),
            (None, m("expired", 0), None),
            // Lifetime: made lifetime is a renewal (or a grant), ending it a revoke.
            (
                Some(m("active", 30)),
                lifetime("active"),
                Some(RenewalReceipt),
            ),
            (Some(m("expired", 0)), lifetime("active"), Some(Grant)),
            (None, lifetime("active"), Some(Grant)),
            (Some(lifetime("active")), lifetime("active"), None),
            (Some(lifetime("active")), m("active", 30), None),
            (Some(lifetime("active")), lifetime("expired"), Some(Revoke)),
        ];
        for (before, after, want) in cases {
            assert_eq!(
                effect_of_change(before.as_ref(), after),
                *want,
                "{:?} → {}",
                before.as_ref().map(|b| b.status),
                after.status
            );
        }
    }

    #[test]
    fn live_needs_a_live_status_and_time_inside_term_plus_grace() {
        let t0 = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        let day = Duration::days(1);
        let active = m("active", 0); // expires at t0
        assert!(active.is_live_at(t0 - day, 0));
        assert!(!active.is_live_at(t0, 0), "no grace: over at expires_at");
        assert!(active.is_live_at(t0 + day, 2));
        assert!(
            !active.is_live_at(t0 + day * 2, 2),
            "over at expires_at + grace"
        );
        assert!(
            !active.is_live_at(t0 + day, -3),
            "a negative grace counts as zero"
        );
        let grace = m("grace", 0);
        assert!(grace.is_live_at(t0 + day, 2));
        assert!(
            !grace.is_live_at(t0 + day * 3, 2),
            "an unswept grace row past its window is not live"
        );
        let expired = m("expired", 30);
        assert!(!expired.is_live_at(t0, 0), "expired is never live");
        let forever = lifetime("active");
        assert!(
            forever.is_live_at(DateTime::<Utc>::MAX_UTC, 0),
            "lifetime is live"
        );
        assert!(lifetime("grace").is_live_at(t0, -3));
        assert!(
            !lifetime("expired").is_live_at(t0, 3),
            "an ended lifetime is not"
        );
        assert!(forever.is_live_lifetime() && !lifetime("expired").is_live_lifetime());
        assert!(!active.is_live_lifetime());
        for s in Status::ALL {
            assert_eq!(s.holds_access(), s != Status::Expired);
        }
    }

    #[test]
    fn the_live_fragment_is_the_status_half_and_the_time_half() {
        assert_eq!(holds_access_sql!("m"), "m.status <> 'expired'");
        assert_eq!(
            live_sql!("m", "c"),
            "m.status <> 'expired' AND statement_timestamp() < \
             m.expires_at + make_interval(days => c.grace_period_days)"
        );
        // The SQL names the one status that does not hold access.
        let ended: Vec<&str> = Status::ALL
            .iter()
            .filter(|s| !s.holds_access())
            .map(|s| s.as_str())
            .collect();
        assert_eq!(ended, ["expired"]);
        assert_eq!(Membership::COLUMNS, membership_columns!());
    }
}
