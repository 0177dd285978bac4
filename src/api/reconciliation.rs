//! `GET /api/reconciliation`: the card orders asked about at the gateway because their callback
//! had not come — what is being chased, what was found, what was given up on — with how many
//! are in each state. [`crate::payments::gateways::wayforpay::checks`] owns them; [`crate::payments::gateways::wayforpay::reconcile`] does the asking.
//!
//! `GET /api/reconciliation/monobank`: the same for Monobank's invoices, one row per invoice
//! (an order may have several), owned by [`crate::payments::gateways::monobank::invoices`] and
//! asked about by [`crate::payments::gateways::monobank::reconcile`].

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};

use super::{ApiQuery, Paging, auth::Staff, schemas::Problem, state_filter};
use crate::{
    app::state::AppState,
    common::error::ApiError,
    payments::gateways::{
        monobank::invoices::{self as monobank_invoices, ChaseCounts, Invoice},
        wayforpay::{
            checks as gateway_checks,
            checks::{Check, Counts},
        },
    },
};

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListChecks {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return order ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    #[param(value_type = Option<gateway_checks::State>)]
    state: Option<String>,
}

/// A page of checks, by order id, and the number of checks in each state (of all of them, not
/// only this page or filter).
#[derive(Serialize, utoipa::ToSchema)]
pub struct ChecksPage {
    pub items: Vec<Check>,
    /// Pass as `after` for the next page; null on the last one.
    pub next_after: Option<i64>,
    pub counts: Counts,
}

/// `GET /api/reconciliation` (filter `state`), by order id ascending.
#[utoipa::path(get, path = "/reconciliation", operation_id = "listReconciliation",
    tag = "reconciliation",
    params(ListChecks),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of card orders asked about at WayForPay \
            (`CHECK_STATUS`), by order id, with the count per state.", body = ChecksPage),
        (status = 422, description = "`limit` out of range or an unknown `state`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListChecks>,
) -> Result<Json<ChecksPage>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let filter = state_filter::<gateway_checks::State>("state", q.state.as_deref())?;
    let client = state.db.get().await?;
    let items = gateway_checks::list(&client, filter, paging.after, paging.fetch()).await?;
    let counts = gateway_checks::counts(&client).await?;
    let page = paging.page(items, |c| c.order_id);
    Ok(Json(ChecksPage {
        items: page.items,
        next_after: page.next_after,
        counts,
    }))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListInvoices {
    /// Rows per page.
    #[param(minimum = 1, maximum = 200, default = 50)]
    limit: Option<i64>,
    /// Return ids greater than this (the previous page's `next_after`).
    after: Option<i64>,
    /// Only invoices whose chase is in this state.
    #[param(value_type = Option<monobank_invoices::Chase>)]
    chase: Option<String>,
    /// Only the invoices of this order.
    order_id: Option<i64>,
}

/// A page of Monobank invoices, by id, and how many given-out invoices are in each state of
/// the chase (of all of them, not only this page or filter).
#[derive(Serialize, utoipa::ToSchema)]
pub struct MonobankInvoicesPage {
    pub items: Vec<Invoice>,
    /// Pass as `after` for the next page; null on the last one.
    pub next_after: Option<i64>,
    pub counts: ChaseCounts,
}

/// `GET /api/reconciliation/monobank` (filters `chase`, `order_id`), by id ascending.
#[utoipa::path(get, path = "/reconciliation/monobank", operation_id = "listMonobankInvoices",
    tag = "reconciliation",
    params(ListInvoices),
    security(("staff_jwt" = [])),
    responses(
        (status = 200, description = "A page of Monobank invoices: each one's newest reported \
            status and `modifiedDate`, its page, and the chase of one whose webhook has not \
            come (`invoice/status`), with the count per state of the chase.",
            body = MonobankInvoicesPage),
        (status = 422, description = "`limit` out of range or an unknown `chase`.", body = Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn list_monobank(
    State(state): State<AppState>,
    _: Staff,
    ApiQuery(q): ApiQuery<ListInvoices>,
) -> Result<Json<MonobankInvoicesPage>, ApiError> {
    let paging = Paging::new(q.limit, q.after)?;
    let filter = state_filter::<monobank_invoices::Chase>("chase", q.chase.as_deref())?;
    let client = state.db.get().await?;
    let items =
        monobank_invoices::list(&client, filter, q.order_id, paging.after, paging.fetch()).await?;
    let counts = monobank_invoices::counts(&client).await?;
    let page = paging.page(items, |i| i.id);
    Ok(Json(MonobankInvoicesPage {
        items: page.items,
        next_after: page.next_after,
        counts,
    }))
}
