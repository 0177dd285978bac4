//! The commission ledger's writes (`commission_lines`): the line a payment earns and its
//! reversal.
//!
//! **Once per payment.** [`on_applied`] runs in the payment core's transaction of every applied
//! payment of an attributed buyer, whatever door brought it (the core's fast path leaves such
//! buyers to its locked path), after the payment row was inserted — which happens once per
//! (gateway, external id), however often the payment is delivered. The line's insert is keyed on
//! the payment too (`commission_lines_payment_key`: one earning line and one reversal per
//! payment, ever), so not even a second call could write a second line. A payment whose
//! transaction rolls back (a crash, a deadlock retried) takes its line with it.
//!
//! **Taken back once.** [`reverse`] runs in the transaction that takes a payment's access back
//! (a refund at the gateway, a dispute), which claims the payment's `applied` outcome first, so
//! it runs once per payment: a line not yet paid is simply `reversed`; a paid one gets a negative
//! `reversal` line, payable at once, which the next payout nets. It takes the affiliate's row
//! lock first, as a payout does (and the [`rebase`] after Telegram's fee), so a line is never
//! paid and reversed unpaid at once, nor changed under a payout that summed it.
//!
//! **The rule** ([`decide`], pure): the buyer's attribution (program on, affiliate active) earns
//! on a payment of money (never a trial, a 100 % code or a staff grant, which are no payments)
//! by an affiliate who is not the buyer: a **first** purchase of the channel within
//! `window_days` of the attribution, or a **renewal** within `renewal_months` of it when the
//! buyer's first purchase of that channel came after the click and within the window (a buyer
//! who had paid for the channel before the click is not a referral for it). The percent is the
//! plan's own rate, else the program's; the amount is that percent of the payment net of
//! Telegram's affiliate fee, rounded down to the minor unit (nothing when it rounds to zero). A
//! buyer-referrer with `buyer_reward_days` set earns days instead ([`super::rewards`]), for a
//! first purchase only.

use chrono::{DateTime, Duration, Months, Utc};
use deadpool_postgres::Transaction;

use super::{affiliates, program::Rates, rewards};
use crate::{
    common::{
        error::ApiError,
        ids::{ChannelId, SubscriberId},
    },
    db,
};

crate::text_enum! {
    /// What a line is.
    pub enum Kind {
        /// A referred buyer's first purchase of a channel.
        First => "first",
        /// A later purchase (a renewal) of the same channel.
        Renewal => "renewal",
        /// A paid line taken back (negative).
        Reversal => "reversal",
    }
}

crate::text_enum! {
    /// Where a line stands. Stored: `pending`, `paid` or `reversed`; a `pending` line whose
    /// `payable_at` has passed reads as `payable` (no job flips it).
    pub enum Status {
        /// Within the hold period.
        Pending => "pending",
        /// The hold is over; the next payout pays it.
        Payable => "payable",
        /// Paid by a payout.
        Paid => "paid",
        /// Taken back before it was paid.
        Reversed => "reversed",
    }
}

/// An applied payment, as the payment core hands it over.
#[derive(Debug, Clone)]
pub struct Paid {
    pub payment_id: i64,
    pub subscriber: SubscriberId,
    /// The order's own channel (a bundle's first).
    pub channel: ChannelId,
    pub plan_id: i64,
    pub amount_minor: i64,
    pub currency: String,
}

/// What the rule reads of the program, the buyer's attribution and their payments.
#[derive(Debug, Clone)]
pub struct Facts {
    pub window_days: i32,
    pub hold_days: i32,
    pub rates: Rates,
    pub renewal_months: i32,
    pub buyer_reward_days: Option<i32>,
    pub max_reward_days_per_month: Option<i32>,
    pub affiliate_id: i32,
    /// The affiliate's buyer, when it is a buyer-referrer.
    pub referrer: Option<i32>,
    pub attributed_at: DateTime<Utc>,
    /// When the buyer first paid for the channel before this payment (applied payments of
    /// money only).
    pub first_paid_at: Option<DateTime<Utc>>,
    /// Telegram's affiliate fee already recorded on the payment.
    pub fee_minor: i64,
    /// Database time.
    pub now: DateTime<Utc>,
}

