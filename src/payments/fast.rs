//! The fast path of a new payment: the common case of [`super::core`] in two round trips
//! instead of six, with the same checks, locks and writes.
//!
//! The common case is a payment that passes every check on an order of a plan of one channel
//! without a seat limit and without a promo code, of a buyer no affiliate referred (while the
//! referral program is on: such a payment earns a commission line, [`crate::referrals`]),
//! through a door that names no payer and no place in a Stars subscription (doors 1, 2 and 4).
//! For it:
//!
//! 1. **Read, without locks** ([`READ_SQL`], one statement outside a transaction): the order by
//!    its reference with everything the locked read of the lock order reads
//!    (`orders/lock_order.sql`, the same select list), the row version (`xmin`) of each row
//!    the checks read — the order, its channel, its plan, the pair's membership (or its
//!    absence) —, whether this (gateway, external_id) is stored already, and the new payment's
//!    id (`nextval` of the identity column's own sequence, inserted with `OVERRIDING SYSTEM
//!    VALUE`, so the write below can be one statement: the event and the effect name it).
//! 2. **Check in Rust**, with the payment core's own checks ([`super::core::check_order`]) on
//!    what was read. Anything but a pass of the common case (a failed check, a stored payment,
//!    an unknown order, a bundle, a seat limit, a promo code, a Stars charge) leaves the fast
//!    path here: the payment takes the locked path, which decides and stores it as it always
//!    has. A stored payment is answered from the stored row, as the locked path does.
//! 3. **Write, verified under the locks** ([`WRITE_SQL`]): `BEGIN`, the pair's advisory lock,
//!    the write, the fiscal receipt the payment owes ([`receipts::SALE_SQL`], which finds
//!    nothing to do when the write wrote nothing) and `COMMIT`, sent in one pipeline on a pooled connection (one network round
//!    trip). The write is one statement: it takes the rest of the locks
//!    (`docs/locking.md`) as a locked extension does
//!    (`access/memberships/extend.sql`) and writes the payment, the paid order, the
//!    membership, its event and its grant or receipt — only if every row version the checks
//!    read is still the current one (and the membership still absent if it was), and the buyer
//!    still unreferred. Otherwise it
//!    writes nothing, the empty transaction commits, and the payment takes the locked path,
//!    which decides it from the rows as they are now. Every later expression of the statement
//!    reads its rows from the one before, so it writes all of it or nothing.
//!
//! **Why the pair lock is a statement of its own.** A statement's snapshot is taken when it
//! starts, before the locks it waits for; only rows it locks itself are read again at their
//! newest version. The membership is read, not locked, before it is written (`b` in
//! `fast_write.sql`), so a membership another payment changed and committed while
//! this one waited for the pair lock would be judged from its old version. With the lock taken
//! by the statement before, the write's snapshot is taken after the lock is granted, when every
//! writer of the pair has committed — as on the locked path.
//!
//! **Exactly once.** The write's payment insert keeps `ON CONFLICT (gateway, external_id) DO
//! NOTHING`: of any number of deliveries, on either path, one inserts. A delivery that finds the
//! payment stored by then writes nothing (the rest of the statement reads from the insert) and
//! takes the locked path, which answers with the stored row. A refund the gateway reported
//! before its payment is such a stored row ([`at_gateway`](super::refunds::at_gateway)): the read finds it, or
//! the write finds the order it marked paid changed (or the key taken), so the payment is a
//! duplicate on both paths and grants nothing.
//!
//! **Cancellation.** The five messages are handed to the connection in one poll, before
//! anything is awaited, and the connection sends all of them: a request dropped after that
//! (its client gone) still ends its transaction with `COMMIT`, so no connection goes back to
//! the pool inside a transaction. A request dropped before sent nothing.

use std::future::Future;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use futures::future::join5;
use tokio_postgres::error::SqlState;

use super::{
    core::{self, Applied, Gateway, NormalizedPayment, Outcome, Payment, Recurrence},
    receipts,
};
use crate::{
    access::memberships::{Cause, Extension, Membership, Term},
    common::error::ApiError,
    db::{self, FromRow},
    orders::seats,
};

