//! Orders and payments through every door: the signed webhook (door 1) and the payment core it
//! shares with the others (exactly once, seats, refusals kept for review), WayForPay (door 2),
//! Telegram Stars pre-checkouts, payments and subscriptions (door 3) and Telegram's affiliate
//! fee on a Stars payment, Stripe with its delayed methods and disputes (door 4), Monobank
//! acquiring with its signed reports, invoices and reconcile (door 5), Crypto Pay with its
//! invoices, their reconcile and plans' crypto prices (door 6); refunds at the gateway,
//! refunds that arrive before their payment, the reconcile of card orders with
//! WayForPay, the orders API with its seat rule, and the referral commissions those payments
//! earn and their refunds take back, also across a `kill -9` of the server; the fiscal
//! receipts (Checkbox) card payments in hryvnias and their refunds owe; and refunds staff
//! start, made at the payment's gateway.

mod affiliate_fees;
mod apply;
mod cryptopay;
mod fast_path;
mod gateway_refunds;
mod hardening;
mod monobank;
mod orders;
pub(crate) mod receipts;
pub(crate) mod reconciliation;
mod referral_crash;
mod referral_crash_harness;
mod referrals;
mod refunds_before_payments;
mod seats;
mod signed_webhook;
mod staff_refunds;
mod stars_reconcile;
mod stars_subscriptions;
pub(crate) mod stripe;
mod stripe_events;
mod subscription_updates;
pub(crate) mod telegram_door;
mod telegram_holds;
mod telegram_refusals;
mod wayforpay;
