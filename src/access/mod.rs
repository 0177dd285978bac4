//! Who holds access: buyers ([`subscribers`]), their memberships with the events and effects
//! of every change ([`memberships`]), the sweep that moves overdue memberships to grace and
//! expired ([`sweep`]), users a chat may hold without a membership ([`exemptions`]), and the
//! join requests waiting at a Mini App door ([`join_requests`]).
//!
//! Below `orders` and `payments`; imports `outbox` (effects are written in the transaction that
//! decides them), `catalog` and the layers below.

pub mod buyer_view;
pub mod exemptions;
pub mod join_requests;
pub mod memberships;
pub mod subscribers;
pub mod sweep;
