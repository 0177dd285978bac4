//! Currency codes, ISO 4217 minor-unit exponents, and exact decimal-to-minor-unit conversion.
//!
//! The service stores money only as an integer `amount_minor` plus a currency code. Gateways
//! that report decimal amounts (WayForPay sends `199.5` as a JSON number) must be converted
//! without ever passing through a float, because `0.1 + 0.2`-style rounding would turn an exact
//! payment into an `amount_mismatch` or, worse, accept an underpayment. This module owns that
//! conversion and the exponent table it needs.
//!
//! The exponent table follows ISO 4217 list one (current currencies and funds), leaving out
//! the codes whose minor unit is "N.A." (precious metals, bond-market units, SDR, test codes),
//! since no payment can be denominated in them. `XTR` (Telegram Stars) is added with exponent 0:
//! one unit is one star and there are no fractions.
//!
//! Crypto Pay's assets (door 6) are priced and paid in their own units: a second table,
//! [`CRYPTO_ASSETS`], gives each a fixed exponent (USDT 6, TON 9, …) fine enough for any price
//! an owner writes and any amount Crypto Pay reports, and coarse enough that a price fits in
//! an `i64` with room for sums. A crypto payment is stored in its asset (`currency` = `USDT`,
//! `amount_minor` in millionths of a USDT), so statistics show it as its own currency. An
//! asset is never a plan's or a channel's currency ([`is_price_currency`]): a plan carries its
//! crypto prices beside its price.
//!
//! Where an amount crosses modules — an order's price, a payment checked against it, an
//! invoice or a payment link made from it, a price a buyer reads — it travels as one
//! [`Money`]: minor units and their currency together, so neither can be passed without the
//! other. On the wire the two stay the separate fields `amount_minor` and `currency`.

