//! The OpenAPI 3.1 document of every route, served at `GET /api/openapi.json`.
//!
//! It is generated from the code with `utoipa`: each handler carries a `#[utoipa::path]` next
//! to its signature, each request and response body derives `ToSchema`, and the router registers
//! each handler once with `utoipa-axum`'s `routes!` (`api::router::routes`), which both routes it
//! and adds its operation to the document; [`ApiDoc`] holds the info, tags and shared schemas.
//! What every operation shares is added here by rule ([`CommonResponses`]), from what the
//! operation itself declares, so no handler repeats it:
//! - `400` when it takes a body, query parameters or an `Idempotency-Key`; `413` with a body;
//! - `401` (with `WWW-Authenticate: Bearer`) when it needs a staff token;
//! - `403` when its `x-required-role` (declared in the router, `api::roles`) is above `viewer`;
//! - `404` when its path names a record;
//! - `503` (with `Retry-After`) everywhere: the database is unreachable, a door is not
//!   configured, or the request timed out;
//! - `x-request-id` on every response.
//!
//! Errors are problem documents ([`Problem`], `application/problem+json`). The security schemes
//! are the staff JWT, the sweep token (an alternative on `POST /api/sweep` only), the three
//! Standard Webhooks headers of door 1 and Telegram's secret header of door 3; door 2
//! authenticates by a signature inside its body, which no scheme can express.
//!
//! The tests check that the router serves every documented method of every documented path,
//! validate the document against the OAS 3.1 schema and real answers against it; `make fuzz`
//! runs schemathesis against a live server with it.

use std::{borrow::Cow, sync::OnceLock};

use axum::{
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use serde_json::json;
use utoipa::{
    Modify, OpenApi, PartialSchema, ToSchema,
    openapi::{
        self, ContentBuilder, HeaderBuilder, ObjectBuilder, RefOr, ResponseBuilder, Schema, Type,
        path::{Operation, ParameterIn},
        security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme},
    },
};

use super::{
    schemas::{Problem, operations_mut},
    webhooks::telegram,
};
use crate::{access::memberships as membership_domain, orders as order_domain, payments::core};

/// The content type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Security scheme names, as operations refer to them.
pub const STAFF_JWT: &str = "staff_jwt";
pub const SWEEP_TOKEN: &str = "sweep_token";
pub const TELEGRAM_SECRET: &str = "telegram_secret";
pub const WEBHOOK_ID: &str = "webhook_id";
pub const WEBHOOK_TIMESTAMP: &str = "webhook_timestamp";
pub const WEBHOOK_SIGNATURE: &str = "webhook_signature";
pub const STRIPE_SIGNATURE: &str = "stripe_signature";
pub const MONOBANK_SIGNATURE: &str = "monobank_signature";
pub const CRYPTOPAY_SIGNATURE: &str = "cryptopay_signature";
/// The Mini App's `Authorization: tma <initData>`.
pub const TELEGRAM_INIT_DATA: &str = "telegram_init_data";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "subgate",
        description = "Sells access to private Telegram channels and groups (a `channel` here is \
            either: a channel or a supergroup, forum or not): the staff REST API, the \
            payment doors and the operations endpoints. Errors are RFC 9457 problem documents \
            (`application/problem+json`); every response carries `x-request-id`. Staff POSTs that \
            commit in one transaction honour an optional `Idempotency-Key`. Lists are \
            `{\"items\": [...], \"next_after\": <id or null>}`, ordered by id, with `limit` \
            (1..200, default 50) and `after`.",
        license(name = "MIT", identifier = "MIT"),
    ),
    components(schemas(Problem)),
    tags(
        (name = "auth", description = "Staff login: a bearer JWT for every other staff route; \
            changing one's own password."),
        (name = "staff", description = "Staff accounts and their roles (owner only)."),
        (name = "statistics", description = "Revenue and members over time, and the business now."),
        (name = "audit log", description = "Every staff write: who, what, before and after (read-only)."),
        (name = "subscribers", description = "The buyers, by Telegram user id."),
        (name = "channels", description = "The private channels and groups for sale, with price, period, grace and seats."),
        (name = "plans", description = "The ways a channel is sold: one channel or a bundle, paid or a trial, for a period or for life."),
        (name = "memberships", description = "Who may be in which channel until when, and the history of each."),
        (name = "orders", description = "One intent to buy one period of one channel; what every payment names."),
        (name = "promo codes", description = "Percent or amount off a plan's price, with limits that hold exactly."),
        (name = "payments", description = "Every payment any door stored (read-only)."),
        (name = "audits", description = "Checks of a channel's member list in Telegram against the database."),
        (name = "effects", description = "The outbox of Telegram effects and its dead letters."),
        (name = "reconciliation", description = "Card orders asked about at the gateway when their callback has not come."),
        (name = "star subscriptions", description = "Telegram Stars subscriptions started in the bot."),
        (name = "messages", description = "Messages to members: automations, broadcasts, and what each buyer was sent."),
        (name = "referrals", description = "Referrals and affiliates: the program's rules, a plan's own rates, affiliates and their links, the commission ledger and payouts."),
        (name = "webhook endpoints", description = "The owner's endpoints for outbound webhooks (Standard Webhooks), their deliveries and replays."),
        (name = "payment doors", description = "Where gateways and Telegram report payments."),
        (name = "operations", description = "Overview, sweep, health, readiness and this document."),
        (name = "console", description = "The staff console: a static app on this API (no token needed for its files)."),
        (name = "mini app", description = "The Mini App: its page at /app/ (the paywall at a channel's or group's door and the buyer's portal, shown inside Telegram) and its buyer API under /app/api/."),
    ),
)]
pub struct ApiDoc;

