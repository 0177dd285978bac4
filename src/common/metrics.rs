//! Prometheus metrics: every series the service exports and the recorder. The `/metrics`
//! listener and the sampler of gauges read from the database are [`crate::app::metrics`].
//!
//! Metrics are off unless `METRICS_ADDR` is set. Then [`install`] sets the process-wide
//! recorder (`metrics-exporter-prometheus`), [`listen`](crate::app::metrics::listen) serves `GET /metrics` on that address
//! in the standard text exposition format — a listener of its own, so the public port never
//! shows it — and [`sample_loop`](crate::app::metrics::sample_loop) refreshes the gauges that come from the database every
//! [`SAMPLE_EVERY`]. Without a recorder every function here is a no-op.
//!
//! The code that does the work calls one function per event ([`payment`], [`pre_checkout`],
//! [`SweepRun`], [`bot_api_call`], the HTTP layer [`track_http`]) with plain values — so the
//! payment core, the sweep and the Bot API client can report without this module depending on
//! them; the metric names are the constants below, and `docs/operations.md` lists them with
//! their labels.
//!
//! Cardinality is bounded by construction: labels carry only values from fixed sets — the
//! code's (routes, Bot API methods, the labels written here) or the schema's (a payment's
//! outcome and reason) — never an id, an amount, a raw path or a user-supplied string. The
//! matched route is the router's pattern (`/api/orders/{id}`), a door-1 gateway (a name the
//! gateway chooses) is `other`, an unknown HTTP method is `other`.

use std::{
    future::Future,
    sync::OnceLock,
    time::{Duration, Instant},
};

use axum::{
    extract::{MatchedPath, Request},
    http::{Method, StatusCode},
    middleware::Next,
    response::Response,
};
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::common::vocabulary::Gateway;

// ---- names ----

/// Counter: payments stored, by `door` (`webhook`, `wayforpay`, `telegram`), `gateway`
/// (`wayforpay`, `telegram_stars`, `other`), `outcome` and `reason` (`none` when applied).
pub const PAYMENTS: &str = "subgate_payments_total";
/// Counter: repeat deliveries of a stored payment (changed nothing), by `door` and `gateway`.
pub const PAYMENT_DUPLICATES: &str = "subgate_payment_duplicates_total";
/// Histogram: request latency by `route` (the matched pattern, `unmatched` for none), `method`
/// and `status` class (`2xx` … `5xx`).
pub const HTTP_REQUEST_DURATION: &str = "subgate_http_request_duration_seconds";
/// Counter: staff logins refused before the password was checked, by `status`: `429` (too many
/// failures for the pair) or `503` (too many logins being checked at once, or no database).
pub const LOGIN_THROTTLED: &str = "subgate_login_throttled_total";
/// Counter: pre-checkout answers by `decision` (`approved`, `refused`, `busy`: "try again").
pub const PRE_CHECKOUT_DECISIONS: &str = "subgate_pre_checkout_decisions_total";
/// Histogram: time to decide a pre-checkout query, by `decision`; Telegram waits 10 s at most.
pub const PRE_CHECKOUT_DURATION: &str = "subgate_pre_checkout_duration_seconds";
/// Histogram: time to answer a join request's query at the door, by `answer` (`approve`,
/// `decline`, `web_app`, `queue`); Telegram waits 10 s at most.
pub const DOOR_ANSWER_DURATION: &str = "subgate_door_answer_duration_seconds";
/// Gauge (sampled): seats held by pending orders whose hold has not run out.
pub const SEATS_HELD: &str = "subgate_seats_held";
/// Counter: sweep runs by `result` (`ok`, `error`).
pub const SWEEP_RUNS: &str = "subgate_sweep_runs_total";
/// Histogram: wall time of a sweep run that finished.
pub const SWEEP_DURATION: &str = "subgate_sweep_duration_seconds";
/// Counter: memberships the sweep moved, by `to` (`grace`, `expired`).
pub const SWEEP_TRANSITIONS: &str = "subgate_sweep_transitions_total";
/// Counter: sweep candidates skipped because a renewal (or another sweep) held their lock.
pub const SWEEP_SKIPPED: &str = "subgate_sweep_skipped_total";
/// Gauge (sampled): effects not done, by `kind` and `status` (`pending`, `failed`).
pub const EFFECTS: &str = "subgate_effects";
/// Gauge (sampled): seconds since the oldest pending effect was enqueued (0: none pending).
pub const EFFECTS_OLDEST_PENDING: &str = "subgate_effects_oldest_pending_age_seconds";
/// Gauge (sampled): dead-lettered effects (`failed`), waiting for staff.
pub const EFFECTS_DEAD_LETTERS: &str = "subgate_effects_dead_letters";
/// Counter: Bot API calls made, by `method` and `result` (`ok`, `rate_limited`, `refused`,
/// `timeout`, `transport`, `bad_response`).
pub const BOT_API_CALLS: &str = "subgate_bot_api_calls_total";
/// Counter: Bot API calls Telegram answered with 429, by `method`.
pub const BOT_API_RATE_LIMITED: &str = "subgate_bot_api_rate_limited_total";
/// Counter: users an audit of a channel's member list found wrong or notable, by `category`.
pub const AUDIT_FINDINGS: &str = "subgate_audit_findings_total";
/// Counter: card payments whose callback never came, found by asking WayForPay
/// (`CHECK_STATUS`) and stored.
pub const RECONCILIATION_FOUND: &str = "subgate_reconciliation_found_total";
/// Counter: `CHECK_STATUS` calls by `result` (`approved`, `refunded`, `not_paid`, `error`: no
/// answer, or one not believed).
pub const RECONCILIATION_CHECKS: &str = "subgate_reconciliation_checks_total";
/// Gauge (sampled): card orders being chased at the gateway (`gateway_checks` `chasing`).
pub const RECONCILIATION_PENDING: &str = "subgate_reconciliation_pending";
/// Histogram: seconds from a payment's commit (its grant's enqueueing, in the payment's
/// transaction) to the grant message recorded done.
pub const PAYMENT_GRANT_DURATION: &str = "subgate_payment_grant_seconds";
/// Gauge (at scrape): the pool's `DB_POOL_SIZE`.
pub const DB_POOL_MAX: &str = "subgate_db_pool_max_connections";
/// Gauge (at scrape): connections open in the pool.
pub const DB_POOL_SIZE: &str = "subgate_db_pool_connections";
/// Gauge (at scrape): connections lent out.
pub const DB_POOL_IN_USE: &str = "subgate_db_pool_in_use";
/// Gauge (at scrape): requests waiting for a connection.
pub const DB_POOL_WAITING: &str = "subgate_db_pool_waiting";