/// `(code, exponent)` pairs, sorted by code so lookups can binary-search.
///
/// A test asserts the ordering and uniqueness, so entries can be added without fear of a
/// silently unreachable row.
const EXPONENTS: &[(&str, u32)] = &[
    ("AED", 2),
    ("AFN", 2),
    ("ALL", 2),
    ("AMD", 2),
    ("AOA", 2),
    ("ARS", 2),
    ("AUD", 2),
    ("AWG", 2),
    ("AZN", 2),
    ("BAM", 2),
    ("BBD", 2),
    ("BDT", 2),
    // Replaced by the euro on 2026-01-01; kept so orders priced in leva before the switch still
    // reconcile.
    ("BGN", 2),
    ("BHD", 3),
    ("BIF", 0),
    ("BMD", 2),
    ("BND", 2),
    ("BOB", 2),
    ("BOV", 2),
    ("BRL", 2),
    ("BSD", 2),
    ("BTN", 2),
    ("BWP", 2),
    ("BYN", 2),
    ("BZD", 2),
    ("CAD", 2),
    ("CDF", 2),
    ("CHE", 2),
    ("CHF", 2),
    ("CHW", 2),
    ("CLF", 4),
    ("CLP", 0),
    ("CNY", 2),
    ("COP", 2),
    ("COU", 2),
    ("CRC", 2),
    ("CUP", 2),
    ("CVE", 2),
    ("CZK", 2),
    ("DJF", 0),
    ("DKK", 2),
    ("DOP", 2),
    ("DZD", 2),
    ("EGP", 2),
    ("ERN", 2),
    ("ETB", 2),
    ("EUR", 2),
    ("FJD", 2),
    ("FKP", 2),
    ("GBP", 2),
    ("GEL", 2),
    ("GHS", 2),
    ("GIP", 2),
    ("GMD", 2),
    ("GNF", 0),
    ("GTQ", 2),
    ("GYD", 2),
    ("HKD", 2),
    ("HNL", 2),
    ("HTG", 2),
    ("HUF", 2),
    ("IDR", 2),
    ("ILS", 2),
    ("INR", 2),
    ("IQD", 3),
    ("IRR", 2),
    ("ISK", 0),
    ("JMD", 2),
    ("JOD", 3),
    ("JPY", 0),
    ("KES", 2),
    ("KGS", 2),
    ("KHR", 2),
    ("KMF", 0),
    ("KPW", 2),
    ("KRW", 0),
    ("KWD", 3),
    ("KYD", 2),
    ("KZT", 2),
    ("LAK", 2),
    ("LBP", 2),
    ("LKR", 2),
    ("LRD", 2),
    ("LSL", 2),
    ("LYD", 3),
    ("MAD", 2),
    ("MDL", 2),
    ("MGA", 2),
    ("MKD", 2),
    ("MMK", 2),
    ("MNT", 2),
    ("MOP", 2),
    ("MRU", 2),
    ("MUR", 2),
    ("MVR", 2),
    ("MWK", 2),
    ("MXN", 2),
    ("MXV", 2),
    ("MYR", 2),
    ("MZN", 2),
    ("NAD", 2),
    ("NGN", 2),
    ("NIO", 2),
    ("NOK", 2),
    ("NPR", 2),
    ("NZD", 2),
    ("OMR", 3),
    ("PAB", 2),
    ("PEN", 2),
    ("PGK", 2),
    ("PHP", 2),
    ("PKR", 2),
    ("PLN", 2),
    ("PYG", 0),
    ("QAR", 2),
    ("RON", 2),
    ("RSD", 2),
    ("RUB", 2),
    ("RWF", 0),
    ("SAR", 2),
    ("SBD", 2),
    ("SCR", 2),
    ("SDG", 2),
    ("SEK", 2),
    ("SGD", 2),
    ("SHP", 2),
    ("SLE", 2),
    ("SOS", 2),
    ("SRD", 2),
    ("SSP", 2),
    ("STN", 2),
    ("SVC", 2),
    ("SYP", 2),
    ("SZL", 2),
    ("THB", 2),
    ("TJS", 2),
    ("TMT", 2),
    ("TND", 3),
    ("TOP", 2),
    ("TRY", 2),
    ("TTD", 2),
    ("TWD", 2),
    ("TZS", 2),
    ("UAH", 2),
    ("UGX", 0),
    ("USD", 2),
    ("USN", 2),
    ("UYI", 0),
    ("UYU", 2),
    ("UYW", 4),
    ("UZS", 2),
    ("VED", 2),
    ("VES", 2),
    ("VND", 0),
    ("VUV", 0),
    ("WST", 2),
    ("XAD", 2),
    ("XAF", 0),
    ("XCD", 2),
    ("XCG", 2),
    ("XOF", 0),
    ("XPF", 0),
    // Not ISO 4217: Telegram Stars, which the service sells through Door 3.
    ("XTR", 0),
    ("YER", 2),
    ("ZAR", 2),
    ("ZMW", 2),
    ("ZWG", 2),
];

/// The assets Crypto Pay takes (`createInvoice`'s `asset`, help.crypt.bot/crypto-pay-api
/// "Assets") that a plan may be priced in, with the exponent of the minor unit the service
/// counts them in, sorted by code. The exponents are ours, not the chains': fixed once, since
/// stored amounts are counted in them. Stablecoins (USDT, USDC) and TRX in millionths (their
/// own precision on TON and Tron), TON in nanotons (its own), BTC and LTC in hundred-millionths
/// (satoshi, litoshi), ETH and BNB in billionths (gwei; their chains' 18 decimals would leave an
/// `i64` room for only nine coins, and no price is written finer than a gwei).
pub const CRYPTO_ASSETS: &[(&str, u32)] = &[
    ("BNB", 9),
    ("BTC", 8),
    ("ETH", 9),
    ("LTC", 8),
    ("TON", 9),
    ("TRX", 6),
    ("USDC", 6),
    ("USDT", 6),
];

/// The most minor units a price in a crypto asset may be: ten trillion (ten million USDT,
/// ten thousand TON, a hundred thousand BTC), far above any subscription and far below the
/// limits of the integers that carry sums of them.
pub const MAX_CRYPTO_MINOR: i64 = 10_000_000_000_000;

/// Every currency the service can count money in, with its minor-unit exponent: the ISO 4217
/// codes and `XTR`, sorted by code, then the crypto assets (the staff console formats amounts
/// with it, so the browser and the server agree on every code).
pub fn exponents() -> impl Iterator<Item = (&'static str, u32)> {
    EXPONENTS.iter().chain(CRYPTO_ASSETS.iter()).copied()
}