/// The document, built once: [`ApiDoc`]'s info, tags and shared schemas, the paths of every
/// operation the router registers ([`super::router::routes`]), then what is added by rule.
pub fn document() -> &'static openapi::OpenApi {
    static DOC: OnceLock<openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = super::router::routes().into_openapi();
        SecuritySchemes.modify(&mut doc);
        CommonResponses.modify(&mut doc);
        doc
    })
}

/// `GET /api/openapi.json`: this document (no authentication).
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "getOpenApiDocument",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document of this service.",
        content_type = "application/json", body = Object)),
)]
pub async fn openapi_json() -> Response {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    let body = BYTES.get_or_init(|| serde_json::to_vec(document()).expect("document serializes"));
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.as_slice(),
    )
        .into_response()
}

/// The state enums (`text_enum!`) as string enums, with their JSON spellings and schema names.
macro_rules! text_enum_schemas {
    ($($ty:ty => $name:literal: $doc:literal),+ $(,)?) => {$(
        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some($doc))
                    .enum_values(Some(<$ty>::ALL.iter().map(|v| v.as_str())))
                    .into()
            }
        }

        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    )+};
}

text_enum_schemas! {
    membership_domain::Status => "MembershipStatus":
        "`active` until `expires_at`, then `grace` for the channel's grace period, then `expired`.",
    membership_domain::EventCause => "EventCause": "Who made a membership change.",
    order_domain::Status => "OrderStatus": "`pending` until a payment pays it or staff cancel it.",
    crate::catalog::plans::Kind => "PlanKind": "`paid`, or a free `trial` (once per buyer and channel).",
    core::Outcome => "PaymentOutcome": "What became of a stored payment.",
    core::Reason => "PaymentReason":
        "Why a payment was not applied (or a Telegram pre-checkout refused).",
    crate::outbox::effects::Kind => "EffectKind": "What an effect does on Telegram.",
    crate::payments::star_subscriptions::Status => "StarSubscriptionStatus":
        "`active` (renews) or `cancelled`.",
    crate::payments::star_subscriptions::CancelledBy => "CancelledBy":
        "Who cancelled a Stars subscription.",
    crate::telegram::audits::Status => "AuditStatus":
        "`running`, then `done` or `failed` (see `error`).",
    crate::outbox::effects::Status => "EffectStatus":
        "`pending` (queued or being retried), `done`, or `failed` (a dead letter).",
    crate::messages::Kind => "MessageKind":
        "What a message to a member is: one recipient's `broadcast`, or an automation's.",
    crate::messages::Outcome => "MessageOutcome":
        "What came of a message to a member: `sent`, `blocked` (the buyer blocked the bot), \
         `failed` or `skipped` (see its `note`).",
    crate::messages::broadcasts::Status => "BroadcastStatus":
        "`scheduled` until `send_at`, `sending` (recipients fixed), then `finished` or \
         `cancelled`.",
    crate::present::locale::Language => "Language":
        "A language the bot speaks: `en` (English), `uk` (Ukrainian), `ru` (Russian).",
    crate::referrals::lines::Kind => "LineKind":
        "What a commission line is for: a referred buyer's `first` purchase, a `renewal`, or \
         the negative `reversal` of a paid line whose payment was taken back.",
    crate::referrals::lines::Status => "LineStatus":
        "Where a commission line stands now: `pending` (in its hold), `payable` (past it), \
         `paid` (by a payout) or `reversed` (taken back before it was paid).",
    crate::access::join_requests::State => "JoinRequestState":
        "A join request at a Mini App door: `waiting`, then `approved` or `declined`.",
    crate::payments::receipts::State => "ReceiptState":
        "A fiscal receipt: `pending` (owed, being issued or retried), `done` (registered by \
         Checkbox, with its public page) or `failed` (its effect was dead-lettered).",
    crate::payments::refunds::by_staff::State => "StaffRefundState":
        "Where a refund staff asked for stands: `pending` (being tried), `done` (the gateway \
         confirmed; the payment is `refunded`) or `failed` (refused for good; the payment is \
         unchanged).",
    crate::payments::gateways::wayforpay::checks::State => "ReconciliationState":
        "`chasing` (asked again later), `found` (the gateway's answer was stored as a payment), \
         `gave_up` (not paid 72 hours after the link) or `settled` (paid, cancelled or refunded).",
    crate::payments::gateways::monobank::Status => "MonobankInvoiceStatus":
        "A Monobank invoice's status as Monobank reports it: `created`, `processing`, `hold`, \
         `success` (paid), `failure`, `reversed` (refunded) or `expired`.",
    crate::payments::gateways::monobank::invoices::Chase => "MonobankChase":
        "The reconcile of a Monobank invoice: `chasing` (asked again later), `found` (its \
         answer was stored as a payment), `gave_up` (not final 72 hours after it was made) or \
         `settled` (a final report was acted on, or its page was never given out).",
}

