//! Clicks and attributions (`referral_clicks`, `referral_attributions`): a buyer's
//! `/start r_<code>` and the affiliate it attributes them to.
//!
//! A click of an unknown or inactive code is ignored (no row): guessing codes leaves no trace
//! and an affiliate's counts hold only real links. Every other click is one `referral_clicks`
//! row with what it came to ([`ClickOutcome`]).
//!
//! A buyer has at most one attribution (the table's key is the buyer), and it is written by one
//! `INSERT … ON CONFLICT (subscriber_id) DO UPDATE … WHERE <rule>` ([`ATTRIBUTE_SQL`]): when
//! clicks of one buyer race, PostgreSQL decides them one after another on the row itself (the
//! later waits for the earlier's row lock and evaluates the rule against what it committed), and
//! each click's outcome is whether its statement wrote. No read-then-write, so no lost update.

use deadpool_postgres::GenericClient;

use crate::{common::error::ApiError, db, referrals::program::Attribution};

crate::text_enum! {
    /// What a recorded click came to (`referral_clicks.outcome`).
    pub enum ClickOutcome {
        /// The buyer is attributed to the click's affiliate now: a first attribution, one
        /// replacing an expired one (first click) or any other (last click), or the same
        /// affiliate's refreshed (last click).
        Attributed => "attributed",
        /// First click: the buyer's attribution (to anyone) is still within its window.
        Kept => "kept",
        /// The affiliate is the buyer: refused.
        SelfReferral => "self",
        /// The program is switched off: counted, not attributed.
        ProgramOff => "program_off",
    }
}

/// An active affiliate by code, with the program's rules as they are now.
struct Target {
    affiliate_id: i32,
    affiliate_subscriber_id: Option<i32>,
    enabled: bool,
    attribution: Attribution,
    window_days: i32,
}

crate::from_row!(Target {
    affiliate_id,
    affiliate_subscriber_id,
    enabled,
    attribution,
    window_days,
});

const TARGET_SQL: &str = "
    SELECT a.id AS affiliate_id, a.subscriber_id AS affiliate_subscriber_id,
           p.enabled, p.attribution, p.window_days
    FROM affiliates a CROSS JOIN referral_program p
    WHERE a.code = $1 AND a.active";

/// Attributes buyer `$1` to affiliate `$2` unless the rule keeps the attribution they have:
/// under last click (`$3`) every click replaces it (the same affiliate's refreshes
/// `attributed_at`); under first click only one whose window (`$4` days) has run out is
/// replaced. Returns a row only when it wrote.
const ATTRIBUTE_SQL: &str = "
    INSERT INTO referral_attributions AS r (subscriber_id, affiliate_id)
    VALUES ($1, $2)
    ON CONFLICT (subscriber_id) DO UPDATE
        SET affiliate_id = EXCLUDED.affiliate_id, attributed_at = statement_timestamp()
        WHERE $3
           OR r.attributed_at + make_interval(days => $4) <= statement_timestamp()
    RETURNING r.subscriber_id";

const CLICK_SQL: &str = "
    INSERT INTO referral_clicks (affiliate_id, subscriber_id, outcome) VALUES ($1, $2, $3)";

/// Buyer `subscriber_id` followed a referral link with `code` (any case: codes are stored
/// upper-cased): records the click and attributes the buyer by the program's rule. `None`: the
/// code is unknown or inactive, and nothing is recorded. Call it in the update's transaction, so a redelivered update records
/// nothing twice.
pub async fn click(
    client: &impl GenericClient,
    code: &str,
    subscriber_id: i32,
) -> Result<Option<ClickOutcome>, ApiError> {
    let code = code.to_ascii_uppercase();
    let Some(target) = db::opt::<Target>(client, TARGET_SQL, &[&code]).await? else {
        return Ok(None);
    };
    let outcome = if !target.enabled {
        ClickOutcome::ProgramOff
    } else if target.affiliate_subscriber_id == Some(subscriber_id) {
        ClickOutcome::SelfReferral
    } else {
        let last_click = target.attribution == Attribution::LastClick;
        let wrote = db::row_opt(
            client,
            ATTRIBUTE_SQL,
            &[
                &subscriber_id,
                &target.affiliate_id,
                &last_click,
                &target.window_days,
            ],
        )
        .await?
        .is_some();
        if wrote {
            ClickOutcome::Attributed
        } else {
            ClickOutcome::Kept
        }
    };
    db::execute(
        client,
        CLICK_SQL,
        &[&target.affiliate_id, &subscriber_id, &outcome],
    )
    .await?;
    tracing::info!(
        subscriber_id,
        affiliate_id = target.affiliate_id,
        outcome = %outcome,
        "referral click"
    );
    Ok(Some(outcome))
}
