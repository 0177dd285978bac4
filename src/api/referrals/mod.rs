//! `/api/referral-program`, `/api/plans/{id}/referral`, `/api/affiliates`, `/api/commissions`
//! and `/api/payouts`: staff's side of referrals — the program's rules and a plan's own
//! rates ([`program`]), affiliates and what each brought ([`affiliates`]), the commission
//! ledger and its CSV ([`commissions`]), and payouts ([`payouts`]).
//!
//! HTTP only: each handler checks the shape of its fields, calls one function of
//! [`crate::referrals`] (which owns the rows, their SQL and the rules of the ledger and the
//! payouts) and renders its answer.

pub mod affiliates;
pub mod commissions;
pub mod payouts;
pub mod program;
