//! Staff's side of referrals: the program's rules and a plan's own rates (values, 422s,
//! roles), affiliates (codes given and drawn, their uniqueness, links, one affiliate per
//! buyer, deactivation, the summary's numbers), the commission lines as staff list and export
//! them, and payouts (netting reversals, nothing to pay, the outbound event, concurrent payouts
//! paying each line once). The ledger's lines are set up by [`setup::insert_line`].

mod affiliates;
mod commissions;
mod payouts;
mod program;
pub(crate) mod setup;