/// The exponent of crypto asset `code` ([`CRYPTO_ASSETS`]), or `None` for anything else.
pub fn crypto_exponent(code: &str) -> Option<u32> {
    CRYPTO_ASSETS
        .binary_search_by(|(c, _)| (*c).cmp(code))
        .ok()
        .map(|i| CRYPTO_ASSETS[i].1)
}

/// Whether `code` is a crypto asset of [`CRYPTO_ASSETS`].
pub fn is_crypto_asset(code: &str) -> bool {
    crypto_exponent(code).is_some()
}

/// Whether `code` may be a channel's, a plan's or an amount off's currency: an ISO 4217 code
/// of the table, or `XTR` — never a crypto asset (a plan's crypto prices are its own field).
pub fn is_price_currency(code: &str) -> bool {
    is_valid_code(code) && EXPONENTS.binary_search_by(|(c, _)| (*c).cmp(code)).is_ok()
}

/// True if `s` has the shape of a currency code: exactly three ASCII upper-case letters.
///
/// This is a syntax check only (it accepts `XTR` and unknown codes alike); use
/// [`minor_unit_exponent`] to find out whether the code is one the service can price in.
pub fn is_valid_code(s: &str) -> bool {
    s.len() == 3 && s.bytes().all(|b| b.is_ascii_uppercase())
}

/// The number of decimal places of the currency's minor unit (`UAH` → 2, `JPY` → 0,
/// `KWD` → 3, `XTR` → 0, `USDT` → 6, `TON` → 9), or `None` for a code in neither table.
///
/// Lookup is case-sensitive: currency codes are upper-case by contract, and silently
/// accepting `uah` would let two spellings of one currency coexist in stored data.
pub fn minor_unit_exponent(code: &str) -> Option<u32> {
    EXPONENTS
        .binary_search_by(|(c, _)| (*c).cmp(code))
        .ok()
        .map(|i| EXPONENTS[i].1)
        .or_else(|| crypto_exponent(code))
}

/// The most stars a price in `XTR` may be: a sanity bound; Telegram's own cap on an invoice or a
/// subscription is lower and it refuses an invoice above it.
pub const MAX_STARS: i64 = 100_000;

/// The most major units (a billion) a price in an ISO 4217 currency may be.
pub const MAX_MAJOR_UNITS: i64 = 1_000_000_000;

/// The highest price, in minor units, the service accepts in `code`: [`MAX_STARS`] for `XTR`,
/// else [`MAX_MAJOR_UNITS`] whole units (`UAH`: 100 000 000 000 kopiyok, `JPY`: 1 000 000 000
/// yen, `KWD`: 1 000 000 000 000 fils); `None` for a code not in the table. It bounds prices
/// and amounts off, so nobody sets a price nobody meant (`i64::MAX`), and an order's amount
/// stays far from the limits of the integers that carry it.
pub fn max_price_minor(code: &str) -> Option<i64> {
    if code == "XTR" {
        return Some(MAX_STARS);
    }
    if is_crypto_asset(code) {
        return Some(MAX_CRYPTO_MINOR);
    }
    let exponent = minor_unit_exponent(code)?;
    Some(MAX_MAJOR_UNITS * 10_i64.pow(exponent))
}

/// The smallest amount, in minor units, an order in `code` may be charged: one minor unit (one
/// star for `XTR`), the floor a discount never goes below (a free order is a 100 % code).
pub fn smallest_charge_minor(_code: &str) -> i64 {
    1
}

/// What is wrong with a price (or an amount off) of `price_minor` in `code`: above the
/// currency's highest price ([`max_price_minor`]), as a 422 says it. Pure.
pub fn price_over_max(price_minor: i64, code: &str) -> Option<String> {
    let max = max_price_minor(code)?;
    let exponent = minor_unit_exponent(code)?;
    (price_minor > max).then(|| {
        format!(
            "must be at most {max} minor units of {code} ({} {code})",
            minor_to_decimal(max, exponent)
        )
    })
}

