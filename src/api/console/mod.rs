//! The staff console: a small static app (HTML, CSS and vanilla JavaScript) served at
//! `/console` by the same binary, embedded at compile time, so it needs no build step, no CDN
//! and no network beyond this server.
//!
//! It is only a client of the staff JSON API: it signs in with `POST /api/auth/login`, keeps the
//! bearer token in a JavaScript variable (never in storage or a cookie, so a reload signs out and
//! no request is ever authenticated by something the browser attaches by itself: cross-site
//! request forgery has nothing to ride on), and sends an `Idempotency-Key` with every
//! state-changing `POST`. Every decision stays in the API: the assets carry no data and need no
//! token. A strict Content-Security-Policy allows scripts, styles and requests from this origin
//! only (no inline script, no `eval`), and forbids framing.

use std::sync::OnceLock;

use axum::{
    extract::Path,
    http::{HeaderMap, HeaderName, header},
    response::{IntoResponse, Redirect, Response},
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::embedded::{self, Asset};
use crate::common::{currency, error::ApiError};

const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("assets/index.html"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/app.js"),
    },
    Asset {
        name: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("assets/style.css"),
    },
    // The Referrals screens, in their own files.
    Asset {
        name: "referrals.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/referrals.js"),
    },
    Asset {
        name: "referrals.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("assets/referrals.css"),
    },
    // The Door screen (join requests at Mini App doors), in its own file.
    Asset {
        name: "door.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/door.js"),
    },
    // uPlot (MIT, Leon Sorokin; vendor/uPlot.LICENSE), the charts' library, as published.
    Asset {
        name: "uPlot.iife.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/vendor/uPlot.iife.min.js"),
    },
    Asset {
        name: "uPlot.min.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("assets/vendor/uPlot.min.css"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("assets/favicon.svg"),
    },
];

/// The policy every console response carries: this origin only, no inline script or style, no
/// plugins, no framing, and no form may submit anywhere (the app submits with `fetch`; without
/// JavaScript a form must not send a password in a URL).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The console's routes: `/console` (redirects to `/console/`), `/console/` (the app) and
/// `/console/{file}` (its assets and `currencies.json`). No state, no token.
pub fn routes<S: Clone + Send + Sync + 'static>() -> OpenApiRouter<S> {
    OpenApiRouter::new()
        .routes(routes!(redirect))
        .routes(routes!(index))
        .routes(routes!(asset))
}

/// `GET /console`: to `/console/`, so the app's relative asset paths resolve.
#[utoipa::path(get, path = "/console", operation_id = "consoleRedirect", tag = "console",
    security(()),
    responses((status = 308, description = "To `/console/`.",
        headers(("Location" = String, description = "`/console/`.")))),
)]
pub async fn redirect() -> Redirect {
    Redirect::permanent("/console/")
}

/// `GET /console/`: the app.
#[utoipa::path(get, path = "/console/", operation_id = "consoleApp", tag = "console",
    security(()),
    params(("If-None-Match" = Option<String>, Header, description = "An `ETag` seen before.")),
    responses(
        (status = 200, description = "The console's page.", content_type = "text/html",
            body = String, headers(("ETag" = String))),
        (status = 304, description = "Unchanged since the `ETag` sent.", headers(("ETag" = String))),
    ),
)]
pub async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

/// `GET /console/{file}`: an asset of the app (`app.js`, `style.css`, the Referrals screens'
/// `referrals.js` and `referrals.css`, the Door screen's `door.js`, `favicon.svg`, uPlot's
/// `uPlot.iife.min.js` and `uPlot.min.css`) or `currencies.json`.
#[utoipa::path(get, path = "/console/{file}", operation_id = "consoleAsset", tag = "console",
    security(()),
    params(
        ("file" = String, Path, description = "`index.html`, `app.js`, `style.css`, \
            `referrals.js`, `referrals.css`, `door.js`, `favicon.svg`, `uPlot.iife.min.js`, \
            `uPlot.min.css` or `currencies.json`."),
        ("If-None-Match" = Option<String>, Header, description = "An `ETag` seen before."),
    ),
    responses(
        (status = 200, description = "The file.", headers(("ETag" = String)), content(
            (String = "text/html"), (String = "text/javascript"), (String = "text/css"),
            (String = "image/svg+xml"),
            (std::collections::BTreeMap<String, u32> = "application/json",
                example = json!({"UAH": 2, "XTR": 0})),
        )),
        (status = 304, description = "Unchanged since the `ETag` sent.", headers(("ETag" = String))),
    ),
)]
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    serve(&file, &headers)
}

/// The minor-unit exponent of every currency the API accepts, as JSON
/// (`{"UAH": 2, "XTR": 0, …}`): the console shows amounts in currency units with the server's
/// own table instead of a second copy of it.
fn currencies_json() -> &'static [u8] {
    static JSON: OnceLock<Vec<u8>> = OnceLock::new();
    JSON.get_or_init(|| {
        let map: serde_json::Map<String, serde_json::Value> = currency::exponents()
            .map(|(code, exponent)| (code.to_string(), exponent.into()))
            .collect();
        serde_json::to_vec(&map).expect("a map of numbers serializes")
    })
}

fn find(name: &str) -> Option<(&'static str, &'static [u8])> {
    if name == "currencies.json" {
        return Some(("application/json", currencies_json()));
    }
    embedded::find(ASSETS, name).map(|a| (a.content_type, a.body))
}

/// Answers an asset with its validator ([`embedded::serve`]): an unchanged file costs a 304, so
/// a new binary's console is never mixed with a cached old one. The console is never framed and
/// keeps its window to itself.
fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some((content_type, body)) = find(name) else {
        return ApiError::NotFound("console file").into_response();
    };
    embedded::serve(
        content_type,
        body,
        headers,
        CSP,
        &[
            (header::X_FRAME_OPTIONS, "DENY"),
            (
                HeaderName::from_static("cross-origin-opener-policy"),
                "same-origin",
            ),
        ],
    )
}