/// Step 1: the order named by the reference (`$1`) as the checks see it (the select list of the
/// lock order's locked read, `orders/lock_order.sql`), the versions of the rows they read,
/// whether the delivery's (gateway `$2`, external id `$3`) is stored, and a new payment id when
/// it is not. No row: no such order.
pub(crate) const READ_SQL: &str = include_str!("fast_read.sql");

/// Step 3's statement, bound from [`Write::params`]. `fresh` locks the order and the channel in
/// the lock order, each only as the version read (a row locked after a concurrent change is read
/// again at its newest version, so a changed row drops out here), and finds the plan and the
/// membership as read; the payment is inserted only from `fresh`, the order marked paid and the
/// membership extended (as `access/memberships/extend.sql` extends one) only from the inserted
/// payment. One row (the membership, with the payment's `paid_at` and `created_at`) when it
/// wrote, none when it wrote nothing.
pub(crate) const WRITE_SQL: &str = include_str!("fast_write.sql");

/// What [`WRITE_SQL`]'s parameters are bound to.
struct Write<'a> {
    /// `$1`–`$11`: the extension's ([`Extension::params`]; `$6` the new payment's id).
    extension: &'a Extension,
    /// `$12`, `$13`, `$14`: the delivery's gateway, external id and order reference.
    payment: &'a NormalizedPayment,
    /// `$15`: the order's id.
    order_id: &'a i64,
    /// `$16`, `$17`, `$18`: the delivery's amount, currency and `paid_at` (in `payment`).
    /// `$19`: the outcome stored.
    outcome: &'a Outcome,
    /// `$20`–`$24`: the versions read (the order's, the channel's, the plan's id and its
    /// version, the membership's: NULL for none).
    read: &'a Read,
}

impl Write<'_> {
    /// The values of `$1`–`$24`, in order.
    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 24] {
        let [s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11] = self.extension.params();
        let (p, read) = (self.payment, self.read);
        [
            s1,
            s2,
            s3,
            s4,
            s5,
            s6,
            s7,
            s8,
            s9,
            s10,
            s11,
            &p.gateway,
            &p.external_id,
            &p.order_reference,
            self.order_id,
            &p.amount_minor,
            &p.currency,
            &p.paid_at,
            self.outcome,
            &read.order_version,
            &read.channel_version,
            &read.order.plan.id,
            &read.plan_version,
            &read.membership_version,
        ]
    }
}

const BEGIN_SQL: &str = "BEGIN";
const COMMIT_SQL: &str = "COMMIT";

/// The read, the pair lock, the write and the receipt, named (see
/// [`core::new_payment_statements`]).
pub(super) fn statements() -> [(&'static str, &'static str); 4] {
    [
        ("read", READ_SQL),
        ("lock_pair", db::LOCK_PAIR_SQL),
        ("write", WRITE_SQL),
        ("receipt", receipts::SALE_SQL),
    ]
}

/// What step 1 read that the write must find unchanged.
struct Read {
    order: seats::LockedOrder,
    order_version: String,
    channel_version: String,
    plan_version: String,
    membership_version: Option<String>,
    payment_id: i64,
}

/// What the fast path did.
pub(super) enum Fast {
    /// Done: applied by the fast path, or a stored payment answered.
    Done(Box<Applied>),
    /// Not the common case, or something changed since the read: the locked path decides.
    Locked,
}

/// Whether the door's delivery can be the common case at all (before reading anything).
fn door_allows(p: &NormalizedPayment, recurrence: Recurrence) -> bool {
    // A Crypto Pay payment is checked against its invoice's asset and amount, which the fast
    // path's read does not carry.
    p.gateway != Gateway::TelegramStars
        && p.gateway != Gateway::CryptoPay
        && recurrence == Recurrence::Unknown
        && p.payer_telegram_id.is_none()
}