/// Why a decimal amount could not be converted to minor units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    /// Not a plain decimal: empty, signs other than a leading `-`, exponent notation, leading
    /// zeros, spaces, or a missing digit before/after the point.
    #[error(
        "amount must be a plain decimal number such as 100 or 199.99 \
         (no sign, exponent notation, leading zeros or spaces)"
    )]
    Malformed,
    /// More non-zero fractional digits than the currency's minor unit allows.
    #[error("amount has more decimal places than the currency's minor unit allows")]
    TooPrecise,
    /// A negative amount, which is never a payment.
    #[error("amount must not be negative")]
    Negative,
    /// The amount in minor units does not fit in a signed 64-bit integer.
    #[error("amount is too large")]
    Overflow,
}

/// Converts the text of a JSON number (`100`, `199.5`, `199.99`, `100.00`) to an integer count of
/// minor units for a currency with the given `exponent`, using exact integer arithmetic.
///
/// Accepted grammar: `(0|[1-9][0-9]*)(\.[0-9]+)?`. Fractional digits beyond `exponent` are
/// allowed only when they are all zero (`199.990` is fine for exponent 2, `199.995` is
/// [`AmountError::TooPrecise`]): rounding a payment amount would hide a gateway bug. Exponent
/// notation (`1e2`) is refused as [`AmountError::Malformed`] even though it is valid JSON,
/// because no gateway we integrate sends it and accepting it invites float-formatted input.
pub fn decimal_to_minor(literal: &str, exponent: u32) -> Result<i64, AmountError> {
    if let Some(rest) = literal.strip_prefix('-') {
        // Only call it negative if the rest would have been a valid amount; otherwise the more
        // useful message is that the text is malformed.
        return match unsigned_to_minor(rest, exponent) {
            Ok(_) | Err(AmountError::TooPrecise | AmountError::Overflow) => {
                Err(AmountError::Negative)
            }
            Err(e) => Err(e),
        };
    }
    unsigned_to_minor(literal, exponent)
}

/// [`decimal_to_minor`] for text without a sign.
fn unsigned_to_minor(literal: &str, exponent: u32) -> Result<i64, AmountError> {
    let (int_part, frac_part) = match literal.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (literal, None),
    };
    let is_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !is_digits(int_part) || (int_part.len() > 1 && int_part.starts_with('0')) {
        return Err(AmountError::Malformed);
    }
    let frac_part = frac_part.unwrap_or("");
    if literal.contains('.') && !is_digits(frac_part) {
        return Err(AmountError::Malformed);
    }

    let exponent_len = usize::try_from(exponent).unwrap_or(usize::MAX);
    let (significant_frac, excess_frac) = frac_part.split_at(frac_part.len().min(exponent_len));
    if excess_frac.bytes().any(|b| b != b'0') {
        return Err(AmountError::TooPrecise);
    }

    let push_digit = |acc: i64, digit: u8| -> Result<i64, AmountError> {
        acc.checked_mul(10)
            .and_then(|v| v.checked_add(i64::from(digit - b'0')))
            .ok_or(AmountError::Overflow)
    };
    let mut minor = 0i64;
    for b in int_part.bytes().chain(significant_frac.bytes()) {
        minor = push_digit(minor, b)?;
    }
    // Scale up for the fractional places the literal did not spell out. Zero stays zero, which
    // also keeps this loop from running `exponent` times for a pathological exponent.
    if minor != 0 {
        for _ in significant_frac.len()..exponent_len {
            minor = push_digit(minor, b'0')?;
        }
    }
    Ok(minor)
}

/// The decimal text of `minor` minor units for a currency with `exponent` decimal places:
/// `19900, 2` → `199.00`, `500, 0` → `500`, `1500, 3` → `1.500`. The inverse of
/// [`decimal_to_minor`] for non-negative amounts; exact (no float).
pub fn minor_to_decimal(minor: i64, exponent: u32) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let digits = minor.unsigned_abs().to_string();
    let places = exponent as usize;
    if places == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = places + 1);
    let (int_part, frac_part) = padded.split_at(padded.len() - places);
    format!("{sign}{int_part}.{frac_part}")
}

