//! A plan's prices in crypto assets (`crypto_prices`, door 6): the exact numbers the owner
//! fixed per asset (`{"USDT": "4.99", "TON": "1.5"}`), never a rate. Stored in the plan's
//! `crypto_prices` column as asset → minor units of the asset (the exponents of
//! [`currency::CRYPTO_ASSETS`]), shown and taken as decimal strings. [`check`] is the rule of
//! staff's input, pure.

use std::collections::BTreeMap;

use postgres_types::{FromSql, ToSql, Type};
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::common::currency;

/// Asset → price in the asset's minor units; never empty (no prices is `None` on the plan).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CryptoPrices(pub BTreeMap<String, i64>);

impl CryptoPrices {
    /// The price in `asset`, in its minor units.
    pub fn get(&self, asset: &str) -> Option<i64> {
        self.0.get(asset).copied()
    }

    /// The assets priced, with their prices, by asset.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0.iter().map(|(a, p)| (a.as_str(), *p))
    }

    /// A price as the owner wrote it: `4.99`, `1.5`.
    pub fn decimal(asset: &str, minor: i64) -> String {
        currency::minor_to_short_decimal(minor, currency::crypto_exponent(asset).unwrap_or(0))
    }
}

impl Serialize for CryptoPrices {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter().map(|(a, p)| (a, CryptoPrices::decimal(a, p))))
    }
}

impl<'a> FromSql<'a> for CryptoPrices {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<CryptoPrices, Box<dyn std::error::Error + Sync + Send>> {
        let value = <postgres_types::Json<Value> as FromSql>::from_sql(ty, raw)?.0;
        // An asset no longer counted (or a hand-edited row) is skipped, not fatal.
        let Value::Object(map) = value else {
            return Ok(CryptoPrices::default());
        };
        Ok(CryptoPrices(
            map.into_iter()
                .filter(|(asset, _)| currency::is_crypto_asset(asset))
                .filter_map(|(asset, price)| Some((asset, price.as_i64().filter(|p| *p > 0)?)))
                .collect(),
        ))
    }

    fn accepts(ty: &Type) -> bool {
        <postgres_types::Json<Value> as FromSql>::accepts(ty)
    }
}

impl ToSql for CryptoPrices {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        postgres_types::Json(&self.0).to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <postgres_types::Json<Value> as ToSql>::accepts(ty)
    }

    postgres_types::to_sql_checked!();
}

/// The assets a price may be in, as a 422 lists them.
fn assets() -> String {
    currency::CRYPTO_ASSETS
        .iter()
        .map(|(a, _)| *a)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads staff's `crypto_prices`: an object of asset (one Crypto Pay takes and this service
/// counts: [`currency::CRYPTO_ASSETS`]) → a positive decimal string with no more places than
/// the asset's minor unit, at most [`currency::MAX_CRYPTO_MINOR`] minor units. `None` for `{}`
/// (no prices). Errors are `(field, message)` pairs, the field named like
/// `crypto_prices.USDT`.
pub fn check(v: &Value) -> Result<Option<CryptoPrices>, Vec<(String, String)>> {
    let Value::Object(map) = v else {
        return Err(vec![(
            "crypto_prices".into(),
            "must be an object of asset → price, e.g. {\"USDT\": \"4.99\"}, or null".into(),
        )]);
    };
    let mut errors = Vec::new();
    let mut out = BTreeMap::new();
    for (asset, price) in map {
        let field = format!("crypto_prices.{asset}");
        let Some(exponent) = currency::crypto_exponent(asset) else {
            errors.push((
                field,
                format!("is not an asset Crypto Pay is used for here ({})", assets()),
            ));
            continue;
        };
        let Value::String(text) = price else {
            errors.push((
                field,
                "must be a decimal string, e.g. \"4.99\" (not a JSON number)".into(),
            ));
            continue;
        };
        match currency::decimal_to_minor(text, exponent) {
            Ok(minor) if minor <= 0 => errors.push((field, "must be more than 0".into())),
            Ok(minor) if minor > currency::MAX_CRYPTO_MINOR => errors.push((
                field,
                format!(
                    "must be at most {} {asset}",
                    currency::minor_to_short_decimal(currency::MAX_CRYPTO_MINOR, exponent)
                ),
            )),
            Ok(minor) => {
                out.insert(asset.clone(), minor);
            }
            Err(currency::AmountError::TooPrecise) => errors.push((
                field,
                format!("may have at most {exponent} decimal places ({asset}'s minor unit)"),
            )),
            Err(currency::AmountError::Overflow) => errors.push((field, "is too large".into())),
            Err(_) => errors.push((
                field,
                "must be a positive decimal such as \"4.99\" (no sign, exponent or spaces)".into(),
            )),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok((!out.is_empty()).then_some(CryptoPrices(out)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(v: Value) -> Vec<String> {
        check(&v).unwrap_err().into_iter().map(|(f, _)| f).collect()
    }

    #[test]
    fn the_owners_numbers_are_kept_exactly() {
        let p = check(&json!({"USDT": "4.99", "TON": "1.5"}))
            .unwrap()
            .unwrap();
        assert_eq!(p.get("USDT"), Some(4_990_000));
        assert_eq!(p.get("TON"), Some(1_500_000_000));
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"TON": "1.5", "USDT": "4.99"})
        );
        assert_eq!(check(&json!({})).unwrap(), None);
    }

    #[test]
    fn unknown_assets_numbers_and_too_many_places_are_refused() {
        assert_eq!(fields(json!({"DOGE": "1"})), ["crypto_prices.DOGE"]);
        assert_eq!(fields(json!({"USD": "1"})), ["crypto_prices.USD"]);
        assert_eq!(fields(json!({"USDT": 4.99})), ["crypto_prices.USDT"]);
        assert_eq!(fields(json!({"USDT": "4.9999999"})), ["crypto_prices.USDT"]);
        assert_eq!(fields(json!({"TON": "0"})), ["crypto_prices.TON"]);
        assert_eq!(fields(json!({"TON": "-1"})), ["crypto_prices.TON"]);
        assert_eq!(fields(json!({"TON": "1e3"})), ["crypto_prices.TON"]);
        assert_eq!(fields(json!({"USDT": "99999999"})), ["crypto_prices.USDT"]);
        assert_eq!(fields(json!(["USDT"])), ["crypto_prices"]);
        // Nine places are a TON's, not a USDT's.
        assert!(check(&json!({"TON": "0.000000001"})).is_ok());
        assert_eq!(
            fields(json!({"USDT": "0.000000001"})),
            ["crypto_prices.USDT"]
        );
    }
}