/// Gauge (sampled): channels where the bot lacks the rights to manage members (`no_rights`).
pub const CHANNELS_NO_RIGHTS: &str = "subgate_channels_no_rights";
/// Gauge (sampled): pending access effects waiting in chats where the bot has no rights.
pub const EFFECTS_PAUSED_NO_RIGHTS: &str = "subgate_effects_paused_no_rights";
/// Gauge: outbound webhook deliveries waiting to be sent to enabled endpoints (sampled by the
/// deliverer every [`SAMPLE_EVERY`]).
pub const OUTBOUND_QUEUE: &str = "subgate_outbound_webhook_queue_depth";
/// Counter: outbound webhook attempts by `result`: `delivered`, `retry` (failed, tried again
/// later) or `failed` (failed for good: the schedule ran out, or `410 Gone`).
pub const OUTBOUND_ATTEMPTS: &str = "subgate_outbound_webhook_attempts_total";
/// Counter: promo codes given to the bot (`/code`, a deep link with a code), by `result`:
/// `applied`, `refused` (a real code that cannot be used now), `wrong` (unknown or
/// inactive: "there is no such code") or `limited` (refused unread: too many wrong codes).
pub const BOT_CODE_GUESSES: &str = "subgate_bot_code_guesses_total";
/// Counter: Telegram `subscription` updates, by `state` (`canceled`, `active`, `failed`,
/// `other`) and `outcome` (`applied`, `unchanged`, `review`, `repeated`).
pub const STAR_SUBSCRIPTION_UPDATES: &str = "subgate_star_subscription_updates_total";
/// Counter: messages to members decided, by `kind` (`broadcast`, `unpaid_checkout`,
/// `win_back`, `cancel_offer`, `renewal_failed`) and `outcome` (`sent`, `blocked`, `failed`,
/// `skipped`).
pub const MEMBER_MESSAGES: &str = "subgate_member_messages_total";
/// How often [`sample_loop`](crate::app::metrics::sample_loop) reads the database gauges.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(15);

/// Request latency buckets, in seconds (webhooks and staff requests; the request timeout is
/// 30 s by default).
const HTTP_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
];
/// Pre-checkout buckets, up to Telegram's 10 s (the decision answers within 8 s).
const PRE_CHECKOUT_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 6.0, 8.0, 10.0,
];
/// Payment-to-grant buckets: a second when all is well, up to the hour an outage may take.
const PAYMENT_GRANT_BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0,
];
/// Sweep run buckets: a few rows take milliseconds, a million about a minute.
const SWEEP_BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