/// What a payment earns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Earns {
    /// Nothing, and why.
    Nothing(&'static str),
    /// A commission line.
    Line {
        kind: Kind,
        percent: i32,
        base_minor: i64,
        amount_minor: i64,
        payable_at: DateTime<Utc>,
    },
    /// Reward days for the buyer-referrer.
    Days(i32),
}

/// The rule, on the facts read in the payment's transaction (see the module doc).
pub fn decide(f: &Facts, buyer: SubscriberId, amount_minor: i64) -> Earns {
    if amount_minor <= 0 {
        return Earns::Nothing("a free purchase earns nothing");
    }
    if f.referrer == Some(buyer.0) {
        return Earns::Nothing("a buyer is never their own referral");
    }
    let window_end = f.attributed_at + Duration::days(i64::from(f.window_days));
    let kind = match f.first_paid_at {
        None if f.now <= window_end => Kind::First,
        None => return Earns::Nothing("the attribution's window has passed"),
        Some(first) if first < f.attributed_at => {
            return Earns::Nothing("the buyer paid for the channel before the click");
        }
        Some(first) if first > window_end => {
            return Earns::Nothing("the buyer's first purchase came after the window");
        }
        Some(_) => {
            let months = u32::try_from(f.renewal_months).unwrap_or(0);
            match f.attributed_at.checked_add_months(Months::new(months)) {
                Some(end) if f.now <= end => Kind::Renewal,
                _ => return Earns::Nothing("renewals no longer earn"),
            }
        }
    };
    if let (Some(_), Some(days)) = (f.referrer, f.buyer_reward_days) {
        return match kind {
            Kind::First => Earns::Days(days),
            _ => Earns::Nothing("a buyer-referrer's renewals earn nothing"),
        };
    }
    let percent = match kind {
        Kind::First => f.rates.first_percent,
        _ => f.rates.renewal_percent,
    };
    let base_minor = amount_minor - f.fee_minor;
    let amount = base_minor.saturating_mul(i64::from(percent)) / 100;
    if base_minor <= 0 || amount <= 0 {
        return Earns::Nothing("the commission rounds to zero");
    }
    Earns::Line {
        kind,
        percent,
        base_minor,
        amount_minor: amount,
        payable_at: f.now + Duration::days(i64::from(f.hold_days)),
    }
}

/// The facts of [`decide`] for payment `$3` of buyer `$1`, channel `$2`, plan `$4`: no row when
/// the program is off or the buyer is not attributed to an active affiliate.
const FACTS_SQL: &str = "SELECT rp.window_days, rp.hold_days, rp.renewal_months,
            rp.buyer_reward_days, rp.max_reward_days_per_month,
            COALESCE(pr.first_percent, rp.first_percent) AS first_percent,
            COALESCE(pr.renewal_percent, rp.renewal_percent) AS renewal_percent,
            a.affiliate_id, f.subscriber_id AS referrer_id, a.attributed_at,
            (SELECT min(q.created_at) FROM payments q
             WHERE q.subscriber_id = $1 AND q.channel_id = $2 AND q.id <> $3
               AND q.outcome = 'applied' AND q.amount_minor > 0) AS first_paid_at,
            COALESCE((SELECT p.affiliate_fee_minor FROM payments p WHERE p.id = $3), 0)
                AS fee_minor,
            statement_timestamp() AS now
     FROM referral_program rp
     JOIN referral_attributions a ON a.subscriber_id = $1
     JOIN affiliates f ON f.id = a.affiliate_id AND f.active
     LEFT JOIN plan_referral_rates pr ON pr.plan_id = $4
     WHERE rp.enabled";

crate::from_row!(Facts ["window_days, hold_days, renewal_months, buyer_reward_days, \
    max_reward_days_per_month, first_percent, renewal_percent, affiliate_id, referrer_id, \
    attributed_at, first_paid_at, fee_minor, now"] {
    window_days,
    hold_days,
    rates = Rates,
    renewal_months,
    buyer_reward_days,
    max_reward_days_per_month,
    affiliate_id,
    referrer: "referrer_id",
    attributed_at,
    first_paid_at,
    fee_minor,
    now,
});

