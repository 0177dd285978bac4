//! The Mini App's `initData`, checked as Telegram documents it ("Validating data received via
//! the Mini App"): the data-check string is every field but `hash`, sorted by key, as
//! `key=value` lines (values URL-decoded); the secret key is `HMAC_SHA256(key = "WebAppData",
//! msg = bot token)`; `hash` is the hex `HMAC_SHA256(key = secret key, msg = data-check
//! string)`, compared in constant time. `auth_date` must be no older than
//! `MINI_APP_MAX_AGE_SECS` and no more than [`FUTURE_SLACK_SECS`] ahead of our clock.
//!
//! Pure: the caller passes the token, the time and the limits, so every rule is unit-tested.
//! [`sign_init_data`] builds valid `initData` from fields, as Telegram would (tests of the API
//! and of the page use it).

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::super::update::Sender;

type HmacSha256 = Hmac<Sha256>;

/// How far ahead of our clock an `auth_date` may be (clocks drift).
pub const FUTURE_SLACK_SECS: i64 = 60;

/// Why `initData` was refused (logged, never shown: every refusal is the same 401).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not a URL-encoded query string, or a field given twice.
    Malformed,
    /// No `hash` field.
    NoHash,
    /// The hash is not the one the bot token gives.
    BadHash,
    /// No `auth_date`, or not a number.
    NoAuthDate,
    /// `auth_date` is older than the limit.
    Expired,
    /// `auth_date` is ahead of our clock by more than [`FUTURE_SLACK_SECS`].
    FromTheFuture,
    /// No `user` field, or not the JSON of a user.
    NoUser,
}

/// The `user` field: who opened the Mini App.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct User {
    pub id: i64,
    #[serde(default)]
    pub first_name: Option<String>,
    #[serde(default)]
    pub last_name: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub language_code: Option<String>,
}

impl User {
    /// The user as the bot's conversation sees a sender (to be upserted as a subscriber alike).
    pub fn sender(&self) -> Sender {
        Sender {
            id: self.id,
            is_bot: false,
            first_name: self.first_name.clone(),
            last_name: self.last_name.clone(),
            username: self.username.clone(),
            language_code: self.language_code.clone(),
        }
    }
}

/// `initData` that passed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub user: User,
    /// `auth_date`, in Unix seconds.
    pub auth_date: i64,
}

/// The secret key of `bot_token`: `HMAC_SHA256(key = "WebAppData", msg = bot token)`.
fn secret_key(bot_token: &str) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(b"WebAppData").expect("any key length");
    mac.update(bot_token.as_bytes());
    mac.finalize().into_bytes().into()
}

/// The data-check string of `fields` (`hash` left out): `key=value` lines sorted by key.
fn data_check_string<'a>(fields: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut pairs: Vec<(&str, &str)> = fields.into_iter().filter(|(k, _)| *k != "hash").collect();
    pairs.sort_unstable();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn hash_of(bot_token: &str, check_string: &str) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(&secret_key(bot_token)).expect("any key length");
    mac.update(check_string.as_bytes());
    mac.finalize().into_bytes().into()
}

/// Checks `init_data` (the URL-encoded query string of `Telegram.WebApp.initData`) against
/// `bot_token` at Unix time `now`, accepting an `auth_date` at most `max_age_secs` old.
pub fn check(
    init_data: &str,
    bot_token: &str,
    now: i64,
    max_age_secs: i64,
) -> Result<Checked, Refusal> {
    let fields: Vec<(String, String)> =
        serde_urlencoded::from_str(init_data).map_err(|_| Refusal::Malformed)?;
    let mut keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w[0] == w[1]) {
        return Err(Refusal::Malformed);
    }
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let given = field("hash").ok_or(Refusal::NoHash)?;
    let given = hex::decode(given).map_err(|_| Refusal::BadHash)?;
    let expected = hash_of(
        bot_token,
        &data_check_string(fields.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    );
    if !bool::from(expected.as_slice().ct_eq(given.as_slice())) {
        return Err(Refusal::BadHash);
    }
    let auth_date: i64 = field("auth_date")
        .and_then(|d| d.parse().ok())
        .ok_or(Refusal::NoAuthDate)?;
    if auth_date < now.saturating_sub(max_age_secs) {
        return Err(Refusal::Expired);
    }
    if auth_date > now.saturating_add(FUTURE_SLACK_SECS) {
        return Err(Refusal::FromTheFuture);
    }
    let user: User = field("user")
        .and_then(|u| serde_json::from_str(u).ok())
        .ok_or(Refusal::NoUser)?;
    Ok(Checked { user, auth_date })
}