// ---- recorder and listener ----

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once; later calls return the same handle).
/// Fails only when another recorder was installed first.
pub fn install() -> Result<PrometheusHandle, String> {
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let mut result = Ok(());
    let handle = HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets(&HTTP_BUCKETS)
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full(PRE_CHECKOUT_DURATION.into()),
                    &PRE_CHECKOUT_BUCKETS,
                )
            })
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full(SWEEP_DURATION.into()), &SWEEP_BUCKETS)
            })
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full(DOOR_ANSWER_DURATION.into()),
                    &PRE_CHECKOUT_BUCKETS,
                )
            })
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full(PAYMENT_GRANT_DURATION.into()),
                    &PAYMENT_GRANT_BUCKETS,
                )
            })
            .expect("bucket lists are not empty");
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        result = metrics::set_global_recorder(recorder).map_err(|e| e.to_string());
        handle
    });
    result?;
    describe();
    Ok(handle.clone())
}

/// The installed recorder's handle, if [`install`] ran.
pub fn handle() -> Option<PrometheusHandle> {
    HANDLE.get().cloned()
}

/// The `HELP` text of every series.
fn describe() {
    use metrics::Unit;
    describe_counter!(
        PAYMENTS,
        "Payments stored, by door, gateway, outcome and reason."
    );
    describe_counter!(
        PAYMENT_DUPLICATES,
        "Repeat deliveries of a stored payment (nothing changed)."
    );
    describe_histogram!(
        HTTP_REQUEST_DURATION,
        Unit::Seconds,
        "HTTP request latency by matched route, method and status class."
    );
    describe_counter!(
        LOGIN_THROTTLED,
        "Staff logins refused before the password check (429: failures, 503: busy)."
    );
    describe_counter!(PRE_CHECKOUT_DECISIONS, "Pre-checkout answers by decision.");
    describe_histogram!(
        PRE_CHECKOUT_DURATION,
        Unit::Seconds,
        "Time to answer a pre-checkout query (Telegram waits 10 s)."
    );
    describe_histogram!(
        DOOR_ANSWER_DURATION,
        Unit::Seconds,
        "Time to answer a join request's query at the door (Telegram waits 10 s)."
    );
    describe_gauge!(SEATS_HELD, "Seats held by pending orders (sampled).");
    describe_counter!(SWEEP_RUNS, "Sweep runs by result.");
    describe_histogram!(SWEEP_DURATION, Unit::Seconds, "Wall time of sweep runs.");
    describe_counter!(SWEEP_TRANSITIONS, "Memberships moved by the sweep.");
    describe_counter!(
        SWEEP_SKIPPED,
        "Sweep candidates skipped while a renewal held their lock."
    );
    describe_gauge!(EFFECTS, "Effects not done, by kind and status (sampled).");
    describe_gauge!(
        EFFECTS_OLDEST_PENDING,
        Unit::Seconds,
        "Age of the oldest pending effect (sampled)."
    );
    describe_gauge!(EFFECTS_DEAD_LETTERS, "Dead-lettered effects (sampled).");
    describe_gauge!(
        CHANNELS_NO_RIGHTS,
        "Channels where the bot cannot manage members (sampled)."
    );
    describe_gauge!(
        EFFECTS_PAUSED_NO_RIGHTS,
        "Access effects paused by missing bot rights (sampled)."
    );
    describe_counter!(BOT_API_CALLS, "Bot API calls by method and result.");
    describe_counter!(BOT_API_RATE_LIMITED, "Bot API calls answered 429.");
    describe_counter!(
        AUDIT_FINDINGS,
        "Users audits of member lists found, by category."
    );
    describe_counter!(
        RECONCILIATION_FOUND,
        "Lost card callbacks found by CHECK_STATUS and stored."
    );
    describe_counter!(RECONCILIATION_CHECKS, "CHECK_STATUS calls by result.");
    describe_gauge!(
        RECONCILIATION_PENDING,
        "Card orders being asked about at the gateway (sampled)."
    );
    describe_histogram!(
        PAYMENT_GRANT_DURATION,
        Unit::Seconds,
        "Time from a payment's commit to its grant message."
    );
    describe_gauge!(
        OUTBOUND_QUEUE,
        "Outbound webhook deliveries waiting for enabled endpoints (sampled)."
    );
    describe_counter!(OUTBOUND_ATTEMPTS, "Outbound webhook attempts by result.");
    describe_counter!(BOT_CODE_GUESSES, "Promo codes given to the bot, by result.");
    describe_counter!(
        STAR_SUBSCRIPTION_UPDATES,
        "Telegram subscription updates, by state and outcome."
    );
    describe_counter!(
        MEMBER_MESSAGES,
        "Messages to members (broadcasts, automations) decided, by kind and outcome."
    );
    describe_gauge!(DB_POOL_MAX, "Maximum database connections (DB_POOL_SIZE).");
    describe_gauge!(DB_POOL_SIZE, "Database connections open.");
    describe_gauge!(DB_POOL_IN_USE, "Database connections in use.");
    describe_gauge!(
        DB_POOL_WAITING,
        "Requests waiting for a database connection."
    );
}