const INSERT_SQL: &str = "INSERT INTO commission_lines
         (affiliate_id, payment_id, subscriber_id, kind, amount_minor, currency, percent,
          base_minor, payable_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (payment_id, (kind = 'reversal')) DO NOTHING
     RETURNING id";

/// In the payment core's transaction of applied payment `p`: the line (or reward days) it
/// earns, written once. Returns what it earned.
pub async fn on_applied(tx: &Transaction<'_>, p: &Paid) -> Result<Earns, ApiError> {
    let Some(f) = db::opt::<Facts>(
        tx,
        FACTS_SQL,
        &[&p.subscriber, &p.channel, &p.payment_id, &p.plan_id],
    )
    .await?
    else {
        return Ok(Earns::Nothing("not a referral"));
    };
    let earns = decide(&f, p.subscriber, p.amount_minor);
    match &earns {
        Earns::Nothing(why) => tracing::debug!(
            payment_id = p.payment_id,
            affiliate_id = f.affiliate_id,
            why,
            "referred payment earns no commission"
        ),
        Earns::Line {
            kind,
            percent,
            base_minor,
            amount_minor,
            payable_at,
        } => {
            let id: Option<i64> = db::row_opt(
                tx,
                INSERT_SQL,
                &[
                    &f.affiliate_id,
                    &p.payment_id,
                    &p.subscriber,
                    kind,
                    amount_minor,
                    &p.currency,
                    percent,
                    base_minor,
                    payable_at,
                ],
            )
            .await?
            .map(|row| row.try_get("id"))
            .transpose()?;
            tracing::info!(
                payment_id = p.payment_id,
                affiliate_id = f.affiliate_id,
                line_id = ?id,
                kind = kind.as_str(),
                amount_minor,
                currency = %p.currency,
                "commission line written"
            );
        }
        Earns::Days(days) => {
            let referrer = f
                .referrer
                .ok_or_else(|| ApiError::internal("reward days without a referrer"))?;
            rewards::owe(
                tx,
                &rewards::Owed {
                    affiliate_id: f.affiliate_id,
                    referrer: SubscriberId(referrer),
                    channel: p.channel,
                    payment_id: p.payment_id,
                    days: *days,
                    cap: f.max_reward_days_per_month,
                },
            )
            .await?;
        }
    }
    Ok(earns)
}

const LINE_AFFILIATE_SQL: &str = "SELECT affiliate_id FROM commission_lines
     WHERE payment_id = $1 AND kind <> 'reversal'";

/// Under the affiliate's lock: an unpaid line is reversed; a paid one gets its negative
/// `reversal` line (payable now), at most once.
const REVERSE_SQL: &str = "WITH l AS (
         SELECT id, affiliate_id, payment_id, subscriber_id, amount_minor, currency, percent,
                base_minor, status
         FROM commission_lines WHERE payment_id = $1 AND kind <> 'reversal' FOR UPDATE
     ), unpaid AS (
         UPDATE commission_lines c
         SET status = 'reversed', reversed_at = statement_timestamp()
         FROM l WHERE c.id = l.id AND l.status = 'pending'
         RETURNING c.id
     ), back AS (
         INSERT INTO commission_lines
             (affiliate_id, payment_id, subscriber_id, kind, amount_minor, currency, percent,
              base_minor, payable_at)
         SELECT affiliate_id, payment_id, subscriber_id, 'reversal', -amount_minor, currency,
                percent, base_minor, statement_timestamp()
         FROM l WHERE l.status = 'paid'
         ON CONFLICT (payment_id, (kind = 'reversal')) DO NOTHING
         RETURNING id
     )
     SELECT (SELECT count(*) FROM unpaid) AS unpaid, (SELECT count(*) FROM back) AS back";