/// Valid `initData` of `fields` (any but `hash`) signed with `bot_token`, as Telegram makes it:
/// the fields URL-encoded in the order given, then `hash`.
pub fn sign_init_data(bot_token: &str, fields: &[(&str, &str)]) -> String {
    let hash = hex::encode(hash_of(
        bot_token,
        &data_check_string(fields.iter().copied()),
    ));
    let mut all: Vec<(&str, &str)> = fields
        .iter()
        .copied()
        .filter(|(k, _)| *k != "hash")
        .collect();
    all.push(("hash", &hash));
    serde_urlencoded::to_string(&all).expect("pairs of strings encode")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef";
    const NOW: i64 = 1_800_000_000;
    const DAY: i64 = 86_400;
    const USER: &str =
        r#"{"id":42,"first_name":"Ann","last_name":"Buyer","username":"ann","language_code":"uk"}"#;

    fn signed(auth_date: i64) -> String {
        sign_init_data(
            TOKEN,
            &[
                ("query_id", "AAH"),
                ("user", USER),
                ("auth_date", &auth_date.to_string()),
            ],
        )
    }

    #[test]
    fn accepts_what_it_signs_and_reads_the_user() {
        let c = check(&signed(NOW), TOKEN, NOW, DAY).unwrap();
        assert_eq!(c.auth_date, NOW);
        assert_eq!(
            c.user,
            User {
                id: 42,
                first_name: Some("Ann".into()),
                last_name: Some("Buyer".into()),
                username: Some("ann".into()),
                language_code: Some("uk".into()),
            }
        );
        assert_eq!(c.user.sender().id, 42);
    }

    /// The example of Telegram's documentation, computed independently: the string is sorted
    /// by key and the hash is over the decoded values.
    #[test]
    fn the_check_string_is_sorted_and_decoded() {
        assert_eq!(
            data_check_string([
                ("user", "{\"id\":1}"),
                ("auth_date", "5"),
                ("hash", "x"),
                ("a", "b c")
            ]),
            "a=b c\nauth_date=5\nuser={\"id\":1}"
        );
        // The order of the fields in initData does not matter.
        let fields = [
            ("auth_date", "1800000000"),
            ("user", USER),
            ("query_id", "AAH"),
        ];
        let reordered = sign_init_data(TOKEN, &fields);
        assert!(check(&reordered, TOKEN, NOW, DAY).is_ok());
        let hash = hex::encode(hash_of(
            TOKEN,
            &format!("auth_date=1800000000\nquery_id=AAH\nuser={USER}"),
        ));
        assert!(reordered.ends_with(&format!("hash={hash}")));
    }

    #[test]
    fn refuses_another_bots_token_and_a_forged_hash() {
        assert_eq!(
            check(&signed(NOW), "654321:other", NOW, DAY),
            Err(Refusal::BadHash)
        );
        let forged = signed(NOW).replace("%22Ann%22", "%22Eve%22");
        assert_ne!(forged, signed(NOW));
        assert_eq!(check(&forged, TOKEN, NOW, DAY), Err(Refusal::BadHash));
        let mut wrong_hash = signed(NOW);
        let last = wrong_hash.pop().unwrap();
        wrong_hash.push(if last == '0' { '1' } else { '0' });
        assert_eq!(check(&wrong_hash, TOKEN, NOW, DAY), Err(Refusal::BadHash));
        let short = signed(NOW)
            .rsplit_once("&hash=")
            .map(|(rest, _)| format!("{rest}&hash=abcd"))
            .unwrap();
        assert_eq!(check(&short, TOKEN, NOW, DAY), Err(Refusal::BadHash));
        let not_hex = format!("{}&hash=zz", signed(NOW).rsplit_once("&hash=").unwrap().0);
        assert_eq!(check(&not_hex, TOKEN, NOW, DAY), Err(Refusal::BadHash));
    }

    #[test]
    fn refuses_missing_hash_and_repeated_fields() {
        let no_hash = signed(NOW).rsplit_once("&hash=").unwrap().0.to_string();
        assert_eq!(check(&no_hash, TOKEN, NOW, DAY), Err(Refusal::NoHash));
        assert_eq!(check("", TOKEN, NOW, DAY), Err(Refusal::NoHash));
        let twice = format!("{}&auth_date=1", signed(NOW));
        assert_eq!(check(&twice, TOKEN, NOW, DAY), Err(Refusal::Malformed));
    }

    #[test]
    fn auth_date_within_its_age_and_a_minute_ahead() {
        assert!(check(&signed(NOW - DAY), TOKEN, NOW, DAY).is_ok());
        assert_eq!(
            check(&signed(NOW - DAY - 1), TOKEN, NOW, DAY),
            Err(Refusal::Expired)
        );
        assert!(check(&signed(NOW + FUTURE_SLACK_SECS), TOKEN, NOW, DAY).is_ok());
        assert_eq!(
            check(&signed(NOW + FUTURE_SLACK_SECS + 1), TOKEN, NOW, DAY),
            Err(Refusal::FromTheFuture)
        );
        let no_date = sign_init_data(TOKEN, &[("user", USER)]);
        assert_eq!(check(&no_date, TOKEN, NOW, DAY), Err(Refusal::NoAuthDate));
        let bad_date = sign_init_data(TOKEN, &[("user", USER), ("auth_date", "soon")]);
        assert_eq!(check(&bad_date, TOKEN, NOW, DAY), Err(Refusal::NoAuthDate));
    }

    #[test]
    fn a_user_is_required_and_must_be_a_user() {
        let date = NOW.to_string();
        let none = sign_init_data(TOKEN, &[("auth_date", &date)]);
        assert_eq!(check(&none, TOKEN, NOW, DAY), Err(Refusal::NoUser));
        for user in [
            "[]",
            "{\"first_name\":\"Ann\"}",
            "{\"id\":\"42\"}",
            "not json",
        ] {
            let bad = sign_init_data(TOKEN, &[("auth_date", &date), ("user", user)]);
            assert_eq!(check(&bad, TOKEN, NOW, DAY), Err(Refusal::NoUser), "{user}");
        }
        let bare = sign_init_data(TOKEN, &[("auth_date", &date), ("user", "{\"id\":7}")]);
        let c = check(&bare, TOKEN, NOW, DAY).unwrap();
        assert_eq!(c.user.id, 7);
        assert_eq!(c.user.language_code, None);
    }
}