// ---- events ----

/// The door a payment came through, told by its gateway: door 1 refuses the gateways that have
/// doors of their own.
fn door_and_gateway(gateway: &Gateway) -> (&'static str, &'static str) {
    match gateway {
        Gateway::WayForPay => ("wayforpay", Gateway::WAYFORPAY),
        Gateway::Stripe => ("stripe", Gateway::STRIPE),
        Gateway::Monobank => ("monobank", Gateway::MONOBANK),
        Gateway::CryptoPay => ("cryptopay", Gateway::CRYPTOPAY),
        Gateway::TelegramStars => ("telegram", Gateway::TELEGRAM_STARS),
        Gateway::Standard(_) => ("webhook", "other"),
    }
}

/// A label from a vocabulary the code or the schema fixes (a payment's outcome and reason are
/// CHECKed columns, a Bot API method is a name in the code): kept when it looks like one,
/// `other` otherwise, so even a bug cannot open the label to arbitrary values.
fn vocabulary(value: &str) -> String {
    let word = (1..=40).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let label = if word { value } else { "other" };
    label.to_owned()
}

/// A payment went through the core: a new one is counted by outcome, a repeat as a duplicate.
/// `outcome` and `reason` are the stored payment's codes.
pub fn payment(gateway: &Gateway, duplicate: bool, outcome: &str, reason: Option<&str>) {
    let (door, gateway) = door_and_gateway(gateway);
    if duplicate {
        counter!(PAYMENT_DUPLICATES, "door" => door, "gateway" => gateway).increment(1);
        return;
    }
    let outcome = vocabulary(outcome);
    let reason = reason.map_or_else(|| "none".to_owned(), vocabulary);
    counter!(PAYMENTS, "door" => door, "gateway" => gateway, "outcome" => outcome,
        "reason" => reason)
    .increment(1);
}

/// A `CHECK_STATUS` call ended: `result` is `approved`, `refunded`, `not_paid` or `error`.
pub fn reconciliation_check(result: &'static str) {
    counter!(RECONCILIATION_CHECKS, "result" => result).increment(1);
}

/// The outbound webhook queue's depth, as the deliverer read it.
pub fn outbound_queue(depth: i64) {
    gauge!(OUTBOUND_QUEUE).set(depth as f64);
}

/// An outbound webhook attempt ended: `delivered`, `retry` or `failed`.
pub fn outbound_attempt(result: &'static str) {
    counter!(OUTBOUND_ATTEMPTS, "result" => result).increment(1);
}

/// A lost card callback was found by `CHECK_STATUS` and its payment stored.
pub fn reconciliation_found() {
    counter!(RECONCILIATION_FOUND).increment(1);
}

/// Times a pre-checkout decision and counts its answer by `label` (`approved`, `busy`,
/// `refused`: `telegram::pre_checkout::Answer::metric_label`); returns the answer unchanged.
pub async fn pre_checkout<A>(
    decision: impl Future<Output = A>,
    label: impl Fn(&A) -> &'static str,
) -> A {
    let started = Instant::now();
    let answer = decision.await;
    let label = label(&answer);
    counter!(PRE_CHECKOUT_DECISIONS, "decision" => label).increment(1);
    histogram!(PRE_CHECKOUT_DURATION, "decision" => label).record(started.elapsed());
    answer
}

/// Records how long the door took to answer a join request's query, by its `answer`.
pub fn door_answer(answer: &'static str, took: std::time::Duration) {
    histogram!(DOOR_ANSWER_DURATION, "answer" => answer).record(took);
}

/// One sweep run: [`SweepRun::start`] at its start, [`SweepRun::finished`] with its report.
/// A run dropped without a report (it failed) counts as `error`.
#[must_use = "a run not finished counts as failed"]
pub struct SweepRun {
    finished: bool,
}

impl SweepRun {
    pub fn start() -> SweepRun {
        SweepRun { finished: false }
    }

