//! `/api/automations`: the four automations — an unpaid checkout's reminder, a win-back offer,
//! an offer at cancel, a failed renewal's note — each off until switched on, with a text per
//! language and, for the two offers, the template of the code made for each buyer.
//!
//! HTTP only: [`crate::messages::automations`] owns the rows and their rules.

use std::collections::BTreeMap;

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};

use super::{ApiJson, nullable_object};
use super::{auth::Staff, schemas::Problem};
use crate::{
    app::state::AppState,
    catalog::promo_codes::BuyerOffer,
    common::error::ApiError,
    messages::{
        Kind,
        automations::{self, Automation},
    },
    staff::audit_log::Entry,
};

/// The automations, in their order.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Automations {
    pub items: Vec<Automation>,
}

/// A change of an automation: any field; a field left out keeps its value.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"enabled": true, "delay_minutes": 4320,
    "texts": {"en": "We miss you, { $name }! { $code } takes 20 % off: { $price }.",
              "uk": "Сумуємо, { $name }! З кодом { $code } — { $price }."},
    "promo": {"percent_off": 20, "valid_days": 7}}))]
pub struct AutomationPatch {
    #[schema(nullable = false)]
    enabled: Option<bool>,
    /// 0..525600: how long after what starts it the message goes.
    #[schema(nullable = false, minimum = 0, maximum = 525600)]
    delay_minutes: Option<i32>,
    /// A Project Fluent pattern per language (`en`, `uk`, `ru`) with `{ $name }`,
    /// `{ $channel }`, `{ $expires }`, `{ $code }`, `{ $price }`; replaces every text.
    #[schema(value_type = Option<HashMap<String, String>>, nullable = false)]
    texts: Option<BTreeMap<String, String>>,
    /// The code made for each buyer (`win_back`, `cancel_offer`); null: none.
    #[serde(default, deserialize_with = "nullable_object")]
    #[schema(value_type = Option<BuyerOffer>)]
    promo: Option<Option<BuyerOffer>>,
}

fn kind_of(kind: &str) -> Result<Kind, ApiError> {
    Kind::parse(kind)
        .filter(|k| *k != Kind::Broadcast)
        .ok_or(ApiError::NotFound("automation"))
}

/// `GET /api/automations`.
#[utoipa::path(get, path = "/automations", operation_id = "listAutomations", tag = "messages",
    security(("staff_jwt" = [])),
    responses((status = 200, description = "The four automations, with the messages each sent.",
        body = Automations)),
)]
pub async fn list(State(state): State<AppState>, _: Staff) -> Result<Json<Automations>, ApiError> {
    let client = state.db.get().await?;
    Ok(Json(Automations {
        items: automations::list(&client).await?,
    }))
}

/// `PATCH /api/automations/{kind}`.
#[utoipa::path(patch, path = "/automations/{kind}", operation_id = "patchAutomation", tag = "messages",
    params(("kind" = String, Path, description = "`unpaid_checkout`, `win_back`, `cancel_offer` or `renewal_failed`.")),
    request_body(content = Option<AutomationPatch>, description = "The fields to change; none \
        (or an empty body) changes nothing."),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "The automation as changed.", body = Automation),
        (status = 404, description = "No such automation.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A delay out of range; a language the bot does not speak; \
            a text that is not a Fluent pattern, uses an unknown placeholder, or `{ $code }` \
            without a code; a code for an automation that makes none, or out of range; \
            switching on without any text.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn patch(
    State(state): State<AppState>,
    staff: Staff,
    axum::extract::Path(kind): axum::extract::Path<String>,
    ApiJson(patch): ApiJson<AutomationPatch>,
) -> Result<Json<Automation>, ApiError> {
    let kind = kind_of(&kind)?;
    let change = automations::Change {
        enabled: patch.enabled,
        delay_minutes: patch.delay_minutes,
        texts: patch.texts,
        promo: patch.promo,
    };
    crate::transaction!(state.db, |tx| {
        let before = automations::get(tx, kind).await?;
        let after = automations::change(tx, kind, &change).await?;
        let entry = Entry::new("automation.update", None)
            .before(&before)
            .after(&after);
        staff.audit(tx, entry).await?;
        Ok(Json(after))
    })
}