/// The security schemes.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, doc: &mut openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let bearer = |format: Option<&str>, description: &str| {
            let mut b = HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(description));
            if let Some(f) = format {
                b = b.bearer_format(f);
            }
            SecurityScheme::Http(b.build())
        };
        let header = |name: &str, description: &str| {
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                name,
                description,
            )))
        };
        let schemes = [
            (
                STAFF_JWT,
                bearer(
                    Some("JWT"),
                    "A staff token from POST /api/auth/login (HS256; `exp` enforced, `iat` \
                     not in the future, lifetime at most `JWT_TTL_SECS`; ended at once by a \
                     password change of its account).",
                ),
            ),
            (
                SWEEP_TOKEN,
                bearer(
                    None,
                    "`SWEEP_TOKEN`, when set: lets cron call POST /api/sweep without a login.",
                ),
            ),
            (
                WEBHOOK_ID,
                header(
                    "webhook-id",
                    "Standard Webhooks v1: the message id (signed with the timestamp and body).",
                ),
            ),
            (
                WEBHOOK_TIMESTAMP,
                header(
                    "webhook-timestamp",
                    "Standard Webhooks v1: Unix seconds, within 5 minutes of server time.",
                ),
            ),
            (
                WEBHOOK_SIGNATURE,
                header(
                    "webhook-signature",
                    "Standard Webhooks v1: `v1,<base64 HMAC-SHA256 of id.timestamp.body>` with \
                     a key of `WEBHOOK_SECRET(S)`; several may be sent, space-separated.",
                ),
            ),
            (
                STRIPE_SIGNATURE,
                header(
                    "Stripe-Signature",
                    "Stripe's `t=<unix>,v1=<hex HMAC-SHA256 of t.body>` with \
                     `STRIPE_WEBHOOK_SECRET`; any `v1` may match; `t` within 5 minutes.",
                ),
            ),
            (
                MONOBANK_SIGNATURE,
                header(
                    "X-Sign",
                    "Monobank's base64 ECDSA (P-256, SHA-256, DER) signature of the raw body, \
                     verified with the merchant public key of `GET /api/merchant/pubkey` \
                     (cached; fetched again once when a signature does not verify).",
                ),
            ),
            (
                CRYPTOPAY_SIGNATURE,
                header(
                    "crypto-pay-api-signature",
                    "Crypto Pay's hex HMAC-SHA256 of the raw body, keyed with SHA-256 of \
                     `CRYPTOPAY_TOKEN`.",
                ),
            ),
            (
                TELEGRAM_INIT_DATA,
                header(
                    "Authorization",
                    "`tma <initData>`: the Mini App's `Telegram.WebApp.initData`, signed by \
                     Telegram with a key derived from the bot token; `auth_date` no older than \
                     `MINI_APP_MAX_AGE_SECS`.",
                ),
            ),
            (
                TELEGRAM_SECRET,
                header(
                    telegram::SECRET_HEADER,
                    "The `secret_token` given to setWebhook (`TELEGRAM_WEBHOOK_SECRET`).",
                ),
            ),
        ];
        for (name, scheme) in schemes {
            components.security_schemes.insert(name.into(), scheme);
        }
    }
}

/// The error responses and headers every operation shares, added by rule (module doc).
struct CommonResponses;

