//! A fake Checkbox API: a real HTTP server on a free local port that answers the calls a
//! receipt takes as Checkbox documents them (its integration guide and OpenAPI reference; the
//! module doc of `subgate::payments::receipts::checkbox` lists them):
//!
//! - every call carries `X-Client-Name` and the cash register's `X-License-Key` (else 403);
//! - `POST /api/v1/cashier/signin` `{"login", "password"}` → `{"access_token", …}` (a wrong
//!   login or password: 403); every other call needs `Authorization: Bearer <a token it gave>`
//!   (else 401);
//! - `GET /api/v1/cashier/shift` → the open shift or `null`; `POST /api/v1/shifts` opens one
//!   (`CREATED`, then `OPENING`, and `OPENED` once read the times [`FakeCheckbox::set_reads`]
//!   says through `GET /api/v1/shifts/{id}`; refused with 400 while one is open);
//! - `POST /api/v1/receipts/sell` keeps one receipt per `id` (the same id again: 400 with
//!   `code: "receipt.already_exists"`), refuses a receipt without an open shift (400), and
//!   answers the receipt `CREATED`; `GET /api/v1/receipts/{id}` answers it `DONE` with a
//!   `fiscal_code` once read the times [`FakeCheckbox::set_reads`] says (or `ERROR`, when told
//!   to: [`FakeCheckbox::error_next_receipts`]).
//!
//! A test can make the next receipt calls fail (500), make every receipt be refused (422),
//! take every token back (the next call answers 401), close the shift, or hold a receipt call
//! open after the fake has stored the receipt (a worker dying after Checkbox accepted it).
//! Every request is kept, so a test counts sign-ins, shifts and receipts.

use std::{
    collections::{HashSet, VecDeque},
    sync::{Arc, Mutex},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderMap, Method, StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The license key, cashier login and password the fake accepts (and the test apps use).
pub const LICENSE_KEY: &str = "test-license-key-0123456789";
pub const LOGIN: &str = "test_cashier";
pub const PASSWORD: &str = "test-cashier-password";

/// A request the fake received.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub body: Value,
}

/// A receipt the fake keeps.
#[derive(Clone, Debug)]
pub struct Receipt {
    pub id: String,
    /// The `POST /api/v1/receipts/sell` body that made it.
    pub body: Value,
    pub fiscal_code: String,
    reads_left: u32,
    /// The tax service refused it: read as `ERROR` (its id is used up).
    pub error: bool,
}

#[derive(Clone, Debug)]
struct Shift {
    id: String,
    status: &'static str,
    reads_left: u32,
}

/// A call held open until released.
#[derive(Clone, Default)]
pub struct Hold {
    arrived: Arc<Notify>,
    release: Arc<Notify>,
}

impl Hold {
    /// Waits until the held call has arrived (the receipt is stored, the answer not sent).
    pub async fn arrived(&self) {
        self.arrived.notified().await
    }

    /// Lets the held call answer.
    pub fn release(&self) {
        self.release.notify_one()
    }
}

struct FakeState {
    tokens: HashSet<String>,
    signins: usize,
    shift: Option<Shift>,
    shifts_opened: usize,
    receipts: Vec<Receipt>,
    received: Vec<Received>,
    /// The next this many `POST /api/v1/receipts/sell` answer 500 (storing nothing).
    fail_sells: u32,
    /// Every receipt is refused (422).
    refuse: bool,
    /// The next this many receipts end in `ERROR`.
    error_receipts: u32,
    shift_reads: u32,
    receipt_reads: u32,
    holds: VecDeque<Hold>,
}

/// The running fake.
#[derive(Clone)]
pub struct FakeCheckbox {
    /// The value of `CHECKBOX_API_URL`.
    pub url: String,
    state: Arc<Mutex<FakeState>>,
}