/// Runs the fast path for `p`; `between` runs after the read and before the write (tests use
/// it to change rows in between; `None` in the service).
pub(super) async fn apply<F>(
    pool: &Pool,
    p: &NormalizedPayment,
    recurrence: Recurrence,
    between: Option<F>,
) -> Result<Fast, ApiError>
where
    F: Future<Output = ()>,
{
    if !door_allows(p, recurrence) {
        return Ok(Fast::Locked);
    }
    let client = pool.get().await?;
    let result = read_and_write(&client, p, between).await;
    db::discard_if_lost(client, &result);
    result
}

async fn read_and_write<F>(
    client: &deadpool_postgres::Object,
    p: &NormalizedPayment,
    between: Option<F>,
) -> Result<Fast, ApiError>
where
    F: Future<Output = ()>,
{
    let Some(row) = db::row_opt(
        client,
        READ_SQL,
        &[&p.order_reference, &p.gateway, &p.external_id],
    )
    .await?
    else {
        return Ok(Fast::Locked);
    };
    if row.try_get::<_, bool>("stored")? {
        return Ok(match core::stored(client, p).await? {
            Some(applied) => Fast::Done(Box::new(applied)),
            None => Fast::Locked,
        });
    }
    let Some(order) = seats::unlocked_of_one_channel(&row)? else {
        return Ok(Fast::Locked);
    };
    let read = Read {
        order,
        order_version: row.try_get("order_version")?,
        channel_version: row.try_get("channel_version")?,
        plan_version: row.try_get("plan_version")?,
        membership_version: row.try_get("membership_version")?,
        payment_id: row.try_get("new_payment_id")?,
    };
    // A referred buyer's payment earns its affiliate a line, which the locked path writes.
    if row.try_get::<_, bool>("referred")? || !is_common_case(p, &read.order) {
        return Ok(Fast::Locked);
    }
    if let Some(between) = between {
        between.await;
    }
    write(client, p, &read).await
}

/// The common case on the order as read: every check passes (the payment core's
/// [`core::check_order`]: not cancelled, not paid, the money right, the channel active, no
/// lifetime access held), no promo code and no seat limit (whose checks read more rows), and a
/// term the extension accepts.
fn is_common_case(p: &NormalizedPayment, l: &seats::LockedOrder) -> bool {
    core::check_order(p, l, Some(&l.order.price())).is_none()
        && l.order.promo_code_id.is_none()
        && l.channels.iter().all(|c| c.terms.seat_limit.is_none())
        && !matches!(l.plan.term(), Term::Days(days) if days < 1)
}