/// Takes the lock of the affiliate of payment `payment_id`'s earning line (as payouts take it)
/// and returns that affiliate; `None` when the payment has no line.
async fn lock_affiliate_of_line(
    tx: &Transaction<'_>,
    payment_id: i64,
) -> Result<Option<i32>, ApiError> {
    let Some(line) = db::row_opt(tx, LINE_AFFILIATE_SQL, &[&payment_id]).await? else {
        return Ok(None);
    };
    let affiliate_id: i32 = line.try_get("affiliate_id")?;
    affiliates::lock(tx, affiliate_id).await?;
    Ok(Some(affiliate_id))
}

/// What [`reverse`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reversed {
    /// An unpaid line was reversed.
    pub unpaid: bool,
    /// A paid line got its negative reversal line.
    pub paid_back: bool,
    /// Reward days were reversed.
    pub reward: bool,
}

/// In the transaction that takes payment `payment_id`'s access back (a refund, a dispute),
/// after it claimed the payment: its line and its reward days, reversed once.
pub async fn reverse(tx: &Transaction<'_>, payment_id: i64) -> Result<Reversed, ApiError> {
    let mut done = Reversed {
        reward: rewards::reverse(tx, payment_id).await?,
        ..Reversed::default()
    };
    let Some(affiliate_id) = lock_affiliate_of_line(tx, payment_id).await? else {
        return Ok(done);
    };
    let r = db::row_one(tx, REVERSE_SQL, &[&payment_id]).await?;
    done.unpaid = r.try_get::<_, i64>("unpaid")? > 0;
    done.paid_back = r.try_get::<_, i64>("back")? > 0;
    tracing::info!(
        payment_id,
        affiliate_id,
        unpaid = done.unpaid,
        paid_back = done.paid_back,
        "commission reversed with its payment"
    );
    Ok(done)
}

/// The unpaid earning line of payment `$1` on its amount net of the fee now recorded: a line
/// that rounds to nothing then is reversed. A paid line is left as paid (`paid` in the answer).
const REBASE_SQL: &str = "WITH p AS (
         SELECT id, amount_minor - affiliate_fee_minor AS base FROM payments WHERE id = $1
     ), l AS (
         SELECT c.id, c.status, p.base, greatest(p.base, 0) * c.percent / 100 AS amount
         FROM commission_lines c JOIN p ON p.id = c.payment_id
         WHERE c.kind <> 'reversal' FOR UPDATE OF c
     ), changed AS (
         UPDATE commission_lines c
         SET base_minor = l.base,
             amount_minor = CASE WHEN l.amount > 0 THEN l.amount ELSE c.amount_minor END,
             status = CASE WHEN l.amount > 0 THEN c.status ELSE 'reversed' END,
             reversed_at = CASE WHEN l.amount > 0 THEN c.reversed_at
                                ELSE statement_timestamp() END
         FROM l WHERE c.id = l.id AND l.status = 'pending' AND c.base_minor <> l.base
         RETURNING c.id
     )
     SELECT (SELECT count(*) FROM changed) AS changed,
            EXISTS (SELECT 1 FROM l WHERE l.status = 'paid') AS paid";