impl FakeCheckbox {
    /// Starts the server on a free port, with no shift open.
    pub async fn start() -> FakeCheckbox {
        let state = Arc::new(Mutex::new(FakeState {
            tokens: HashSet::new(),
            signins: 0,
            shift: None,
            shifts_opened: 0,
            receipts: Vec::new(),
            received: Vec::new(),
            fail_sells: 0,
            refuse: false,
            error_receipts: 0,
            shift_reads: 1,
            receipt_reads: 1,
            holds: VecDeque::new(),
        }));
        let app = Router::new()
            .route("/api/v1/cashier/signin", post(signin))
            .route("/api/v1/cashier/shift", get(current_shift))
            .route("/api/v1/shifts", post(open_shift))
            .route("/api/v1/shifts/{id}", get(read_shift))
            .route("/api/v1/receipts/sell", post(sell))
            .route("/api/v1/receipts/{id}", get(read_receipt))
            .fallback(|| async { (StatusCode::NOT_FOUND, Json(json!({"message": "Not Found"}))) })
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        FakeCheckbox {
            url: format!("http://{addr}"),
            state,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// The receipts kept, in creation order.
    pub fn receipts(&self) -> Vec<Receipt> {
        self.with(|s| s.receipts.clone())
    }

    /// Every request received, in order.
    pub fn received(&self) -> Vec<Received> {
        self.with(|s| s.received.clone())
    }

    /// How many times the cashier signed in.
    pub fn signins(&self) -> usize {
        self.with(|s| s.signins)
    }

    /// How many shifts were opened.
    pub fn shifts_opened(&self) -> usize {
        self.with(|s| s.shifts_opened)
    }

    /// Closes the open shift (as at the end of the day).
    pub fn close_shift(&self) {
        self.with(|s| s.shift = None);
    }

    /// Takes back every token given: the next call with one answers 401.
    pub fn expire_tokens(&self) {
        self.with(|s| s.tokens.clear());
    }

    /// The next `n` receipt creations answer 500 and store nothing.
    pub fn fail_next_sells(&self, n: u32) {
        self.with(|s| s.fail_sells = n);
    }

    /// The next `n` receipts are accepted and then end in `ERROR` (the tax service refused
    /// them).
    pub fn error_next_receipts(&self, n: u32) {
        self.with(|s| s.error_receipts = n);
    }

    /// From now on every receipt is refused (422), or no longer.
    pub fn refuse_receipts(&self, refuse: bool) {
        self.with(|s| s.refuse = refuse);
    }

    /// A new shift is `OPENED` after this many reads of it; a new receipt `DONE` after this
    /// many reads of it.
    pub fn set_reads(&self, shift_reads: u32, receipt_reads: u32) {
        self.with(|s| {
            s.shift_reads = shift_reads;
            s.receipt_reads = receipt_reads;
        });
    }

    /// Holds the next receipt creation open after the receipt is stored, until released.
    pub fn hold_sell(&self) -> Hold {
        let hold = Hold::default();
        self.with(|s| s.holds.push_back(hold.clone()));
        hold
    }
}

/// A UUID-shaped id, distinct per `n`.
fn uuid_like(n: usize) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

fn error(status: StatusCode, message: &str, code: Option<&str>) -> Response {
    let mut body = json!({"message": message});
    if let Some(code) = code {
        body["code"] = json!(code);
    }
    (status, Json(body)).into_response()
}

/// Records the request, then checks the client's name and the license key, and (unless
/// `signin`) the bearer token: the refusal to answer with, if any.
fn refusal(
    state: &Arc<Mutex<FakeState>>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Value,
    signin: bool,
) -> Option<Response> {
    let mut s = state.lock().unwrap();
    s.received.push(Received {
        method: method.to_string(),
        path: uri.path().to_string(),
        body: body.clone(),
    });
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if header("x-client-name").is_none_or(str::is_empty) {
        return Some(error(
            StatusCode::BAD_REQUEST,
            "X-Client-Name is required",
            None,
        ));
    }
    if header("x-license-key") != Some(LICENSE_KEY) {
        return Some(error(StatusCode::FORBIDDEN, "Invalid license key", None));
    }
    if signin {
        return None;
    }
    let token = header("authorization").and_then(|v| v.strip_prefix("Bearer "));
    match token {
        Some(t) if s.tokens.contains(t) => None,
        _ => Some(error(StatusCode::UNAUTHORIZED, "Not authenticated", None)),
    }
}

async fn signin(
    State(state): State<Arc<Mutex<FakeState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(r) = refusal(&state, &method, &uri, &headers, &body, true) {
        return r;
    }
    let mut s = state.lock().unwrap();
    if body["login"] != LOGIN || body["password"] != PASSWORD {
        return error(StatusCode::FORBIDDEN, "Invalid credentials", None);
    }
    s.signins += 1;
    let token = format!("token-{}-{}", s.signins, rand::random::<u32>());
    s.tokens.insert(token.clone());
    Json(json!({"type": "bearer", "token_type": "bearer", "access_token": token})).into_response()
}

fn shift_json(shift: &Shift) -> Value {
    json!({"id": shift.id, "serial": 1, "status": shift.status,
           "initial_transaction": {"status": "DONE", "response_error_message": null}})
}

async fn current_shift(
    State(state): State<Arc<Mutex<FakeState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = refusal(&state, &method, &uri, &headers, &Value::Null, false) {
        return r;
    }
    let s = state.lock().unwrap();
    match &s.shift {
        Some(shift) => Json(shift_json(shift)).into_response(),
        None => Json(Value::Null).into_response(),
    }
}

async fn open_shift(
    State(state): State<Arc<Mutex<FakeState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if let Some(r) = refusal(&state, &method, &uri, &headers, &Value::Null, false) {
        return r;
    }
    let mut s = state.lock().unwrap();
    if s.shift.is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            "The cashier already works in an open shift",
            Some("shift.already_opened"),
        );
    }
    s.shifts_opened += 1;
    let shift = Shift {
        id: uuid_like(s.shifts_opened),
        status: if s.shift_reads == 0 {
            "OPENED"
        } else {
            "CREATED"
        },
        reads_left: s.shift_reads,
    };
    let answer = shift_json(&shift);
    s.shift = Some(shift);
    (StatusCode::CREATED, Json(answer)).into_response()
}

