//! WayForPay Purchase links: the signed payment page the bot sends a buyer of a card-priced
//! channel, so the card payment needs no outgoing call to WayForPay. The Purchase form's fields
//! travel as GET parameters of `https://secure.wayforpay.com/pay`; WayForPay sends the result to
//! `serviceUrl` (door 2, `POST /api/webhook/wayforpay`), naming our order reference.
//!
//! `merchantSignature` is hex HMAC-MD5(`WAYFORPAY_SECRET_KEY`, `merchantAccount;
//! merchantDomainName;orderReference;orderDate;amount;currency;productName;productCount;
//! productPrice`) over the exact texts sent (one product here), UTF-8. Pure: the caller gives
//! the secret, the order and the configured URLs.

use hmac::{Hmac, Mac};
use md5::Md5;

use crate::common::currency::Money;

/// WayForPay's payment page.
pub const PAY_URL: &str = "https://secure.wayforpay.com/pay";

/// One purchase: an order of one product (a channel's billing period).
#[derive(Debug, Clone)]
pub struct Purchase<'a> {
    pub merchant_account: &'a str,
    /// `merchantDomainName` (`WAYFORPAY_DOMAIN`).
    pub merchant_domain: &'a str,
    pub order_reference: &'a str,
    /// Unix seconds: when the order was made.
    pub order_date: i64,
    pub price: &'a Money,
    pub product_name: &'a str,
    /// Where WayForPay sends the result (`PUBLIC_URL` + `/api/webhook/wayforpay`).
    pub service_url: &'a str,
    /// Where the buyer's browser goes after paying (back to the bot).
    pub return_url: Option<&'a str>,
    /// How long the page accepts payment, in seconds.
    pub order_timeout_secs: Option<i64>,
}

/// The decimal text of an amount for WayForPay (`199.00`); `None` for a currency without a
/// known minor unit.
pub fn amount_text(price: &Money) -> Option<String> {
    price.decimal()
}

/// The hex `merchantSignature` of `p` (see the module doc); `None` for an unknown currency.
pub fn signature(secret: &[u8], p: &Purchase<'_>) -> Option<String> {
    let amount = amount_text(p.price)?;
    let order_date = p.order_date.to_string();
    let signed = [
        p.merchant_account,
        p.merchant_domain,
        p.order_reference,
        &order_date,
        &amount,
        &p.price.currency,
        p.product_name,
        "1",
        &amount,
    ]
    .join(";");
    let mut mac = Hmac::<Md5>::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(signed.as_bytes());
    Some(hex::encode(mac.finalize().into_bytes()))
}

/// The signed Purchase link of `p`; `None` for an unknown currency.
pub fn url(secret: &[u8], p: &Purchase<'_>) -> Option<String> {
    let amount = amount_text(p.price)?;
    let signature = signature(secret, p)?;
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query
        .append_pair("merchantAccount", p.merchant_account)
        .append_pair("merchantAuthType", "SimpleSignature")
        .append_pair("merchantDomainName", p.merchant_domain)
        .append_pair("merchantTransactionSecureType", "AUTO")
        .append_pair("merchantSignature", &signature)
        .append_pair("orderReference", p.order_reference)
        .append_pair("orderDate", &p.order_date.to_string())
        .append_pair("amount", &amount)
        .append_pair("currency", &p.price.currency)
        .append_pair("productName[]", p.product_name)
        .append_pair("productCount[]", "1")
        .append_pair("productPrice[]", &amount)
        .append_pair("serviceUrl", p.service_url)
        .append_pair("language", "AUTO");
    if let Some(return_url) = p.return_url {
        query.append_pair("returnUrl", return_url);
    }
    if let Some(secs) = p.order_timeout_secs {
        query.append_pair("orderTimeout", &secs.to_string());
    }
    Some(format!("{PAY_URL}?{}", query.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WayForPay's public test merchant key (account `test_merch_n1`).
    const SECRET: &[u8] = b"flk3409refn54t54t*FNJRET";
    /// Computed outside Rust: `printf '%s' 'test_merch_n1;shop.example.com;
    /// ord_0123456789abcdef0123456789abcdef;1700000000;199.00;UAH;Private «Channel» 🔥;1;199.00'
    /// | openssl dgst -md5 -hmac 'flk3409refn54t54t*FNJRET'`
    const SIG: &str = "f7f64998a06d78d83adc90f3d8584ead";

    fn purchase(price: &Money) -> Purchase<'_> {
        Purchase {
            merchant_account: "test_merch_n1",
            merchant_domain: "shop.example.com",
            order_reference: "ord_0123456789abcdef0123456789abcdef",
            order_date: 1_700_000_000,
            price,
            product_name: "Private «Channel» 🔥",
            service_url: "https://pay.example.com/api/webhook/wayforpay",
            return_url: Some("https://t.me/subgate_bot"),
            order_timeout_secs: Some(3600),
        }
    }

    #[test]
    fn the_signature_matches_an_independent_computation() {
        assert_eq!(
            signature(SECRET, &purchase(&Money::new(19900, "UAH"))).as_deref(),
            Some(SIG)
        );
    }

    #[test]
    fn the_link_carries_every_signed_field_as_signed() {
        let link = url(SECRET, &purchase(&Money::new(19900, "UAH"))).unwrap();
        let parsed = url::Url::parse(&link).unwrap();
        assert_eq!(
            format!(
                "{}://{}{}",
                parsed.scheme(),
                parsed.host_str().unwrap(),
                parsed.path()
            ),
            PAY_URL
        );
        let q: std::collections::HashMap<String, String> =
            parsed.query_pairs().into_owned().collect();
        assert_eq!(q["merchantSignature"], SIG);
        assert_eq!(q["amount"], "199.00");
        assert_eq!(q["productPrice[]"], "199.00");
        assert_eq!(q["productCount[]"], "1");
        assert_eq!(q["productName[]"], "Private «Channel» 🔥");
        assert_eq!(q["orderDate"], "1700000000");
        assert_eq!(q["merchantDomainName"], "shop.example.com");
        assert_eq!(
            q["serviceUrl"],
            "https://pay.example.com/api/webhook/wayforpay"
        );
        assert_eq!(q["returnUrl"], "https://t.me/subgate_bot");
        assert_eq!(q["orderTimeout"], "3600");
    }

    #[test]
    fn amounts_follow_the_currency_exponent() {
        let text = |minor, code| amount_text(&Money::new(minor, code));
        assert_eq!(text(19900, "UAH").as_deref(), Some("199.00"));
        assert_eq!(text(500, "JPY").as_deref(), Some("500"));
        assert_eq!(text(1500, "KWD").as_deref(), Some("1.500"));
        assert_eq!(text(1, "ZZZ"), None);
        let unknown = Money::new(19900, "ZZZ");
        assert!(url(SECRET, &purchase(&unknown)).is_none());
    }
}
