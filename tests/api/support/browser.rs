//! A headless Chromium driven over the W3C WebDriver protocol, for the browser tests of the
//! console and the Mini App.
//!
//! `chromedriver` (Debian's `chromium-driver`, installed by `scripts/ensure-browser.sh`) runs on
//! a free local port; the client is a few JSON calls over the `reqwest` the service already
//! builds. A WebDriver crate (fantoccini) was measured and left out: it adds two dozen crates
//! and turns on `syn` and `time` features the service does not use, so the test build and the
//! normal build would no longer share their compiled dependencies.
//!
//! A missing browser is a failure with a clear message, never a skipped test.
//!
//! Every screen a test waits for is also checked for what a person would see as broken
//! ([`Browser::check_screen`]): `[object …]`, `null`, `undefined`, `NaN` or `Invalid Date` in the
//! visible text, and any error in the browser's console (read from chromedriver's browser log,
//! which Chromium fills from the first script of each page on, before any hook could be set).

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use base64::Engine;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// How long a wait for something on the page lasts before the test fails.
pub const WAIT: Duration = Duration::from_secs(15);

/// The first of `names` found as a file: an absolute path, or a name looked up in `PATH`.
fn which(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        let candidate = Path::new(name);
        if candidate.is_absolute() {
            if candidate.is_file() {
                return Some(candidate.to_path_buf());
            }
            continue;
        }
        for dir in std::env::split_paths(&path) {
            let full = dir.join(name);
            if full.is_file() {
                return Some(full);
            }
        }
    }
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free local port")
        .port()
}

/// Whether a failed request in the browser's log was the API refusing it (a 4xx), as Chromium
/// words it: "… Failed to load resource: the server responded with a status of 422 (…)".
fn refused_by_the_api(message: &str) -> bool {
    message
        .split_once("responded with a status of ")
        .is_some_and(|(_, status)| status.starts_with('4'))
}

/// One browser session; its chromedriver is killed when this is dropped.
pub struct Browser {
    http: reqwest::Client,
    session: String,
    driver: Child,
}

/// An element reference of the current page.
#[derive(Clone)]
pub struct Element(String);

