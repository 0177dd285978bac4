//! The Mini App page: the paywall a buyer meets at a channel's door (`/app/?c=<channel>`) and
//! their member portal (`/app/`), one static page (HTML, CSS and vanilla JavaScript) embedded in
//! the binary, so it needs no build step and no host but this server and Telegram's own
//! `telegram-web-app.js` (docs/mini_app.md).
//!
//! The page is only a client of the Mini App API under `/app/api/`: it sends Telegram's signed
//! `initData` with every call, and every decision (who the buyer is, what they may buy, at what
//! price, in which language) is the API's. The files carry no data and need no authentication.
//! Telegram shows the page inside its clients, in a web view or (Telegram Web) an iframe, so
//! unlike the console it may be framed, by Telegram's origins only.

use axum::{
    extract::Path,
    http::HeaderMap,
    response::{IntoResponse, Redirect, Response},
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::embedded::{self, Asset};
use crate::common::error::ApiError;

const ASSETS: &[Asset] = &[
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("app_page/index.html"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("app_page/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("app_page/app.css"),
    },
];

/// The policy every response of the page carries: scripts from this origin and Telegram's
/// (`telegram-web-app.js`, which Telegram asks Mini Apps to load from telegram.org), styles and
/// requests from this origin only, no inline script or style, images from here or `data:` URLs,
/// no form submits anywhere (the page sends with `fetch`), and framing only by Telegram (Telegram
/// Web shows a Mini App in an iframe of web.telegram.org).
pub const CSP: &str = "default-src 'none'; script-src 'self' https://telegram.org; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; \
     frame-ancestors https://web.telegram.org https://*.telegram.org; base-uri 'none'; \
     form-action 'none'";

/// The page's routes: `/app` (redirects to `/app/`), `/app/` (the page) and `/app/{file}` (its
/// script and style). No state, no authentication.
pub fn routes<S: Clone + Send + Sync + 'static>() -> OpenApiRouter<S> {
    OpenApiRouter::new()
        .routes(routes!(redirect))
        .routes(routes!(index))
        .routes(routes!(asset))
}

/// `GET /app`: to `/app/`, so the page's relative asset paths resolve.
#[utoipa::path(get, path = "/app", operation_id = "miniAppRedirect", tag = "mini app",
    security(()),
    responses((status = 308, description = "To `/app/`.",
        headers(("Location" = String, description = "`/app/`.")))),
)]
pub async fn redirect() -> Redirect {
    Redirect::permanent("/app/")
}

/// `GET /app/`: the page; `?c=<channel id>` (and `&r=<join request reference>` from the door)
/// opens that channel's paywall, no `c` the buyer's portal.
#[utoipa::path(get, path = "/app/", operation_id = "miniAppPage", tag = "mini app",
    security(()),
    params(("If-None-Match" = Option<String>, Header, description = "An `ETag` seen before.")),
    responses(
        (status = 200, description = "The Mini App's page.", content_type = "text/html",
            body = String, headers(("ETag" = String))),
        (status = 304, description = "Unchanged since the `ETag` sent.", headers(("ETag" = String))),
    ),
)]
pub async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

/// `GET /app/{file}`: the page's script `app.js` or style `app.css`.
#[utoipa::path(get, path = "/app/{file}", operation_id = "miniAppAsset", tag = "mini app",
    security(()),
    params(
        ("file" = String, Path, description = "`index.html`, `app.js` or `app.css`."),
        ("If-None-Match" = Option<String>, Header, description = "An `ETag` seen before."),
    ),
    responses(
        (status = 200, description = "The file.", headers(("ETag" = String)), content(
            (String = "text/html"), (String = "text/javascript"), (String = "text/css"),
        )),
        (status = 304, description = "Unchanged since the `ETag` sent.", headers(("ETag" = String))),
    ),
)]
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    serve(&file, &headers)
}

/// Answers a file with its validator ([`embedded::serve`]): an unchanged file is a 304, so a
/// buyer never runs a new page with an old script. `initData` travels in the URL's fragment,
/// which is never sent, but the page's query names a channel and a join request: no referrer
/// carries them anywhere. No `X-Frame-Options`: Telegram frames the page (the policy's
/// `frame-ancestors` says by whom).
fn serve(name: &str, headers: &HeaderMap) -> Response {
    match embedded::find(ASSETS, name) {
        Some(a) => embedded::serve(a.content_type, a.body, headers, CSP, &[]),
        None => ApiError::NotFound("Mini App file").into_response(),
    }
}
