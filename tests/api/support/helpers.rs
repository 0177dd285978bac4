//! The test harness: a [`TestApp`] per test, each with its own PostgreSQL database cloned from
//! a migrated template, and typed helpers for the requests tests make.
//!
//! `SUBGATE_TEST_DATABASE_URL` (set by `make test`) names an admin connection; the default is
//! the local server on 127.0.0.1:5432. The template's name carries a hash of the migrations, so
//! a changed schema builds a new template. A per-test database is named
//! `subgate_test_<unix time>_<run>_<random>`: each [`TestApp`] drops its own when dropped,
//! `make test` drops every database of its run (`SUBGATE_TEST_RUN`) when cargo exits, and
//! databases left by runs that ended over two hours ago (a crash) are dropped at start-up.
//!
//! With `SUBGATE_RECORD_STATEMENTS` set (a full `make test`), the application's connections go
//! through [`statements`], which writes down every statement they send for the snapshot in
//! `tests/snapshots/statements.sql`; the tests' own connections ([`TestApp::db`]) do not.

use std::{collections::HashMap, sync::Arc};

use axum::{
    Router,
    body::Body,
    http::{HeaderMap, Method, Request, StatusCode},
};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subgate::{AppState, Config, db};
use tokio::sync::OnceCell;
use tokio_postgres::NoTls;
use tower::ServiceExt;

pub mod statements;

pub const ADMIN_EMAIL: &str = "admin@example.com";
pub const ADMIN_PASSWORD: &str = "correct horse battery staple";
pub const JWT_SECRET: &str = "test-jwt-secret-that-is-long-enough-0123456789";
/// The Standard Webhooks test key from the public specification.
pub const WEBHOOK_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
pub const WAYFORPAY_ACCOUNT: &str = "test_merch_n1";
pub const WAYFORPAY_KEY: &str = "flk3409refn54t54t*FNJRET";
pub const TELEGRAM_SECRET: &str = "telegram-webhook-secret-token_0123";
pub const SWEEP_TOKEN: &str = "sweep-token-0123456789abcdef0123456789";

/// The admin URL tests create databases through.
pub fn admin_url() -> String {
    std::env::var("SUBGATE_TEST_DATABASE_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// `admin_url` with its database replaced by `name`.
pub fn url_for(name: &str) -> String {
    let mut url = url::Url::parse(&admin_url()).expect("SUBGATE_TEST_DATABASE_URL is a URL");
    url.set_path(&format!("/{name}"));
    url.to_string()
}

async fn admin_client() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&admin_url(), NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL for tests ({e}); run `make test`"));
    tokio::spawn(conn);
    client
}

static TEMPLATE: OnceCell<String> = OnceCell::const_new();

/// Creates (once per process) the migrated template database and drops databases left by
/// earlier runs. Returns the template's name.
async fn template() -> &'static str {
    TEMPLATE
        .get_or_init(|| async {
            let mut hash = Sha256::new();
            for (version, name, sql) in db::MIGRATIONS {
                hash.update(version.to_be_bytes());
                hash.update(name.as_bytes());
                hash.update(sql.as_bytes());
            }
            let name = format!("subgate_tpl_{}", &hex::encode(hash.finalize())[..16]);
            let admin = admin_client().await;
            // Serialize template creation across processes (cargo runs test binaries in turn,
            // but a developer may run two at once).
            admin
                .execute("SELECT pg_advisory_lock(7262012)", &[])
                .await
                .unwrap();
            // Per-test databases carry their creation time in their name; drop those left by
            // runs that ended over two hours ago, never those of a run going on beside this one.
            let cutoff = chrono::Utc::now().timestamp() - 2 * 3600;
            let stale = admin
                .query(
                    "SELECT datname FROM pg_database WHERE datname LIKE 'subgate\\_test\\_%'",
                    &[],
                )
                .await
                .unwrap();
            for row in stale {
                let db: String = row.get(0);
                let created = db
                    .strip_prefix("subgate_test_")
                    .and_then(|rest| rest.split('_').next())
                    .and_then(|t| t.parse::<i64>().ok())
                    .unwrap_or(0);
                if created < cutoff {
                    let _ = admin
                        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"))
                        .await;
                }
            }
            let exists = admin
                .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
                .await
                .unwrap()
                .is_some();
            if !exists {
                let building = format!("{name}_building");
                admin
                    .batch_execute(&format!(
                        "DROP DATABASE IF EXISTS \"{building}\" WITH (FORCE)"
                    ))
                    .await
                    .unwrap();
                admin
                    .batch_execute(&format!("CREATE DATABASE \"{building}\""))
                    .await
                    .unwrap();
                let pool = db::pool(&url_for(&building), 2).unwrap();
                db::migrate(&pool).await.expect("migrations apply");
                pool.close();
                // Rename only when complete, so a crashed build never leaves a half template.
                admin
                    .batch_execute(&format!(
                        "ALTER DATABASE \"{building}\" RENAME TO \"{name}\""
                    ))
                    .await
                    .unwrap();
            }
            admin
                .execute("SELECT pg_advisory_unlock(7262012)", &[])
                .await
                .unwrap();
            name
        })
        .await
}