/// [`minor_to_decimal`] without the trailing zeros of the fraction (nor a bare point):
/// `4990000, 6` → `4.99`, `1500000000, 9` → `1.5`, `5000000, 6` → `5`. How crypto prices are
/// written back to the owner who typed them and shown to buyers: Crypto Pay's own amounts read
/// this way.
pub fn minor_to_short_decimal(minor: i64, exponent: u32) -> String {
    let text = minor_to_decimal(minor, exponent);
    if !text.contains('.') {
        return text;
    }
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// An amount of money: `amount_minor` minor units of `currency` (three upper-case letters).
/// Serialized as the two fields `amount_minor` and `currency`, as every API body spells them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Money {
    pub amount_minor: i64,
    pub currency: String,
}

/// How a payment's money differs from what was asked ([`Money::mismatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Another currency (whatever the amount).
    Currency,
    /// The same currency, another amount.
    Amount,
}

impl Money {
    pub fn new(amount_minor: i64, currency: impl Into<String>) -> Money {
        Money {
            amount_minor,
            currency: currency.into(),
        }
    }

    /// The amount as a decimal in the currency's major unit (`19900 UAH` → `199.00`); `None`
    /// for a currency without a known minor unit.
    pub fn decimal(&self) -> Option<String> {
        minor_unit_exponent(&self.currency).map(|e| minor_to_decimal(self.amount_minor, e))
    }

    /// How this (a payment) differs from `asked` (its order's price): the currency is
    /// compared first, so a payment in another currency is never called a wrong amount.
    pub fn mismatch(&self, asked: &Money) -> Option<Mismatch> {
        if self.currency != asked.currency {
            Some(Mismatch::Currency)
        } else if self.amount_minor != asked.amount_minor {
            Some(Mismatch::Amount)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_are_bounded_per_currency() {
        assert_eq!(max_price_minor("XTR"), Some(100_000));
        assert_eq!(max_price_minor("UAH"), Some(100_000_000_000));
        assert_eq!(max_price_minor("JPY"), Some(1_000_000_000));
        assert_eq!(max_price_minor("KWD"), Some(1_000_000_000_000));
        assert_eq!(max_price_minor("CLF"), Some(10_000_000_000_000));
        assert_eq!(max_price_minor("ZZZ"), None);
        // Every currency's bound fits, with room for sums of many orders.
        for (code, _) in exponents() {
            assert!(
                max_price_minor(code).unwrap() <= i64::MAX / 100_000,
                "{code}"
            );
        }
        assert_eq!(
            price_over_max(100_000_000_001, "UAH").as_deref(),
            Some("must be at most 100000000000 minor units of UAH (1000000000.00 UAH)")
        );
        assert_eq!(price_over_max(100_000_000_000, "UAH"), None);
    }

    #[test]
    fn minor_units_print_as_exact_decimals() {
        assert_eq!(minor_to_decimal(19900, 2), "199.00");
        assert_eq!(minor_to_decimal(19950, 2), "199.50");
        assert_eq!(minor_to_decimal(5, 2), "0.05");
        assert_eq!(minor_to_decimal(0, 2), "0.00");
        assert_eq!(minor_to_decimal(500, 0), "500");
        assert_eq!(minor_to_decimal(1500, 3), "1.500");
        assert_eq!(minor_to_decimal(-150, 2), "-1.50");
        assert_eq!(minor_to_decimal(i64::MAX, 2), "92233720368547758.07");
        for (minor, exponent) in [(19900, 2), (1, 3), (123_456, 4), (7, 0)] {
            let text = minor_to_decimal(minor, exponent);
            assert_eq!(decimal_to_minor(&text, exponent), Ok(minor), "{text}");
        }
    }

    #[test]
    fn valid_codes() {
        for code in ["UAH", "USD", "XTR", "ZZZ"] {
            assert!(is_valid_code(code), "{code}");
        }
        for code in ["", "US", "USDT", "uah", "Uah", "U1H", "ÜAH", " UAH", "UA "] {
            assert!(!is_valid_code(code), "{code:?}");
        }
    }

    #[test]
    fn crypto_assets_are_their_own_table() {
        for pair in CRYPTO_ASSETS.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{} !< {}", pair[0].0, pair[1].0);
        }
        for (code, exp) in CRYPTO_ASSETS {
            assert!(
                (3..=5).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_uppercase()),
                "{code}"
            );
            assert_eq!(minor_unit_exponent(code), Some(*exp), "{code}");
            // Never an ISO code as well: one code, one meaning.
            assert!(!EXPONENTS.iter().any(|(c, _)| c == code), "{code}");
            assert!(!is_price_currency(code), "{code}");
        }
        assert_eq!(minor_unit_exponent("USDT"), Some(6));
        assert_eq!(minor_unit_exponent("TON"), Some(9));
        assert!(is_price_currency("UAH") && is_price_currency("XTR"));
        assert!(!is_price_currency("ZZZ"));
        // An owner's prices are exact in them…
        assert_eq!(decimal_to_minor("4.99", 6), Ok(4_990_000));
        assert_eq!(decimal_to_minor("1.5", 9), Ok(1_500_000_000));
        // …and shown back as written, to the asset's places.
        assert_eq!(
            Money::new(4_990_000, "USDT").decimal().as_deref(),
            Some("4.990000")
        );
        assert_eq!(minor_to_short_decimal(4_990_000, 6), "4.99");
        assert_eq!(minor_to_short_decimal(1_500_000_000, 9), "1.5");
        assert_eq!(minor_to_short_decimal(5_000_000, 6), "5");
        assert_eq!(minor_to_short_decimal(1, 9), "0.000000001");
        assert_eq!(minor_to_short_decimal(500, 0), "500");
        assert_eq!(max_price_minor("TON"), Some(MAX_CRYPTO_MINOR));
        assert!(exponents().any(|(c, e)| c == "USDT" && e == 6));
    }

