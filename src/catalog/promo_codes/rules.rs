//! The rules of a promo code's use, pure: whether a code gives a new use ([`Refusal`]) and
//! what it takes off ([`Terms`]), decided by [`super::uses`] over what it read.

use crate::{
    catalog::plans::{self, Plan},
    common::error::ApiError,
};

use super::Off;

/// The terms of a code that decide a use, read under its lock (or, for a
/// [`Preview`](super::Preview), without one).
#[derive(Debug, Clone)]
pub struct Terms {
    pub id: i64,
    pub percent_off: Option<i32>,
    pub amount_off_minor: Option<i64>,
    pub currency: Option<String>,
    pub plan_ids: Option<Vec<i64>>,
    pub max_redemptions: Option<i32>,
    pub per_buyer_limit: i32,
    pub first_purchase_only: bool,
    pub active: bool,
}

impl Terms {
    pub(super) fn off(&self) -> Off {
        match (self.percent_off, self.amount_off_minor) {
            (Some(p), _) => Off::Percent(p),
            (None, a) => Off::Amount(a.unwrap_or(0)),
        }
    }
}

crate::from_row!(Terms [terms_columns!()] {
    id,
    percent_off,
    amount_off_minor,
    currency,
    plan_ids,
    max_redemptions,
    per_buyer_limit,
    first_purchase_only,
    active,
});

/// Why a code cannot be used, as the 422 on `promo_code` says it.
pub(super) fn refused(message: impl Into<String>) -> ApiError {
    ApiError::field("promo_code", message)
}

/// Why a code gives no new use now ([`Preview::refusal`](super::Preview::refusal), [`discount_for_new_order`](super::discount_for_new_order)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Inactive,
    Expired,
    /// The plan is a trial.
    NotPaidPlan,
    /// The plan is not in the code's `plan_ids`.
    NotForPlan,
    /// An amount-off code of another currency than the plan's (the code's currency).
    OtherCurrency(String),
    /// Its uses reached `max_redemptions`.
    Exhausted,
    /// The buyer's uses reached `per_buyer_limit` (the limit).
    UsedByBuyer(i32),
    /// First purchase only, and the buyer bought access to the plan's channels before.
    FirstPurchase,
}

impl Refusal {
    /// The 422's message on `promo_code` (plan `plan`).
    pub(super) fn message(&self, plan: &Plan) -> String {
        match self {
            Refusal::Inactive => "this promo code is not active".into(),
            Refusal::Expired => "this promo code has expired".into(),
            Refusal::NotPaidPlan => "promo codes apply to paid plans only".into(),
            Refusal::NotForPlan => "this promo code does not apply to this plan".into(),
            Refusal::OtherCurrency(c) => format!(
                "this promo code takes {c} off; this plan is sold in {}",
                plan.currency
            ),
            Refusal::Exhausted => "this promo code has been used up".into(),
            Refusal::UsedByBuyer(1) => "the subscriber has already used this promo code".into(),
            Refusal::UsedByBuyer(limit) => format!(
                "the subscriber has already used this promo code the {limit} times it allows"
            ),
            Refusal::FirstPurchase => {
                "this promo code is for a first purchase only; the subscriber has bought access \
                 to this plan's channels before"
                    .into()
            }
        }
    }
}

/// The rule of a new use, but for a first purchase (which needs a read): active, not expired,
/// meant for `plan` (when given: a paid plan, in `plan_ids`, of the code's currency), room in
/// `max_redemptions` (`uses`) and in `per_buyer_limit` (`buyer_uses`), in that order. Pure.
pub(super) fn refusal(
    t: &Terms,
    uses: i64,
    buyer_uses: i64,
    expired: bool,
    plan: Option<&Plan>,
) -> Option<Refusal> {
    if !t.active {
        return Some(Refusal::Inactive);
    }
    if expired {
        return Some(Refusal::Expired);
    }
    if let Some(why) = plan.and_then(|p| plan_refusal(t, p)) {
        return Some(why);
    }
    if t.max_redemptions.is_some_and(|max| uses >= i64::from(max)) {
        return Some(Refusal::Exhausted);
    }
    if buyer_uses >= i64::from(t.per_buyer_limit) {
        return Some(Refusal::UsedByBuyer(t.per_buyer_limit));
    }
    None
}

/// Why code `t` is not meant for `plan`, if it is not. Pure.
pub(super) fn plan_refusal(t: &Terms, plan: &Plan) -> Option<Refusal> {
    if plan.kind != plans::Kind::Paid {
        return Some(Refusal::NotPaidPlan);
    }
    if t.plan_ids
        .as_ref()
        .is_some_and(|ids| !ids.contains(&plan.id))
    {
        return Some(Refusal::NotForPlan);
    }
    t.currency
        .as_deref()
        .filter(|c| *c != plan.currency)
        .map(|c| Refusal::OtherCurrency(c.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms() -> Terms {
        Terms {
            id: 1,
            percent_off: Some(10),
            amount_off_minor: None,
            currency: None,
            plan_ids: Some(vec![7]),
            max_redemptions: Some(2),
            per_buyer_limit: 1,
            first_purchase_only: false,
            active: true,
        }
    }

    #[test]
    fn a_use_is_refused_in_one_order_and_without_a_plan_only_for_the_code_itself() {
        let t = terms();
        assert_eq!(refusal(&t, 1, 0, false, None), None);
        assert_eq!(refusal(&t, 2, 0, false, None), Some(Refusal::Exhausted));
        assert_eq!(
            refusal(&t, 1, 1, false, None),
            Some(Refusal::UsedByBuyer(1))
        );
        assert_eq!(refusal(&t, 2, 1, true, None), Some(Refusal::Expired));
        let off = Terms {
            active: false,
            ..terms()
        };
        assert_eq!(refusal(&off, 2, 1, true, None), Some(Refusal::Inactive));
        let unlimited = Terms {
            max_redemptions: None,
            ..terms()
        };
        assert_eq!(refusal(&unlimited, i64::MAX, 0, false, None), None);
    }
}
