//! The checks of a payment against its order (or its Stars subscription), read under the
//! locks, in API.md order.
//!
//! The money is checked against what the order asked ([`asked_price`]): its price, or for a
//! Crypto Pay payment (door 6) the order's price in the asset paid — the amount its invoice in
//! that asset asked ([`crypto_invoices::asked`]). A payment in an asset the order was never
//! priced in is `currency_mismatch`; in the right asset but another amount, `amount_mismatch`.

use super::*;
use crate::orders::crypto_invoices;

/// Step 3: the first failed check, if any (a renewal is checked against its subscription).
pub(super) async fn check_found(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    found: &Found,
) -> Result<Option<Reason>, ApiError> {
    match &found.order {
        None => Ok(Some(Reason::UnknownOrder)),
        Some(l) if found.renewal => check_renewal(tx, p, l, found.subscription.as_ref()).await,
        Some(l) => check(tx, p, l).await,
    }
}

/// The checks of a renewal charge, in order; the first failure wins: the order started a
/// subscription (and is paid), which is not cancelled; currency, amount and payer match; every
/// channel of the plan is active; the buyer's access is not lifetime by now; in every
/// seat-limited one the buyer is still a member (or its subscription still holds the seat) or a
/// seat is free.
pub(super) async fn check_renewal(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    l: &LockedOrder,
    subscription: Option<&StarSubscription>,
) -> Result<Option<Reason>, ApiError> {
    let o = &l.order;
    let Some(s) = subscription.filter(|_| o.status == orders::Status::Paid) else {
        return Ok(Some(Reason::UnknownSubscription));
    };
    if !s.is_active() {
        return Ok(Some(Reason::SubscriptionCancelled));
    }
    if let Some(reason) = mismatch(p, l, Some(&o.price())) {
        return Ok(Some(reason));
    }
    if !l.channels_active() {
        return Ok(Some(Reason::ChannelInactive));
    }
    // A renewal of access that is lifetime by now would buy nothing (and stops the
    // subscription, like any refused renewal).
    if seats::held_for_life(l) {
        return Ok(Some(Reason::AlreadyLifetime));
    }
    // No hold: the order's hold (if any) belonged to its first payment. A live member renews
    // without a seat, and so does a buyer whose subscription still holds its seat (until its
    // renewal date plus a day, in every channel of its plan); someone whose membership already
    // ended needs a free one — in every seat-limited channel of the plan, or the renewal
    // extends none of them.
    for channel in &l.channels {
        let Some(limit) = channel.terms.seat_limit else {
            continue;
        };
        if !seats::is_live_member(tx, o.subscriber(), channel.id).await?
            && seats::seats_taken(tx, channel.id.0).await? >= i64::from(limit)
        {
            return Ok(Some(Reason::NoSeat));
        }
    }
    Ok(None)
}

/// What the order asked of payment `p` ([`mismatch`] compares the two): the order's price,
/// or for a Crypto Pay payment its price in the asset paid (`None`: it has none in that asset).
/// Read under the order's lock, so an invoice being made for it cannot change it in between.
pub(super) async fn asked_price(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    l: &LockedOrder,
) -> Result<Option<Money>, ApiError> {
    if p.gateway != Gateway::CryptoPay {
        return Ok(Some(l.order.price()));
    }
    Ok(crypto_invoices::asked(tx, l.order.id, &p.currency)
        .await?
        .map(|amount| Money::new(amount, &p.currency)))
}

/// The payment against what its order asked (`asked`, [`asked_price`]; `None`: nothing in the
/// payment's currency), in API.md's order: currency, amount, payer (when the door knows it).
pub(super) fn mismatch(
    p: &NormalizedPayment,
    l: &LockedOrder,
    asked: Option<&Money>,
) -> Option<Reason> {
    let Some(asked) = asked else {
        return Some(Reason::CurrencyMismatch);
    };
    match p.money().mismatch(asked) {
        Some(Mismatch::Currency) => return Some(Reason::CurrencyMismatch),
        Some(Mismatch::Amount) => return Some(Reason::AmountMismatch),
        None => {}
    }
    if p.payer_telegram_id
        .is_some_and(|payer| payer != l.subscriber_telegram_id)
    {
        return Some(Reason::PayerMismatch);
    }
    None
}

/// The checks of API.md step 3 against a locked order, in order; the first failure wins. After
/// the channel's: the buyer has no live lifetime access to the order's channel already
/// (`already_lifetime`), then the seat.
pub(super) async fn check(
    tx: &Transaction<'_>,
    p: &NormalizedPayment,
    l: &LockedOrder,
) -> Result<Option<Reason>, ApiError> {
    let asked = asked_price(tx, p, l).await?;
    if let Some(reason) = check_order(p, l, asked.as_ref()) {
        return Ok(Some(reason));
    }
    let o = &l.order;
    // A promo price is paid only while the order holds its code's use, or may take it again.
    if !promo_codes::use_still_held(tx, o.promo_use()).await? {
        return Ok(Some(Reason::PromoExhausted));
    }
    Ok(match seats::seat_check(tx, l).await? {
        SeatCheck::NotNeeded | SeatCheck::HoldValid | SeatCheck::Free => None,
        SeatCheck::HoldExpired => Some(Reason::HoldExpired),
        SeatCheck::Full => Some(Reason::NoSeat),
    })
}

/// The checks of [`check`] that read nothing but the order as locked, in order (the promo
/// code's use and the seat come after them, and read the database): cancelled, currency,
/// amount (against `asked`, [`asked_price`]), payer, already paid, a channel inactive, lifetime
/// access held already.
pub(in crate::payments) fn check_order(
    p: &NormalizedPayment,
    l: &LockedOrder,
    asked: Option<&Money>,
) -> Option<Reason> {
    let o = &l.order;
    if o.status == orders::Status::Cancelled {
        return Some(Reason::OrderCancelled);
    }
    if let Some(reason) = mismatch(p, l, asked) {
        return Some(reason);
    }
    // Duplicates of the payment that paid it never get here (they conflict on insert), so a
    // paid order means another payment paid it.
    if o.status == orders::Status::Paid {
        return Some(Reason::AlreadyPaid);
    }
    if !l.channels_active() {
        return Some(Reason::ChannelInactive);
    }
    // The buyer already has lifetime access: the payment would buy nothing (under the pair
    // lock, so no grant can come between this and the extension).
    if seats::held_for_life(l) {
        return Some(Reason::AlreadyLifetime);
    }
    None
}