/// The tag of this run in database names: `SUBGATE_TEST_RUN` (set by `scripts/test.sh`, which
/// drops the run's databases when cargo exits), else one random tag per test process.
fn run_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        std::env::var("SUBGATE_TEST_RUN")
            .ok()
            .filter(|t| {
                (1..=16).contains(&t.len())
                    && t.bytes()
                        .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
            })
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string()[..8].to_string())
    })
}

/// A new name for a per-test database (see the module documentation), so the run's clean-up
/// finds it.
pub fn new_database_name() -> String {
    format!(
        "subgate_test_{}_{}_{}",
        chrono::Utc::now().timestamp(),
        run_tag(),
        &uuid::Uuid::new_v4().simple().to_string()[..16]
    )
}

/// Creates a fresh database cloned from the template; returns its name.
pub async fn fresh_database() -> String {
    let template = template().await;
    let name = new_database_name();
    let admin = admin_client().await;
    // Cloning fails while another session is connected to the template; none stay connected,
    // but retry briefly in case a concurrent clone is still opening it.
    for attempt in 0.. {
        match admin
            .batch_execute(&format!(
                "CREATE DATABASE \"{name}\" TEMPLATE \"{template}\""
            ))
            .await
        {
            Ok(()) => break,
            Err(e) if attempt < 50 => {
                let _ = e;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cannot clone the template database: {e}"),
        }
    }
    name
}

/// The configuration every test starts from; `overrides` replace or remove (empty value) entries.
pub fn test_env(database_url: &str) -> HashMap<String, String> {
    HashMap::from(
        [
            ("DATABASE_URL", database_url),
            ("JWT_SECRET", JWT_SECRET),
            ("JWT_TTL_SECS", "3600"),
            ("BCRYPT_COST", "4"),
            ("ADMIN_EMAIL", ADMIN_EMAIL),
            ("ADMIN_PASSWORD", ADMIN_PASSWORD),
            ("WEBHOOK_SECRET", WEBHOOK_SECRET),
            ("WAYFORPAY_MERCHANT_ACCOUNT", WAYFORPAY_ACCOUNT),
            ("WAYFORPAY_SECRET_KEY", WAYFORPAY_KEY),
            ("TELEGRAM_WEBHOOK_SECRET", TELEGRAM_SECRET),
            ("SWEEP_TOKEN", SWEEP_TOKEN),
            ("HOLD_SECS", "300"),
            ("DB_POOL_SIZE", "20"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    )
}

/// A running application over its own database.
pub struct TestApp {
    pub state: AppState,
    pub router: Router,
    pub db_name: String,
    /// The tests' own connections to the application's database ([`TestApp::db`]), apart from
    /// the application's pool so that what they send is never taken for the application's
    /// statements ([`statements`]).
    checks: deadpool_postgres::Pool,
    admin_token: Arc<OnceCell<String>>,
}

impl Drop for TestApp {
    /// Drops the test's database (on a thread of its own: `Drop` cannot await). A database
    /// left behind by a crashed run is dropped by a later run (see `template`).
    fn drop(&mut self) {
        self.state.db.close();
        self.checks.close();
        let name = self.db_name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                if let Ok((client, conn)) = tokio_postgres::connect(&admin_url(), NoTls).await {
                    tokio::spawn(conn);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// A response, read whole.
pub struct TestResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub bytes: Vec<u8>,
}

impl TestResponse {
    /// The body as JSON (panics with the body text when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or_else(|_| {
            panic!(
                "status {}: body is not JSON: {}",
                self.status,
                String::from_utf8_lossy(&self.bytes)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status, printing the body when it differs; returns the JSON body.
    #[track_caller]
    pub fn expect(&self, status: u16) -> Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            String::from_utf8_lossy(&self.bytes)
        );
        if self.bytes.is_empty() {
            Value::Null
        } else {
            self.json()
        }
    }
}

/// A plan [`TestApp::insert_plan`] writes.
pub struct NewPlan<'a> {
    pub title: &'a str,
    pub kind: &'a str,
    pub price_minor: i64,
    pub currency: &'a str,
    /// `None`: lifetime.
    pub period_days: Option<i32>,
    pub position: i32,
}

impl TestApp {
    /// A new app with the default test configuration.
    pub async fn spawn() -> TestApp {
        TestApp::spawn_with(|_| {}).await
    }

    /// A new app whose configuration `adjust` may change (an empty value unsets a variable).
    pub async fn spawn_with(adjust: impl FnOnce(&mut HashMap<String, String>)) -> TestApp {
        init_logging();
        let db_name = fresh_database().await;
        let mut env = test_env(&url_for(&db_name));
        adjust(&mut env);
        // The tests' connections go where the application's would, straight to the server; the
        // application's go through the statement recorder while it records.
        let direct = env.get("DATABASE_URL").cloned().unwrap_or_default();
        if let Some(url) = env.get_mut("DATABASE_URL") {
            *url = statements::route(url);
        }
        let config = Config::from_lookup(|k| env.get(k).cloned()).expect("test config is valid");
        let pool = db::pool(config.database_url.expose(), config.db_pool_size).unwrap();
        let checks = db::pool(&direct, 20).unwrap();
        let state = AppState::new(config, pool).await.unwrap();
        subgate::bootstrap_admin(&state).await.unwrap();
        subgate::bootstrap_receipts(&state).await;
        TestApp {
            router: subgate::router(state.clone()),
            state,
            db_name,
            checks,
            admin_token: Arc::new(OnceCell::new()),
        }
    }

    /// A direct connection to this test's database, for checking rows (not one of the
    /// application's: see [`TestApp::app_db`]).
    pub async fn db(&self) -> deadpool_postgres::Object {
        self.checks.get().await.expect("test database connection")
    }

    /// A connection of the application's pool, for calling the application's own functions
    /// with a client, as its handlers do (what they send is recorded with the application's
    /// statements).
    pub async fn app_db(&self) -> deadpool_postgres::Object {
        self.state
            .db
            .get()
            .await
            .expect("application database connection")
    }

    /// Inserts `plan` over `channels` with raw SQL (in the plan's order: the first is its
    /// orders' channel); returns its id. The plans API has tests of its own; the others make
    /// the plans they need directly.
    pub async fn insert_plan(&self, plan: NewPlan<'_>, channels: &[i64]) -> i64 {
        let db = self.db().await;
        let id: i64 = db
            .query_one(
                "INSERT INTO plans (title, kind, price_minor, currency, period_days, position)
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                &[
                    &plan.title,
                    &plan.kind,
                    &plan.price_minor,
                    &plan.currency,
                    &plan.period_days,
                    &plan.position,
                ],
            )
            .await
            .unwrap()
            .get("id");
        for (position, channel) in channels.iter().enumerate() {
            db.execute(
                "INSERT INTO plan_channels (plan_id, channel_id, position) VALUES ($1, $2, $3)",
                &[&id, &(*channel as i32), &(position as i16)],
            )
            .await
            .unwrap();
        }
        id
    }

    /// Sends a request through the router (no socket).
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Body>,
    ) -> TestResponse {
        let mut req = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req.body(body.into()).unwrap()).await
    }

    /// Sends a fully built request through the router and reads the whole response.
    pub async fn send(&self, req: Request<Body>) -> TestResponse {
        let response = self.router.clone().oneshot(req).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        TestResponse {
            status,
            headers,
            bytes,
        }
    }

    /// `POST /api/auth/login`.
    pub async fn login(&self, email: &str, password: &str) -> TestResponse {
        let body = json!({"email": email, "password": password}).to_string();
        self.request(
            Method::POST,
            "/api/auth/login",
            &[("content-type", "application/json")],
            body,
        )
        .await
    }

    /// A bearer token of the admin account (logged in once per app).
    pub async fn token(&self) -> String {
        self.admin_token
            .get_or_init(|| async {
                let r = self.login(ADMIN_EMAIL, ADMIN_PASSWORD).await;
                r.expect(200)["access_token"].as_str().unwrap().to_string()
            })
            .await
            .clone()
    }

    /// Creates the staff account `<role>.staff@example.com` of `role` (once per app) and returns a
    /// fresh bearer token of it.
    pub async fn token_of_role(&self, role: &str) -> String {
        let email = format!("{role}.staff@example.com");
        let password = format!("the {role} passphrase");
        let role = subgate::staff::Role::parse(role).expect("a role");
        subgate::staff::accounts::create_staff(&self.state.db, &email, &password, role, 4)
            .await
            .unwrap();
        let r = self.login(&email, &password).await;
        r.expect(200)["access_token"].as_str().unwrap().to_string()
    }

    /// A staff request with the admin's token and a JSON body (`Value::Null`: no body).
    pub async fn staff(&self, method: Method, path: &str, body: Value) -> TestResponse {
        self.staff_with(method, path, body, &[]).await
    }

    /// Like [`TestApp::staff`] with extra headers.
    pub async fn staff_with(
        &self,
        method: Method,
        path: &str,
        body: Value,
        headers: &[(&str, &str)],
    ) -> TestResponse {
        let auth = format!("Bearer {}", self.token().await);
        let mut all = vec![
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        all.extend_from_slice(headers);
        let body = if body.is_null() {
            Body::empty()
        } else {
            Body::from(body.to_string())
        };
        self.request(method, path, &all, body).await
    }

    pub async fn get(&self, path: &str) -> TestResponse {
        self.staff(Method::GET, path, Value::Null).await
    }

    pub async fn post(&self, path: &str, body: Value) -> TestResponse {
        self.staff(Method::POST, path, body).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> TestResponse {
        self.staff(Method::PATCH, path, body).await
    }

    pub async fn delete(&self, path: &str) -> TestResponse {
        self.staff(Method::DELETE, path, Value::Null).await
    }

    /// Creates a subscriber; returns its JSON.
    pub async fn create_subscriber(&self, telegram_user_id: i64) -> Value {
        self.post(
            "/api/subscribers",
            json!({"telegram_user_id": telegram_user_id, "username": format!("user{telegram_user_id}")}),
        )
        .await
        .expect(201)
    }

    /// Creates an active channel: 199.00 UAH for 30 days, no grace, no seat limit, unless
    /// `extra` overrides fields.
    pub async fn create_channel(&self, telegram_chat_id: i64, extra: Value) -> Value {
        let mut body = json!({
            "telegram_chat_id": telegram_chat_id,
            "title": format!("Channel {telegram_chat_id}"),
            "price_minor": 19900,
            "currency": "UAH",
            "billing_period_days": 30,
        });
        if let Value::Object(extra) = extra {
            body.as_object_mut().unwrap().extend(extra);
        }
        self.post("/api/channels", body).await.expect(201)
    }
}

fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("TEST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
    });
}

impl TestApp {
    /// `POST /api/webhook/telegram` with the configured secret token: delivers one Telegram
    /// `Update` (given as JSON) the way Telegram's webhook does.
    pub async fn post_telegram_update(&self, update: Value) -> TestResponse {
        self.request(
            Method::POST,
            "/api/webhook/telegram",
            &[
                ("content-type", "application/json"),
                ("x-telegram-bot-api-secret-token", TELEGRAM_SECRET),
            ],
            update.to_string(),
        )
        .await
    }
}

// ---- payments: orders, signed webhooks (door 1), WayForPay (door 2) ----

/// Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`) for
/// `body`, signed with `secret` (a `whsec_` key) at `timestamp`.
pub fn signed_headers(
    secret: &str,
    msg_id: &str,
    timestamp: i64,
    body: &str,
) -> Vec<(&'static str, String)> {
    use subgate::payments::gateways::standard_webhooks::{WebhookKey, sign};
    let key = WebhookKey::parse(secret).expect("a whsec_ key");
    vec![
        ("webhook-id", msg_id.to_string()),
        ("webhook-timestamp", timestamp.to_string()),
        (
            "webhook-signature",
            sign(&key, msg_id, timestamp, body.as_bytes()),
        ),
    ]
}

/// A door-1 `payment.succeeded` body (gateway `acme`, `paid_at` = now).
pub fn payment_event(
    payment_id: &str,
    order_reference: &str,
    amount_minor: i64,
    currency: &str,
) -> Value {
    json!({
        "type": "payment.succeeded",
        "gateway": "acme",
        "payment_id": payment_id,
        "order_reference": order_reference,
        "amount_minor": amount_minor,
        "currency": currency,
        "paid_at": chrono::Utc::now().to_rfc3339(),
    })
}

/// Hex HMAC-MD5 over `;`-joined parts, computed here independently of the code under test.
pub fn wayforpay_hmac(key: &str, parts: &[&str]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<md5::Md5>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(parts.join(";").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// A WayForPay `serviceUrl` callback body for the test merchant, signed with `key`.
/// `amount` is the literal JSON number text (e.g. `199.5`).
pub fn wayforpay_callback_signed(
    key: &str,
    account: &str,
    order_reference: &str,
    amount: &str,
    currency: &str,
    status: &str,
) -> String {
    let (auth_code, card_pan, reason_code) = ("541963", "41****8217", "1100");
    let signature = wayforpay_hmac(
        key,
        &[
            account,
            order_reference,
            amount,
            currency,
            auth_code,
            card_pan,
            status,
            reason_code,
        ],
    );
    format!(
        r#"{{"merchantAccount":"{account}","orderReference":"{order_reference}","merchantSignature":"{signature}","amount":{amount},"currency":"{currency}","authCode":"{auth_code}","email":"buyer@example.com","phone":"380501234567","createdDate":1700000000,"processingDate":{processing},"cardPan":"{card_pan}","cardType":"Visa","issuerBankCountry":"Ukraine","issuerBankName":"Bank","recToken":"","transactionStatus":"{status}","reason":"Ok","reasonCode":{reason_code},"fee":0,"paymentSystem":"card"}}"#,
        processing = chrono::Utc::now().timestamp(),
    )
}

/// [`wayforpay_callback_signed`] with the configured test merchant and key.
pub fn wayforpay_callback(
    order_reference: &str,
    amount: &str,
    currency: &str,
    status: &str,
) -> String {
    wayforpay_callback_signed(
        WAYFORPAY_KEY,
        WAYFORPAY_ACCOUNT,
        order_reference,
        amount,
        currency,
        status,
    )
}

/// Asserts `ack` is WayForPay's signed `accept` for `order_reference`.
#[track_caller]
pub fn assert_wayforpay_accept(ack: &Value, order_reference: &str) {
    assert_eq!(ack["orderReference"], order_reference, "ack: {ack}");
    assert_eq!(ack["status"], "accept", "ack: {ack}");
    let time = ack["time"].as_i64().expect("time is an integer");
    let expected = wayforpay_hmac(
        WAYFORPAY_KEY,
        &[order_reference, "accept", &time.to_string()],
    );
    assert_eq!(ack["signature"], expected.as_str(), "ack signature");
}

impl TestApp {
    /// `POST /api/webhook/payment` with `body` as raw text and the given headers.
    pub async fn post_webhook_raw(&self, body: &str, headers: &[(&str, String)]) -> TestResponse {
        let mut all: Vec<(&str, &str)> = vec![("content-type", "application/json")];
        all.extend(headers.iter().map(|(k, v)| (*k, v.as_str())));
        self.request(Method::POST, "/api/webhook/payment", &all, body.to_string())
            .await
    }

    /// `POST /api/webhook/payment`, correctly signed now with the test key and a fresh id.
    pub async fn post_signed_webhook(&self, body: &Value) -> TestResponse {
        let body = body.to_string();
        let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
        let headers = signed_headers(WEBHOOK_SECRET, &id, chrono::Utc::now().timestamp(), &body);
        self.post_webhook_raw(&body, &headers).await
    }

    /// Pays `order` (its JSON) in full through door 1 as payment `payment_id`; returns the response.
    pub async fn pay_order(&self, order: &Value, payment_id: &str) -> TestResponse {
        let body = payment_event(
            payment_id,
            order["reference"].as_str().unwrap(),
            order["amount_minor"].as_i64().unwrap(),
            order["currency"].as_str().unwrap(),
        );
        self.post_signed_webhook(&body).await
    }

    /// `POST /api/webhook/wayforpay` with a raw body.
    pub async fn post_wayforpay(&self, body: &str) -> TestResponse {
        self.request(
            Method::POST,
            "/api/webhook/wayforpay",
            &[("content-type", "application/json")],
            body.to_string(),
        )
        .await
    }

    /// Creates an order; returns its JSON.
    pub async fn create_order(&self, subscriber_id: i64, channel_id: i64) -> Value {
        self.post(
            "/api/orders",
            json!({"subscriber_id": subscriber_id, "channel_id": channel_id}),
        )
        .await
        .expect(201)
    }

    /// `POST /api/orders/{id}/checkout`.
    pub async fn checkout(&self, order_id: i64) -> TestResponse {
        self.post(&format!("/api/orders/{order_id}/checkout"), Value::Null)
            .await
    }

    /// `SELECT count(*)` of a query's rows (the query is the part after `FROM`).
    pub async fn count(&self, from: &str) -> i64 {
        self.db()
            .await
            .query_one(&format!("SELECT count(*) FROM {from}"), &[])
            .await
            .unwrap()
            .get(0)
    }
}

// ---- small helpers shared by the test modules ----

/// The `id` of a record answered by the API.
pub fn id(v: &Value) -> i64 {
    v["id"].as_i64().expect("an id")
}

/// The `reference` of an order answered by the API.
pub fn reference(order: &Value) -> String {
    order["reference"].as_str().unwrap().to_string()
}

/// The database's clock (`statement_timestamp()`), which the service's rules use.
pub async fn db_now(app: &TestApp) -> chrono::DateTime<chrono::Utc> {
    app.db()
        .await
        .query_one("SELECT statement_timestamp()", &[])
        .await
        .unwrap()
        .get(0)
}
