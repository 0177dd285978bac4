//! Button data: `<letter>:<id>` (a crypto asset's button `c:<order id>:<asset>`), at most 64
//! bytes, made by [`Callback::data`] and read back by
//! [`Callback::parse`], which refuses anything else a button press carries.

use crate::{common::currency::CRYPTO_ASSETS, present::texts::Language};

/// What a button press asks for. The data is `<letter>:<positive id>` in ASCII.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callback {
    /// Buy (or renew) channel `id`'s default plan.
    Buy(i32),
    /// Buy plan `id` (a trial plan: start the trial).
    Plan(i64),
    /// The next page of the catalogue, after channel `id`.
    More(i32),
    /// Cancel the renewal of Stars subscription `id`.
    CancelRenewal(i64),
    /// Speak language `n` (1-based, in the order of [`Language::ALL`]) from now on.
    Language(u8),
    /// Pay order `id` through Crypto Pay in the asset at this index of [`CRYPTO_ASSETS`].
    Crypto(i64, u8),
}

impl Callback {
    /// The button's `callback_data`.
    pub fn data(self) -> String {
        match self {
            Callback::Buy(id) => format!("b:{id}"),
            Callback::Plan(id) => format!("p:{id}"),
            Callback::More(id) => format!("l:{id}"),
            Callback::CancelRenewal(id) => format!("x:{id}"),
            Callback::Language(n) => format!("g:{n}"),
            Callback::Crypto(id, asset) => format!(
                "c:{id}:{}",
                CRYPTO_ASSETS
                    .get(usize::from(asset))
                    .map_or("", |(a, _)| *a)
            ),
        }
    }

    /// The button that asks for order `order_id`'s Crypto Pay invoice in `asset` (`None`: not
    /// an asset of [`CRYPTO_ASSETS`]).
    pub fn crypto(order_id: i64, asset: &str) -> Option<Callback> {
        let index = CRYPTO_ASSETS.iter().position(|(a, _)| *a == asset)?;
        Some(Callback::Crypto(order_id, u8::try_from(index).ok()?))
    }

    /// The asset of a [`Callback::Crypto`] button.
    pub fn crypto_asset(index: u8) -> Option<&'static str> {
        CRYPTO_ASSETS.get(usize::from(index)).map(|(a, _)| *a)
    }

    /// Parses data made by [`Callback::data`]; anything else (forged, from an older version,
    /// not ours) is `None`.
    pub fn parse(data: &str) -> Option<Callback> {
        if let Some(rest) = data.strip_prefix("c:") {
            let (id, asset) = rest.split_once(':')?;
            let id = Callback::parse(&format!("p:{id}"))?;
            let Callback::Plan(id) = id else { return None };
            return Callback::crypto(id, asset);
        }
        let (kind, id) = data.split_once(':')?;
        if id.is_empty() || id.len() > 19 || !id.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let id: i64 = id.parse().ok()?;
        if id <= 0 {
            return None;
        }
        match kind {
            "b" => i32::try_from(id).ok().map(Callback::Buy),
            "l" => i32::try_from(id).ok().map(Callback::More),
            "p" => Some(Callback::Plan(id)),
            "x" => Some(Callback::CancelRenewal(id)),
            "g" => u8::try_from(id)
                .ok()
                .filter(|n| usize::from(*n) <= Language::ALL.len())
                .map(Callback::Language),
            _ => None,
        }
    }
}

impl Callback {
    /// The language a [`Callback::Language`] button chooses.
    pub fn language(n: u8) -> Option<Language> {
        Language::ALL.get(usize::from(n).checked_sub(1)?).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::present::render::CALLBACK_DATA_MAX;

    #[test]
    fn callback_data_round_trips_fits_and_refuses_anything_else() {
        for c in [
            Callback::Buy(1),
            Callback::Buy(i32::MAX),
            Callback::Plan(1),
            Callback::Plan(i64::MAX),
            Callback::More(7),
            Callback::CancelRenewal(i64::MAX),
            Callback::crypto(i64::MAX, "USDT").unwrap(),
            Callback::crypto(1, "TON").unwrap(),
        ] {
            assert!(c.data().len() <= CALLBACK_DATA_MAX);
            assert_eq!(Callback::parse(&c.data()), Some(c));
        }
        for forged in [
            "",
            "b",
            "b:",
            "b:0",
            "b:-1",
            "b:+1",
            "b:1.0",
            "b: 1",
            "b:99999999999",
            "x:99999999999999999999",
            "z:1",
            "B:1",
            "b:1:2",
            "buy:1",
            "b:١",
            "p:0",
            "p:",
            "P:1",
            "c:1",
            "c:1:",
            "c:1:DOGE",
            "c:1:usdt",
            "c:0:USDT",
            "c:x:USDT",
            "c:1:USDT:2",
        ] {
            assert_eq!(Callback::parse(forged), None, "{forged:?}");
        }
        assert_eq!(Callback::crypto(7, "USDT").unwrap().data(), "c:7:USDT");
        assert_eq!(Callback::crypto(7, "DOGE"), None);
    }
}
