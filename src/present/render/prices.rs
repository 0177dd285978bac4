//! Prices and periods as buyers read them: numbers by ICU4X's locale data, words by the
//! language's messages.

use crate::common::currency::{self, Money};
use crate::present::texts::{self, Language};

/// A price as buyers of `l` read it: `250 ⭐` for Stars, `4.99 USDT` for a crypto asset (no
/// padding zeros), `99.00 UAH` (English), `99,00 ₴` (Ukrainian) otherwise. The number is formatted with ICU4X's locale data for the language
/// (decimal separator, grouping from five digits on, so `2000 ⭐` stays one word); the
/// currency's sign or code is the language's message (`price-money`).
pub fn price(l: Language, money: &Money) -> String {
    let Money {
        amount_minor,
        currency: code,
    } = money;
    if code == "XTR" {
        return texts::price_stars(l, &number(l, *amount_minor, 0));
    }
    if let Some(exponent) = currency::crypto_exponent(code) {
        // A crypto price reads as the owner wrote it (`4.99 USDT`, `1.5 TON`), not padded to
        // the asset's six or nine places.
        let mut minor = *amount_minor;
        let mut places = exponent;
        while places > 0 && minor % 10 == 0 {
            minor /= 10;
            places -= 1;
        }
        return texts::price_money(l, &number(l, minor, places), code);
    }
    let exponent = currency::minor_unit_exponent(code).unwrap_or(2);
    texts::price_money(l, &number(l, *amount_minor, exponent), code)
}

/// `minor` units as a number with `exponent` decimals, formatted for `l`.
fn number(l: Language, minor: i64, exponent: u32) -> String {
    use icu_decimal::{
        DecimalFormatter,
        input::Decimal,
        options::{DecimalFormatterOptions, GroupingStrategy},
    };
    thread_local! {
        // Built once per thread (ICU4X's formatters are not `Sync`); the data is compiled in.
        static FORMATTERS: Vec<(Language, DecimalFormatter)> = {
            let mut options = DecimalFormatterOptions::default();
            options.grouping_strategy = Some(GroupingStrategy::Min2);
            Language::ALL
                .into_iter()
                .map(|l| {
                    let f = DecimalFormatter::try_new(l.icu_locale().into(), options)
                        .expect("ICU4X's compiled data has every language the bot speaks");
                    (l, f)
                })
                .collect()
        };
    }
    let exponent = i16::try_from(exponent).unwrap_or(0);
    let mut d = Decimal::from(minor);
    d.multiply_pow10(-exponent);
    d.pad_end(-exponent);
    FORMATTERS.with(|all| {
        all.iter()
            .find(|(lang, _)| *lang == l)
            .map(|(_, f)| f.format(&d).to_string())
            .unwrap_or_else(|| d.to_string())
    })
}

/// A billing period as buyers read it, with the language's plural form.
pub fn period(l: Language, days: i32) -> String {
    texts::period(l, days)
}

/// What one purchase of a plan lasts: [`period`], or `None` for lifetime access (the texts say
/// "lifetime" in their own words).
pub fn term(l: Language, period_days: Option<i32>) -> Option<String> {
    period_days.map(|d| period(l, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EN: Language = Language::En;

    #[test]
    fn prices_and_periods_read_as_people_write_them() {
        assert_eq!(price(EN, &Money::new(250, "XTR")), "250 ⭐");
        assert_eq!(price(EN, &Money::new(9900, "UAH")), "99.00 UAH");
        assert_eq!(price(EN, &Money::new(500, "JPY")), "500 JPY");
        assert_eq!(price(EN, &Money::new(1500, "KWD")), "1.500 KWD");
        assert_eq!(price(EN, &Money::new(4_990_000, "USDT")), "4.99 USDT");
        assert_eq!(price(EN, &Money::new(1_500_000_000, "TON")), "1.5 TON");
        assert_eq!(price(EN, &Money::new(5_000_000, "USDT")), "5 USDT");
        assert_eq!(
            price(Language::Uk, &Money::new(4_990_000, "USDT")),
            "4,99 USDT"
        );
        assert_eq!(period(EN, 1), "1 day");
        assert_eq!(period(EN, 30), "30 days");
    }
}
