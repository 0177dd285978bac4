//! Static files embedded in the binary (the staff console's, the Mini App page's), served with
//! a validator: the browser revalidates every time (`no-cache`), and an unchanged file costs a
//! 304, so a new binary's page is never mixed with a cached old script.

use axum::{
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use sha2::{Digest, Sha256};

/// One embedded file: its name under its page's path, its type and its bytes.
pub struct Asset {
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// The file `name` of `assets`.
pub fn find<'a>(assets: &'a [Asset], name: &str) -> Option<&'a Asset> {
    assets.iter().find(|a| a.name == name)
}

/// Answers `body` (of `content_type`) with its `ETag` (a 304 when `headers` already name it),
/// `Cache-Control: no-cache`, the page's `csp`, `nosniff`, `Referrer-Policy: no-referrer`, and
/// the page's own `extra` headers.
pub fn serve(
    content_type: &'static str,
    body: &'static [u8],
    headers: &HeaderMap,
    csp: &'static str,
    extra: &[(HeaderName, &'static str)],
) -> Response {
    let etag = format!("\"{}\"", &hex::encode(Sha256::digest(body))[..32]);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, content_type)], body).into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::ETAG,
        HeaderValue::from_str(&etag).expect("hex is a valid header"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    for (name, value) in extra {
        h.insert(name.clone(), HeaderValue::from_static(value));
    }
    response
}
