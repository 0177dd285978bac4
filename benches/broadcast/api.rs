//! The benchmark's way into the server's staff API, as an admin (creating and reading
//! broadcasts); buyers pay through door 1 with the benchmarks' shared payer (`common::Payer`).

use std::net::SocketAddr;

use serde_json::{Value, json};

/// The admin the server creates at start-up (`ADMIN_EMAIL` / `ADMIN_PASSWORD`).
pub const ADMIN_EMAIL: &str = "bench@example.com";
pub const ADMIN_PASSWORD: &str = "a benchmark password";

/// The staff API of one server, logged in as its admin.
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    /// Logs in to the server at `addr`.
    pub async fn login(http: &reqwest::Client, addr: SocketAddr) -> Result<Api, String> {
        let mut api = Api {
            http: http.clone(),
            base: format!("http://{addr}/api"),
            token: String::new(),
        };
        api.relogin().await?;
        Ok(api)
    }

    async fn relogin(&mut self) -> Result<(), String> {
        let answer = self
            .http
            .post(format!("{}/auth/login", self.base))
            .json(&json!({"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}))
            .send()
            .await
            .map_err(|e| format!("login: {e}"))?;
        let status = answer.status().as_u16();
        let body: Value = answer.json().await.map_err(|e| format!("login: {e}"))?;
        self.token = body["access_token"]
            .as_str()
            .ok_or_else(|| format!("login: HTTP {status}: {body}"))?
            .to_string();
        Ok(())
    }

    /// One request with the admin's token (logging in again once if it ran out); the status
    /// and the JSON body.
    async fn request(
        &mut self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        for attempt in 0..2 {
            let mut request = self
                .http
                .request(method.clone(), format!("{}{path}", self.base))
                .bearer_auth(&self.token);
            if let Some(body) = body {
                request = request.json(body);
            }
            let answer = request
                .send()
                .await
                .map_err(|e| format!("{method} {path}: {e}"))?;
            let status = answer.status().as_u16();
            if status == 401 && attempt == 0 {
                self.relogin().await?;
                continue;
            }
            let bytes = answer
                .bytes()
                .await
                .map_err(|e| format!("{method} {path}: {e}"))?;
            let body = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            return Ok((status, body));
        }
        unreachable!("the second attempt returns")
    }

    /// `POST /api/broadcasts`: the new broadcast (201 expected).
    pub async fn create_broadcast(&mut self, body: &Value) -> Result<Broadcast, String> {
        let (status, answer) = self
            .request(reqwest::Method::POST, "/broadcasts", Some(body))
            .await?;
        if status != 201 {
            return Err(format!("POST /api/broadcasts: HTTP {status}: {answer}"));
        }
        Broadcast::read(&answer)
    }

    /// `GET /api/broadcasts/{id}`.
    pub async fn broadcast(&mut self, id: i64) -> Result<Broadcast, String> {
        let path = format!("/broadcasts/{id}");
        let (status, answer) = self.request(reqwest::Method::GET, &path, None).await?;
        if status != 200 {
            return Err(format!("GET /api{path}: HTTP {status}: {answer}"));
        }
        Broadcast::read(&answer)
    }
}

/// What the benchmark reads of a broadcast (`GET /api/broadcasts/{id}`).
#[derive(Debug, Clone, Default)]
pub struct Broadcast {
    pub id: i64,
    pub status: String,
    pub recipients: i64,
    pub sent: i64,
    pub blocked: i64,
    pub failed: i64,
    pub skipped: i64,
    pub pending: i64,
    pub paid_messages: i64,
}

impl Broadcast {
    fn read(body: &Value) -> Result<Broadcast, String> {
        let n = |key: &str| {
            body[key]
                .as_i64()
                .ok_or_else(|| format!("a broadcast without a number `{key}`: {body}"))
        };
        Ok(Broadcast {
            id: n("id")?,
            status: body["status"]
                .as_str()
                .ok_or_else(|| format!("a broadcast without `status`: {body}"))?
                .to_string(),
            recipients: n("recipients")?,
            sent: n("sent")?,
            blocked: n("blocked")?,
            failed: n("failed")?,
            skipped: n("skipped")?,
            pending: n("pending")?,
            paid_messages: n("paid_messages")?,
        })
    }

    /// The counters as `sent / blocked / failed / skipped / pending`.
    pub fn counters(&self) -> String {
        format!(
            "sent {} / blocked {} / failed {} / skipped {} / pending {}",
            self.sent, self.blocked, self.failed, self.skipped, self.pending
        )
    }
}
