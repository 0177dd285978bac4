//! Referrals and affiliates: buyers bring buyers, and the affiliate who brought them earns a
//! commission (or, a buyer-referrer, free days) booked exactly once per payment and taken back
//! with its refund.
//!
//! - [`program`] owns `referral_program` and `plan_referral_rates`: the rules (attribution,
//!   window, hold, rates, reward days) and a plan's own rates.
//! - [`affiliates`] owns `affiliates`: partners and buyers with a code and a link, and what each
//!   brought (the summary).
//! - [`attribution`] owns `referral_clicks` and `referral_attributions`: a `/start r_<code>`
//!   click and the buyer it attributes.
//! - [`ledger`] owns `commission_lines`: the line a payment earns, written in the payment's own
//!   transaction by the payment core, and its reversal, written in the transaction that takes
//!   the payment's access back; [`lines`] holds its reads (a line's status as it reads now, the
//!   staff list and the CSV's pages).
//! - [`payouts`] owns `payouts`: a batch that marks an affiliate's payable lines paid, netting
//!   earlier reversals.
//! - [`rewards`] owns `referral_rewards`: the free days a buyer-referrer earns, owed in the
//!   payment's transaction and granted (or taken back) by a `referral_reward` effect under the
//!   referrer's own pair lock.
//!
//! Sits right below the payment core, which calls it in a payment's and a refund's
//! transaction (the bot records clicks through it too); imports only the layers below it:
//! catalog (plans), access (the referrer's membership), outbox (the reward effect), config,
//! db and common.

pub mod affiliates;
pub mod attribution;
pub mod ledger;
pub mod lines;
pub mod payouts;
pub mod program;
pub mod rewards;