impl CommonResponses {
    fn problem(description: &str, headers: &[(&str, &str)]) -> openapi::Response {
        let mut r = ResponseBuilder::new().description(description).content(
            PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(RefOr::Ref(openapi::Ref::from_schema_name("Problem"))))
                .build(),
        );
        for (name, description) in headers {
            r = r.header(*name, string_header(description));
        }
        r = r.header("x-request-id", request_id_header());
        r.build()
    }

    /// The shared responses, by component name and status.
    fn shared() -> [(&'static str, &'static str, openapi::Response); 7] {
        [
            (
                "BadRequest",
                "400",
                Self::problem(
                    "Malformed: invalid JSON, a wrong type, an unknown field or query parameter, \
                     or a malformed Idempotency-Key.",
                    &[],
                ),
            ),
            (
                "Unauthorized",
                "401",
                Self::problem(
                    "Missing or invalid credentials.",
                    &[("WWW-Authenticate", "`Bearer`.")],
                ),
            ),
            (
                "Forbidden",
                "403",
                Self::problem(
                    "The account's role may not call this operation (`x-required-role` names \
                     the least role that may). Checked before anything is read, so it says \
                     nothing of whether the target exists.",
                    &[],
                ),
            ),
            (
                "NotFound",
                "404",
                Self::problem("No such record (a non-numeric id included).", &[]),
            ),
            (
                "PayloadTooLarge",
                "413",
                Self::problem("The body is larger than 256 KiB.", &[]),
            ),
            (
                "Unavailable",
                "503",
                Self::problem(
                    "Retry later: the database is unavailable or busy, this door is not \
                     configured, or the request timed out.",
                    &[("Retry-After", "Seconds to wait.")],
                ),
            ),
            // Listed so a client sees its shape; never expected (a 500 is a bug, logged with
            // the request id) and never referenced by an operation.
            (
                "InternalError",
                "500",
                Self::problem(
                    "An internal error; the body says nothing of the cause.",
                    &[],
                ),
            ),
        ]
    }
}

fn string_header(description: &str) -> openapi::Header {
    HeaderBuilder::new()
        .schema(String::schema())
        .description(Some(description))
        .build()
}

impl Modify for CommonResponses {
    fn modify(&self, doc: &mut openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        for (name, _, response) in Self::shared() {
            components.responses.insert(name.into(), RefOr::T(response));
        }
        for (path, item) in doc.paths.paths.iter_mut() {
            let has_id = path.contains('{');
            for op in operations_mut(item) {
                add_common(op, has_id);
            }
        }
    }
}

/// An optional body (`request_body(content = Option<T>)`) is absent or a `T`, never `null`
/// (which every handler refuses with 400): utoipa writes it as `oneOf: [null, T]`; keep `T`.
fn not_null_body(op: &mut Operation) {
    let Some(body) = op.request_body.as_mut() else {
        return;
    };
    for content in body.content.values_mut() {
        let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema else {
            continue;
        };
        let null = json!({"type": "null"});
        let rest: Vec<_> = one_of
            .items
            .iter()
            .filter(|s| serde_json::to_value(s).ok().as_ref() != Some(&null))
            .cloned()
            .collect();
        if let [only] = rest.as_slice() {
            content.schema = Some(only.clone());
        }
    }
}

fn add_common(op: &mut Operation, has_id: bool) {
    not_null_body(op);
    let params = op.parameters.as_deref().unwrap_or_default();
    let has_query = params
        .iter()
        .any(|p| matches!(p.parameter_in, ParameterIn::Query));
    let has_key = params.iter().any(|p| {
        matches!(p.parameter_in, ParameterIn::Header)
            && p.name.eq_ignore_ascii_case("idempotency-key")
    });
    let has_body = op.request_body.is_some();
    let staff = op.security.as_ref().is_some_and(|reqs| {
        serde_json::to_value(reqs)
            .map(|v| v.to_string().contains(STAFF_JWT))
            .unwrap_or(false)
    });
    // Every role may call a `viewer` operation: only the others can answer 403.
    let restricted = op
        .extensions
        .as_ref()
        .and_then(|x| x.get(super::roles::EXTENSION))
        .is_some_and(|role| role != "viewer");
    let wanted = [
        ("BadRequest", "400", has_body || has_query || has_key),
        ("Unauthorized", "401", staff),
        ("Forbidden", "403", restricted),
        ("NotFound", "404", has_id),
        ("PayloadTooLarge", "413", has_body),
        ("Unavailable", "503", true),
    ];
    for (name, status, wanted) in wanted {
        if wanted && !op.responses.responses.contains_key(status) {
            op.responses.responses.insert(
                status.into(),
                RefOr::Ref(openapi::Ref::new(format!("#/components/responses/{name}"))),
            );
        }
    }
    for response in op.responses.responses.values_mut() {
        if let RefOr::T(r) = response {
            r.headers
                .entry("x-request-id".into())
                .or_insert_with(request_id_header);
        }
    }
}

fn request_id_header() -> openapi::Header {
    string_header(
        "The request's id: the one sent in `x-request-id` when it is 1..64 of `A-Za-z0-9-_.`, \
         else a generated UUID.",
    )
}