    /// Counts the run (one that shutdown stopped between batches too), its duration and its
    /// moves, from its report (`sweep::SweepReport`).
    pub fn finished(mut self, duration_ms: u64, to_grace: u64, to_expired: u64, skipped: u64) {
        self.finished = true;
        counter!(SWEEP_RUNS, "result" => "ok").increment(1);
        histogram!(SWEEP_DURATION).record(duration_ms as f64 / 1000.0);
        counter!(SWEEP_TRANSITIONS, "to" => "grace").increment(to_grace);
        counter!(SWEEP_TRANSITIONS, "to" => "expired").increment(to_expired);
        counter!(SWEEP_SKIPPED).increment(skipped);
    }
}

impl Drop for SweepRun {
    fn drop(&mut self) {
        if !self.finished {
            counter!(SWEEP_RUNS, "result" => "error").increment(1);
        }
    }
}

/// An audit found a user of `category` (`crate::telegram::audits::Category`).
pub fn audit_finding(category: &'static str) {
    counter!(AUDIT_FINDINGS, "category" => category).increment(1);
}

/// A promo code was given to the bot: `applied`, `refused`, `wrong` or `limited`
/// ([`BOT_CODE_GUESSES`]).
pub fn bot_code_guess(result: &'static str) {
    counter!(BOT_CODE_GUESSES, "result" => result).increment(1);
}

/// A Telegram `subscription` update was handled ([`STAR_SUBSCRIPTION_UPDATES`]).
pub fn star_subscription_update(state: &'static str, outcome: &'static str) {
    counter!(STAR_SUBSCRIPTION_UPDATES, "state" => state, "outcome" => outcome).increment(1);
}

/// A message to a member was decided ([`MEMBER_MESSAGES`]); both labels are spellings of the
/// schema's fixed sets.
pub fn member_message(kind: &'static str, outcome: &'static str) {
    counter!(MEMBER_MESSAGES, "kind" => kind, "outcome" => outcome).increment(1);
}

/// A Bot API call was made (not a dry run, not held back by the pacer); `outcome` is `ok` or
/// the failure's label (`telegram::bot_api::BotError::metric_label`).
pub fn bot_api_call(method: &str, outcome: &'static str) {
    let method = vocabulary(method);
    if outcome == "rate_limited" {
        counter!(BOT_API_RATE_LIMITED, "method" => method.clone()).increment(1);
    }
    counter!(BOT_API_CALLS, "method" => method, "result" => outcome).increment(1);
}

/// The worker recorded a payment's grant done, `secs` after the payment committed.
pub fn payment_granted(secs: f64) {
    histogram!(PAYMENT_GRANT_DURATION).record(secs.max(0.0));
}

/// The HTTP layer: times every request by matched route, method and status class, and counts
/// the refusals of the login throttle. Added with `Router::layer`, so it runs after routing
/// (the matched route is known) and outside the timeout and panic layers (their statuses count).
pub async fn track_http(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let method = http_method(req.method());
    let started = Instant::now();
    let response = next.run(req).await;
    let status = response.status();
    let class = match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    };
    let route = route.unwrap_or_else(|| "unmatched".to_owned());
    if route == "/api/auth/login"
        && matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        )
    {
        counter!(LOGIN_THROTTLED, "status" => status.as_str().to_owned()).increment(1);
    }
    histogram!(HTTP_REQUEST_DURATION, "route" => route, "method" => method, "status" => class)
        .record(started.elapsed());
    response
}

fn http_method(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn door_1_gateways_share_one_label() {
        assert_eq!(
            door_and_gateway(&Gateway::named("acme")),
            ("webhook", "other")
        );
        assert_eq!(
            door_and_gateway(&Gateway::named("anything-else")),
            ("webhook", "other")
        );
        assert_eq!(
            door_and_gateway(&Gateway::named("wayforpay")),
            ("wayforpay", "wayforpay")
        );
        assert_eq!(
            door_and_gateway(&Gateway::named("telegram_stars")),
            ("telegram", "telegram_stars")
        );
    }

    #[test]
    fn unknown_methods_and_odd_values_are_other() {
        assert_eq!(http_method(&Method::GET), "GET");
        assert_eq!(http_method(&Method::from_bytes(b"BREW").unwrap()), "other");
        assert_eq!(vocabulary("sendMessage"), "sendMessage");
        assert_eq!(vocabulary("refunded_elsewhere"), "refunded_elsewhere");
        for odd in ["", "send message", "a/b", "é", &"x".repeat(41)] {
            assert_eq!(vocabulary(odd), "other", "{odd:?}");
        }
    }
}