impl Browser {
    /// Starts chromedriver and a headless Chromium with a desktop-sized window.
    pub async fn start() -> Browser {
        if let Some(set) = std::env::var_os("CHROMEDRIVER").filter(|p| !Path::new(p).is_file()) {
            panic!(
                "CHROMEDRIVER={} is not a file: the console's browser test needs chromedriver \
                 and Chromium; install them with scripts/ensure-browser.sh (Debian packages \
                 chromium and chromium-driver; `make test` runs it)",
                Path::new(&set).display()
            );
        }
        let driver_bin = std::env::var("CHROMEDRIVER")
            .ok()
            .map(PathBuf::from)
            .or_else(|| which(&["chromedriver", "/usr/lib/chromium/chromedriver"]))
            .unwrap_or_else(|| {
                panic!(
                    "the console's browser test needs chromedriver and Chromium, and neither \
                     CHROMEDRIVER nor `chromedriver` on PATH was found. Install them with \
                     scripts/ensure-browser.sh (Debian packages chromium and chromium-driver; \
                     `make test` runs it), then run the test again."
                )
            });
        let chrome_bin = std::env::var("CHROME_BIN")
            .ok()
            .map(PathBuf::from)
            .or_else(|| which(&["chromium", "chromium-browser", "/usr/lib/chromium/chromium"]))
            .unwrap_or_else(|| {
                panic!(
                    "chromedriver is at {} but no Chromium was found (CHROME_BIN, or `chromium` \
                     on PATH). Run scripts/ensure-browser.sh.",
                    driver_bin.display()
                )
            });
        let port = free_port();
        let driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver_bin.display()));
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let ready = http
                .get(format!("{base}/status"))
                .send()
                .await
                .ok()
                .and_then(|r| r.status().is_success().then_some(()));
            if ready.is_some() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "chromedriver did not come up on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            // Console errors, uncaught exceptions, CSP violations and failed requests, for
            // `console_errors`.
            "goog:loggingPrefs": {"browser": "SEVERE"},
            "goog:chromeOptions": {
                "binary": chrome_bin.to_string_lossy(),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--lang=en-US", "--accept-lang=en-US",
                    "--window-size=1280,1000", "--force-device-scale-factor=1",
                ],
            },
        }}});
        let r = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("chromedriver answers");
        let body: Value = r.json().await.expect("a JSON answer");
        let session = body["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("Chromium did not start: {body}"))
            .to_string();
        Browser {
            http,
            session: format!("{base}/session/{session}"),
            driver,
        }
    }

    /// A Chrome DevTools Protocol command, sent through chromedriver (`goog/cdp/execute`) to
    /// the current page; returns its result.
    pub async fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.cmd(
            "POST",
            "/goog/cdp/execute",
            json!({"cmd": cmd, "params": params}),
        )
        .await
    }

    /// Runs `script` in every page loaded from now on, before the page's own scripts; returns
    /// its identifier for [`Browser::forget_script`].
    pub async fn before_every_page(&self, script: &str) -> String {
        let added = self
            .cdp(
                "Page.addScriptToEvaluateOnNewDocument",
                json!({"source": script}),
            )
            .await;
        added["identifier"]
            .as_str()
            .expect("an identifier of the script")
            .to_string()
    }

    /// Stops running a script [`Browser::before_every_page`] added.
    pub async fn forget_script(&self, identifier: &str) {
        self.cdp(
            "Page.removeScriptToEvaluateOnNewDocument",
            json!({"identifier": identifier}),
        )
        .await;
    }

    /// Refuses every request to `urls` from now on, as an unreachable host would, but at once
    /// and whether or not this machine can reach it. Chromium does not report a load refused
    /// so in the console: unlike a host that cannot be reached, it is no console error.
    pub async fn block(&self, urls: &[&str]) {
        self.cdp("Network.enable", json!({})).await;
        self.cdp("Network.setBlockedURLs", json!({"urls": urls}))
            .await;
    }

    /// One WebDriver command; returns its `value`, or `Err` with WebDriver's error.
    async fn try_cmd(&self, method: &str, path: &str, body: Value) -> Result<Value, Value> {
        let url = format!("{}{path}", self.session);
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body),
        };
        let r = req.send().await.expect("chromedriver answers");
        let ok = r.status().is_success();
        let v: Value = r.json().await.expect("a JSON answer");
        if ok {
            Ok(v["value"].clone())
        } else {
            Err(v["value"].clone())
        }
    }

    async fn cmd(&self, method: &str, path: &str, body: Value) -> Value {
        self.try_cmd(method, path, body)
            .await
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
    }

    pub async fn goto(&self, url: &str) {
        self.cmd("POST", "/url", json!({"url": url})).await;
    }

    /// Reloads the page, as the browser's reload button does.
    pub async fn refresh(&self) {
        self.cmd("POST", "/refresh", json!({})).await;
    }

    pub async fn set_window(&self, width: u32, height: u32) {
        self.cmd(
            "POST",
            "/window/rect",
            json!({"width": width, "height": height}),
        )
        .await;
    }

    pub async fn execute(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": args}),
        )
        .await
    }

    async fn find_now(&self, css: &str) -> Option<Element> {
        let v = self
            .try_cmd(
                "POST",
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await
            .ok()?;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .map(|id| Element(id.to_string()))
    }

    /// Waits until an element matching `css` is on the page and visible.
    pub async fn find(&self, css: &str) -> Element {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(el) = self.find_now(css).await
                && self.displayed(&el).await
            {
                return el;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no visible element {css:?} on the page; it shows:\n{}",
                self.page_text().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn displayed(&self, el: &Element) -> bool {
        self.try_cmd("GET", &format!("/element/{}/displayed", el.0), Value::Null)
            .await
            .ok()
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    }

    pub async fn text(&self, el: &Element) -> String {
        self.try_cmd("GET", &format!("/element/{}/text", el.0), Value::Null)
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }

    pub async fn value(&self, el: &Element) -> String {
        self.cmd(
            "GET",
            &format!("/element/{}/property/value", el.0),
            Value::Null,
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// The page's visible text.
    pub async fn page_text(&self) -> String {
        match self.find_now("body").await {
            Some(body) => self.text(&body).await,
            None => String::new(),
        }
    }

    /// Waits until the element matching `css` shows text containing `needle`; returns its text.
    /// The screen is then checked as [`Browser::check_screen`] does.
    pub async fn wait_text(&self, css: &str, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(el) = self.find_now(css).await {
                let text = self.text(&el).await;
                if text.contains(needle) {
                    self.check_screen(&format!("{css} showing {needle:?}"))
                        .await;
                    return text;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{css:?} never showed {needle:?}; the page shows:\n{}",
                self.page_text().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The errors the browser's console received since the last call: console errors, uncaught
    /// exceptions and rejections, CSP violations, and requests answered 5xx or not at all. A
    /// request answered 4xx is left out: the console shows the API's refusal in its own words,
    /// and the tests provoke those on purpose.
    pub async fn console_errors(&self) -> Vec<String> {
        let log = self
            .cmd("POST", "/se/log", json!({"type": "browser"}))
            .await;
        log.as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .filter(|e| {
                let message = e["message"].as_str().unwrap_or_default();
                !(e["source"] == "network" && refused_by_the_api(message))
            })
            .map(|e| format!("{} ({})", e["message"], e["source"]))
            .collect()
    }

    /// What a person would see as broken on the current screen: each finding as a line. The
    /// visible text is the page's rendered text (`innerText`: closed `<details>` and hidden
    /// elements left out), its title, and the values and placeholders of visible fields.
    pub async fn broken_text(&self) -> Vec<String> {
        let found = self
            .execute(
                "const bad = /\\[object|\\bnull\\b|\\bundefined\\b|\\bNaN\\b|Invalid Date/;
                 const seen = [['title', document.title]];
                 for (const line of document.body.innerText.split('\\n')) seen.push(['text', line]);
                 for (const f of document.querySelectorAll('input, textarea, select')) {
                   if (f.offsetParent === null || f.type === 'password') continue;
                   const what = f.id || f.name || f.tagName;
                   const value = f.tagName === 'SELECT'
                     ? Array.from(f.selectedOptions).map((o) => o.text).join(', ') : f.value;
                   seen.push([what + ' value', value], [what + ' placeholder', f.placeholder || '']);
                 }
                 return seen.filter(([, t]) => bad.test(t)).map(([w, t]) => w + ': ' + t.trim());",
                json!([]),
            )
            .await;
        found
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    }

    /// The page's scroll width and the screen's width when the page is wider (a phone would
    /// scroll sideways), else `None`.
    pub async fn wider_than_screen(&self) -> Option<(i64, i64)> {
        let v = self
            .execute(
                "return [document.documentElement.scrollWidth, document.documentElement.clientWidth];",
                json!([]),
            )
            .await;
        let (scroll, client) = (v[0].as_i64()?, v[1].as_i64()?);
        (scroll > client).then_some((scroll, client))
    }

    /// Fails the test when the current screen shows `[object …]`, `null`, `undefined`, `NaN` or
    /// `Invalid Date`, or when the browser's console received an error since the last check.
    /// `screen` names it in the message.
    pub async fn check_screen(&self, screen: &str) {
        let text = self.broken_text().await;
        let errors = self.console_errors().await;
        assert!(
            text.is_empty() && errors.is_empty(),
            "{screen}: the screen looks broken\n  visible text: {text:#?}\n  console errors: \
             {errors:#?}\nthe page shows:\n{}",
            self.page_text().await
        );
    }

    pub async fn click(&self, css: &str) {
        let el = self.find(css).await;
        self.cmd("POST", &format!("/element/{}/click", el.0), json!({}))
            .await;
    }

    /// Replaces the text of the input matching `css` (keys typed as a user would).
    pub async fn fill(&self, css: &str, text: &str) {
        let el = self.find(css).await;
        self.cmd("POST", &format!("/element/{}/clear", el.0), json!({}))
            .await;
        self.type_keys(&el, text).await;
    }

    pub async fn type_keys(&self, el: &Element, text: &str) {
        self.cmd(
            "POST",
            &format!("/element/{}/value", el.0),
            json!({"text": text}),
        )
        .await;
    }

    /// Selects the option of the `<select>` matching `css` whose text contains `label`.
    pub async fn select(&self, css: &str, label: &str) {
        self.find(css).await;
        let done = self
            .execute(
                "const s = document.querySelector(arguments[0]);
                 const o = Array.from(s.options).find((o) => o.text.includes(arguments[1]));
                 if (!o) return false;
                 s.value = o.value;
                 s.dispatchEvent(new Event('change', {bubbles: true}));
                 return true;",
                json!([css, label]),
            )
            .await;
        assert_eq!(done, json!(true), "no option {label:?} in {css:?}");
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        let b64 = self.cmd("GET", "/screenshot", Value::Null).await;
        base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap_or_default())
            .expect("a base64 PNG")
    }

    /// A PNG of the whole page: the window grows to the page's height for the shot.
    pub async fn full_screenshot(&self, width: u32) -> Vec<u8> {
        let height = self
            .execute(
                "return Math.ceil(document.documentElement.scrollHeight);",
                json!([]),
            )
            .await
            .as_u64()
            .unwrap_or(1000) as u32;
        // The window is taller than its viewport by the browser's own frame.
        self.set_window(width, (height + 160).clamp(600, 4000))
            .await;
        self.screenshot().await
    }

    /// Ends the browser session and chromedriver, after a last look at the console: an error
    /// logged after the last screen was checked fails the test too.
    pub async fn quit(self) {
        let errors = self.console_errors().await;
        assert!(
            errors.is_empty(),
            "console errors after the last screen: {errors:#?}"
        );
        self.close().await;
    }

    /// Ends the browser session and chromedriver without looking at the console (a test that
    /// already failed).
    pub async fn close(mut self) {
        let _ = self.try_cmd("DELETE", "", Value::Null).await;
        let _ = self.driver.kill().await;
    }
}