    #[test]
    fn table_is_sorted_unique_and_well_formed() {
        for pair in EXPONENTS.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{} !< {}", pair[0].0, pair[1].0);
        }
        for (code, exp) in EXPONENTS {
            assert!(is_valid_code(code), "{code}");
            assert!(*exp <= 4, "{code}");
            assert_eq!(minor_unit_exponent(code), Some(*exp), "{code}");
        }
        assert!(EXPONENTS.len() > 150);
    }

    #[test]
    fn zero_exponent_currencies() {
        for code in [
            "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI",
            "VND", "VUV", "XAF", "XOF", "XPF", "XTR",
        ] {
            assert_eq!(minor_unit_exponent(code), Some(0), "{code}");
        }
    }

    #[test]
    fn three_and_four_exponent_currencies() {
        for code in ["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"] {
            assert_eq!(minor_unit_exponent(code), Some(3), "{code}");
        }
        for code in ["CLF", "UYW"] {
            assert_eq!(minor_unit_exponent(code), Some(4), "{code}");
        }
    }

    #[test]
    fn common_two_exponent_currencies() {
        for code in [
            "UAH", "USD", "EUR", "GBP", "PLN", "CHF", "CZK", "SEK", "NOK", "DKK", "HUF", "RON",
            "BGN", "CAD", "AUD", "NZD", "CNY", "HKD", "SGD", "INR", "TRY", "ILS", "AED", "SAR",
            "KZT", "GEL", "MDL", "AZN", "AMD", "BRL", "MXN", "ZAR",
        ] {
            assert_eq!(minor_unit_exponent(code), Some(2), "{code}");
        }
    }

    #[test]
    fn unknown_and_unpriceable_codes() {
        // Withdrawn, N.A. minor unit, test/no-currency codes, wrong case, junk, a crypto asset
        // Crypto Pay is not used for here (USDT is counted: `crypto_assets_are_their_own_table`).
        for code in [
            "ZZZ", "HRK", "ZWL", "SLL", "XAU", "XDR", "XTS", "XXX", "uah", "", "DOGE", "usdt",
        ] {
            assert_eq!(minor_unit_exponent(code), None, "{code:?}");
        }
    }

    #[test]
    fn converts_plain_decimals() {
        let cases = [
            ("100", 2, 10_000),
            ("199.5", 2, 19_950),
            ("199.99", 2, 19_999),
            ("0.01", 2, 1),
            ("0", 2, 0),
            ("0.0", 2, 0),
            ("100.0", 2, 10_000),
            ("100.00", 2, 10_000),
            ("199.990", 2, 19_999),
            ("199.99000000000000000000000000", 2, 19_999),
            ("250", 0, 250),
            ("250.000", 0, 250),
            ("1.234", 3, 1_234),
            ("1.5", 3, 1_500),
            ("1", 4, 10_000),
            ("0.0001", 4, 1),
        ];
        for (literal, exp, minor) in cases {
            assert_eq!(
                decimal_to_minor(literal, exp),
                Ok(minor),
                "{literal} e{exp}"
            );
        }
    }

    #[test]
    fn rejects_too_precise() {
        assert_eq!(decimal_to_minor("199.995", 2), Err(AmountError::TooPrecise));
        assert_eq!(decimal_to_minor("0.001", 2), Err(AmountError::TooPrecise));
        assert_eq!(decimal_to_minor("250.5", 0), Err(AmountError::TooPrecise));
        assert_eq!(decimal_to_minor("1.00001", 4), Err(AmountError::TooPrecise));
    }

    #[test]
    fn rejects_negative() {
        assert_eq!(decimal_to_minor("-1", 2), Err(AmountError::Negative));
        assert_eq!(decimal_to_minor("-199.99", 2), Err(AmountError::Negative));
        assert_eq!(decimal_to_minor("-0.001", 2), Err(AmountError::Negative));
        assert_eq!(decimal_to_minor("-0", 2), Err(AmountError::Negative));
        // Malformed after the sign is reported as malformed.
        assert_eq!(decimal_to_minor("-1e2", 2), Err(AmountError::Malformed));
        assert_eq!(decimal_to_minor("--1", 2), Err(AmountError::Malformed));
    }

    #[test]
    fn rejects_malformed() {
        for literal in [
            "", "+1", "1e2", "1E2", "1.5e1", "1e-2", ".5", "1.", "01", "00.5", " 1", "1 ", "1,5",
            "1.2.3", "0x10", "NaN", "Infinity", "١٢", "1_000", ".", "-",
        ] {
            assert_eq!(
                decimal_to_minor(literal, 2),
                Err(AmountError::Malformed),
                "{literal:?}"
            );
        }
    }

    #[test]
    fn overflow_is_detected() {
        let max = i64::MAX.to_string();
        assert_eq!(decimal_to_minor(&max, 0), Ok(i64::MAX));
        assert_eq!(decimal_to_minor("92233720368547758.07", 2), Ok(i64::MAX));
        assert_eq!(
            decimal_to_minor("92233720368547758.08", 2),
            Err(AmountError::Overflow)
        );
        assert_eq!(
            decimal_to_minor("92233720368547759", 2),
            Err(AmountError::Overflow)
        );
        assert_eq!(
            decimal_to_minor("99999999999999999999999999", 0),
            Err(AmountError::Overflow)
        );
        assert_eq!(decimal_to_minor("1", 19), Err(AmountError::Overflow));
        assert_eq!(decimal_to_minor("1", u32::MAX), Err(AmountError::Overflow));
        assert_eq!(decimal_to_minor("0", u32::MAX), Ok(0));
    }

    #[test]
    fn error_messages_are_human() {
        assert!(AmountError::Malformed.to_string().contains("exponent"));
        assert_eq!(
            AmountError::Negative.to_string(),
            "amount must not be negative"
        );
        let _: &dyn std::error::Error = &AmountError::Overflow;
    }

    #[test]
    fn money_compares_currency_first_and_keeps_its_wire_fields() {
        let asked = Money::new(19900, "UAH");
        assert_eq!(Money::new(19900, "UAH").mismatch(&asked), None);
        assert_eq!(
            Money::new(1, "USD").mismatch(&asked),
            Some(Mismatch::Currency)
        );
        assert_eq!(
            Money::new(1, "UAH").mismatch(&asked),
            Some(Mismatch::Amount)
        );
        assert_eq!(asked.decimal().as_deref(), Some("199.00"));
        assert_eq!(Money::new(250, "XTR").decimal().as_deref(), Some("250"));
        assert_eq!(Money::new(1, "ZZZ").decimal(), None);
        let json = serde_json::to_value(&asked).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"amount_minor": 19900, "currency": "UAH"})
        );
        assert_eq!(serde_json::from_value::<Money>(json).unwrap(), asked);
    }
}