/// Step 3: `BEGIN`, the pair lock, the verified write and `COMMIT` in one pipeline.
async fn write(
    client: &deadpool_postgres::Object,
    p: &NormalizedPayment,
    read: &Read,
) -> Result<Fast, ApiError> {
    let o = &read.order.order;
    let extension = Extension::new(
        o.subscriber(),
        o.channel(),
        read.order.plan.term(),
        Cause::Payment(read.payment_id),
        None,
    )?;
    let outcome = Outcome::Applied;
    let write = Write {
        extension: &extension,
        payment: p,
        order_id: &o.id,
        outcome: &outcome,
        read,
    };
    let params = write.params();
    // Prepared (or found prepared) before anything is sent: a statement that still had to be
    // prepared would send its messages after the `COMMIT`, outside the transaction.
    let lock = client.prepare_cached(db::LOCK_PAIR_SQL).await?;
    let statement = client.prepare_cached(WRITE_SQL).await?;
    let receipt = client.prepare_cached(receipts::SALE_SQL).await?;
    // `join5` polls the five in order, and each hands its messages to the connection on its
    // first poll: BEGIN, lock, write, receipt and COMMIT go out in this order, together. The
    // receipt statement reads the payment the write inserted (none when it wrote nothing) and
    // writes the fiscal receipt it owes, if any, in the same transaction.
    let (begin, locked, written, receipted, committed) = join5(
        client.batch_execute(BEGIN_SQL),
        client.execute(&lock, &[&o.subscriber(), &o.channel()]),
        client.query_opt(&statement, &params),
        client.execute(&receipt, &[&read.payment_id]),
        client.batch_execute(COMMIT_SQL),
    )
    .await;
    // The first error is the cause; the statements after it failed because of it, and the
    // `COMMIT` rolled the transaction back.
    let sent = begin
        .and(locked.map(|_| ()))
        .and(written)
        .and_then(|row| receipted.map(|_| row))
        .map_err(ApiError::from);
    let row = match (sent, committed) {
        (Ok(row), Ok(())) => row,
        // A deadlock or serialization failure: the locked path, which runs its transaction
        // again on these, decides instead.
        (Err(e), Ok(())) if e.is_retryable() => {
            tracing::info!(
                gateway = %p.gateway,
                external_id = %p.external_id,
                sqlstate = ?e.sql_state().map(SqlState::code),
                "payment's fast path aborted by contention; taking the locked path"
            );
            return Ok(Fast::Locked);
        }
        (Err(e), _) => return Err(e),
        (Ok(_), Err(e)) => return Err(e.into()),
    };
    let Some(row) = row else {
        tracing::debug!(
            gateway = %p.gateway,
            external_id = %p.external_id,
            order_id = o.id,
            "a row the payment's checks read changed before its write; taking the locked path"
        );
        return Ok(Fast::Locked);
    };
    db::announce_commit();
    let membership = Membership::from_row(&row)?;
    let paid_at: DateTime<Utc> = row.try_get("payment_paid_at")?;
    let created_at: DateTime<Utc> = row.try_get("payment_created_at")?;
    Ok(Fast::Done(Box::new(Applied {
        duplicate: false,
        payment: Payment {
            id: read.payment_id,
            gateway: p.gateway.clone(),
            external_id: p.external_id.clone(),
            order_reference: Some(p.order_reference.clone()),
            order_id: Some(o.id),
            subscriber_id: Some(o.subscriber_id),
            channel_id: Some(o.channel_id),
            amount_minor: p.amount_minor,
            currency: p.currency.clone(),
            // Only the Stars reconcile records a fee, on a stored payment.
            affiliate_fee_minor: 0,
            paid_at,
            outcome,
            reason: None,
            created_at,
        },
        membership: Some(membership),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast write extends a membership with the statement that extends one
    /// (`access/memberships/extend.sql`), word for word, but for its guard: it extends only
    /// when the payment was inserted.
    #[test]
    fn the_fast_write_extends_as_the_extension_does() {
        let extend = include_str!("../access/memberships/extend.sql");
        let start = extend.find("sub AS (").unwrap();
        let end = extend.find("FOR KEY SHARE OF c\n)").unwrap();
        let ctes =
            extend[start..end].replace("AND (true)", "AND (EXISTS (SELECT 1 FROM inserted))");
        assert_eq!(
            ctes.matches("AND (EXISTS (SELECT 1 FROM inserted))")
                .count(),
            1
        );
        assert!(WRITE_SQL.contains(&ctes), "{ctes}");
    }

    fn delivered(gateway: &str, payer: Option<i64>) -> NormalizedPayment {
        NormalizedPayment {
            gateway: gateway.into(),
            external_id: "pay_1".into(),
            order_reference: "ord_a".into(),
            amount_minor: 100,
            currency: "UAH".into(),
            paid_at: Utc::now(),
            payer_telegram_id: payer,
        }
    }

    #[test]
    fn only_deliveries_without_a_payer_or_a_subscription_may_take_the_fast_path() {
        assert!(door_allows(&delivered("acme", None), Recurrence::Unknown));
        assert!(door_allows(
            &delivered("wayforpay", None),
            Recurrence::Unknown
        ));
        assert!(!door_allows(
            &delivered("acme", Some(5)),
            Recurrence::Unknown
        ));
        assert!(!door_allows(&delivered("acme", None), Recurrence::OneOff));
        assert!(!door_allows(
            &delivered("telegram_stars", None),
            Recurrence::Unknown
        ));
        assert!(!door_allows(
            &delivered("telegram_stars", Some(5)),
            Recurrence::First(None)
        ));
    }
}