/// Telegram's affiliate fee of payment `payment_id` was recorded (`payments.affiliate_fee_minor`):
/// its earning line, while not yet paid, is computed again on the amount net of that fee. Call
/// it in the transaction that records the fee.
pub async fn rebase(tx: &Transaction<'_>, payment_id: i64) -> Result<(), ApiError> {
    // The affiliate's lock first, as a payout and a reversal take it: a line's amount never
    // changes under a payout that summed it.
    if lock_affiliate_of_line(tx, payment_id).await?.is_none() {
        return Ok(());
    }
    let r = db::row_one(tx, REBASE_SQL, &[&payment_id]).await?;
    if r.try_get::<_, bool>("paid")? {
        tracing::warn!(
            payment_id,
            "Telegram's affiliate fee was recorded after the payment's commission was paid; \
             the paid line is left as it was"
        );
    } else if r.try_get::<_, i64>("changed")? > 0 {
        tracing::info!(
            payment_id,
            "commission line computed again net of Telegram's fee"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(days: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_767_225_600, 0).unwrap() + Duration::days(days)
    }

    fn facts() -> Facts {
        Facts {
            window_days: 30,
            hold_days: 14,
            rates: Rates {
                first_percent: 20,
                renewal_percent: 10,
            },
            renewal_months: 6,
            buyer_reward_days: None,
            max_reward_days_per_month: None,
            affiliate_id: 1,
            referrer: None,
            attributed_at: at(0),
            first_paid_at: None,
            fee_minor: 0,
            now: at(1),
        }
    }

    const BUYER: SubscriberId = SubscriberId(7);

    #[test]
    fn a_first_purchase_within_the_window_earns_the_first_percent_rounded_down() {
        assert_eq!(
            decide(&facts(), BUYER, 999),
            Earns::Line {
                kind: Kind::First,
                percent: 20,
                base_minor: 999,
                amount_minor: 199,
                payable_at: at(15),
            }
        );
    }

    #[test]
    fn the_amount_is_net_of_telegrams_fee() {
        let f = Facts {
            fee_minor: 100,
            ..facts()
        };
        assert!(matches!(
            decide(&f, BUYER, 1000),
            Earns::Line {
                base_minor: 900,
                amount_minor: 180,
                ..
            }
        ));
    }

    #[test]
    fn after_the_window_a_first_purchase_earns_nothing() {
        let f = Facts {
            now: at(31),
            ..facts()
        };
        assert!(matches!(decide(&f, BUYER, 1000), Earns::Nothing(_)));
        let f = Facts {
            now: at(30),
            ..facts()
        };
        assert!(matches!(decide(&f, BUYER, 1000), Earns::Line { .. }));
    }

    #[test]
    fn renewals_earn_for_the_months_after_the_attribution_when_the_first_came_after_the_click() {
        let f = Facts {
            first_paid_at: Some(at(2)),
            now: at(100),
            ..facts()
        };
        assert!(matches!(
            decide(&f, BUYER, 1000),
            Earns::Line {
                kind: Kind::Renewal,
                percent: 10,
                amount_minor: 100,
                ..
            }
        ));
        let late = Facts {
            now: at(200),
            ..f.clone()
        };
        assert!(matches!(decide(&late, BUYER, 1000), Earns::Nothing(_)));
        let before_click = Facts {
            first_paid_at: Some(at(-1)),
            ..f.clone()
        };
        assert!(matches!(
            decide(&before_click, BUYER, 1000),
            Earns::Nothing(_)
        ));
        let first_after_window = Facts {
            first_paid_at: Some(at(40)),
            ..f
        };
        assert!(matches!(
            decide(&first_after_window, BUYER, 1000),
            Earns::Nothing(_)
        ));
    }

    #[test]
    fn free_purchases_self_referrals_and_zero_amounts_earn_nothing() {
        assert!(matches!(decide(&facts(), BUYER, 0), Earns::Nothing(_)));
        let own = Facts {
            referrer: Some(BUYER.0),
            ..facts()
        };
        assert!(matches!(decide(&own, BUYER, 1000), Earns::Nothing(_)));
        assert!(matches!(decide(&facts(), BUYER, 4), Earns::Nothing(_)));
        let eaten = Facts {
            fee_minor: 1000,
            ..facts()
        };
        assert!(matches!(decide(&eaten, BUYER, 1000), Earns::Nothing(_)));
    }

    #[test]
    fn a_buyer_referrer_with_reward_days_earns_days_for_a_first_purchase_only() {
        let f = Facts {
            referrer: Some(3),
            buyer_reward_days: Some(7),
            ..facts()
        };
        assert_eq!(decide(&f, BUYER, 1000), Earns::Days(7));
        let renewal = Facts {
            first_paid_at: Some(at(1)),
            now: at(40),
            ..f
        };
        assert!(matches!(decide(&renewal, BUYER, 1000), Earns::Nothing(_)));
        let money = Facts {
            referrer: Some(3),
            ..facts()
        };
        assert!(matches!(decide(&money, BUYER, 1000), Earns::Line { .. }));
    }
}
