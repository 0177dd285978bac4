//! The vocabularies of the code against the constraints of the migrated schema: read from the
//! test database's catalogue (`pg_constraint`), so whichever migration last defined a
//! constraint, the check is against what the database enforces.

use subgate::{
    outbox::{effects::Kind, outbound::EVENT_TYPES},
    payments::core::{Outcome, Reason},
};

use crate::support::helpers::TestApp;

/// The definition of constraint `name` (`CHECK ((kind = ANY (ARRAY['grant'::text, ...])))`).
async fn constraint(app: &TestApp, name: &str) -> String {
    app.db()
        .await
        .query_opt(
            "SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conname = $1",
            &[&name],
        )
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no constraint {name} in the migrated schema"))
        .get("def")
}

#[tokio::test]
async fn the_schema_accepts_every_effect_kind() {
    let app = TestApp::spawn().await;
    let check = constraint(&app, "effects_kind_check").await;
    for k in Kind::ALL {
        assert!(check.contains(&format!("'{}'", k.as_str())), "{k:?}");
    }
}

#[tokio::test]
async fn reasons_match_the_schema() {
    let app = TestApp::spawn().await;
    let pre_checkout = constraint(&app, "pre_checkout_decisions_reason_check").await;
    let payments = constraint(&app, "payments_reason_check").await;
    for r in Reason::ALL {
        let code = format!("'{}'", r.as_str());
        assert_eq!(
            payments.contains(&code),
            r.is_payment_reason(),
            "{r:?} is a payment reason iff the payments table takes it"
        );
        if r.is_pre_checkout_refusal() {
            assert!(
                pre_checkout.contains(&code),
                "{r:?} is a pre-checkout reason"
            );
        }
    }
}

#[tokio::test]
async fn outcomes_and_outbound_event_types_match_the_schema() {
    let app = TestApp::spawn().await;
    let outcomes = constraint(&app, "payments_outcome_check").await;
    for o in Outcome::ALL {
        assert!(outcomes.contains(&format!("'{}'", o.as_str())), "{o:?}");
    }
    let types = constraint(&app, "webhook_endpoints_event_types_check").await;
    for t in EVENT_TYPES {
        assert!(types.contains(&format!("'{t}'")), "{t}");
    }
}