async fn read_shift(
    State(state): State<Arc<Mutex<FakeState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(r) = refusal(&state, &method, &uri, &headers, &Value::Null, false) {
        return r;
    }
    let mut s = state.lock().unwrap();
    match s.shift.as_mut().filter(|sh| sh.id == id) {
        Some(shift) => {
            if shift.reads_left > 0 {
                shift.reads_left -= 1;
                shift.status = "OPENING";
            } else {
                shift.status = "OPENED";
            }
            Json(shift_json(shift)).into_response()
        }
        None => error(StatusCode::NOT_FOUND, "Shift not found", None),
    }
}

fn receipt_json(r: &Receipt, status: &str) -> Value {
    let mut body = r.body.clone();
    body["id"] = json!(r.id);
    body["status"] = json!(status);
    body["type"] = json!("SELL");
    body["transaction"] = if status == "ERROR" {
        json!({"status": "ERROR", "response_error_message": "Помилка ДПС: документ не прийнято"})
    } else {
        json!({"status": "DONE", "response_error_message": null})
    };
    body["fiscal_code"] = if status == "DONE" {
        json!(r.fiscal_code)
    } else {
        Value::Null
    };
    body
}

async fn sell(
    State(state): State<Arc<Mutex<FakeState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if let Some(r) = refusal(&state, &method, &uri, &headers, &body, false) {
        return r;
    }
    let (answer, hold) = {
        let mut s = state.lock().unwrap();
        if s.fail_sells > 0 {
            s.fail_sells -= 1;
            return error(StatusCode::INTERNAL_SERVER_ERROR, "Internal error", None);
        }
        if s.refuse {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Validation error: the good's tax code is required",
                None,
            );
        }
        let Some(id) = body["id"].as_str().map(str::to_string) else {
            return error(StatusCode::UNPROCESSABLE_ENTITY, "id is required", None);
        };
        if s.receipts.iter().any(|r| r.id == id) {
            return error(
                StatusCode::BAD_REQUEST,
                "A receipt with this id already exists",
                Some("receipt.already_exists"),
            );
        }
        if s.shift.as_ref().is_none_or(|sh| sh.status != "OPENED") {
            return error(StatusCode::BAD_REQUEST, "The shift is not opened", None);
        }
        let error = s.error_receipts > 0;
        if error {
            s.error_receipts -= 1;
        }
        let receipt = Receipt {
            id,
            body,
            fiscal_code: format!("TEST-{}", s.receipts.len() + 1),
            reads_left: s.receipt_reads,
            error,
        };
        let answer = receipt_json(&receipt, "CREATED");
        s.receipts.push(receipt);
        (answer, s.holds.pop_front())
    };
    if let Some(hold) = hold {
        hold.arrived.notify_one();
        hold.release.notified().await;
    }
    (StatusCode::CREATED, Json(answer)).into_response()
}

async fn read_receipt(
    State(state): State<Arc<Mutex<FakeState>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(r) = refusal(&state, &method, &uri, &headers, &Value::Null, false) {
        return r;
    }
    let mut s = state.lock().unwrap();
    match s.receipts.iter_mut().find(|r| r.id == id) {
        Some(r) => {
            let status = if r.reads_left > 0 {
                r.reads_left -= 1;
                "CREATED"
            } else if r.error {
                "ERROR"
            } else {
                "DONE"
            };
            Json(receipt_json(r, status)).into_response()
        }
        None => error(StatusCode::NOT_FOUND, "Receipt not found", None),
    }
}
