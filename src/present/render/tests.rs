//! Every text in every language against Telegram's limits, across the renderers.

use super::{catalogue::tests::offer_view, *};
use crate::{
    common::currency::Money,
    present::texts::{self, Language},
};

/// Every text in every language at the longest values it can carry: a 255-character title
/// of two-unit emoji, the longest period (3660 days), the largest price, the longest date,
/// a long join link. What Telegram limits is checked at its limit: callback answers (200),
/// invoice title, label (32) and description (255), pre-checkout refusals (100, in
/// `telegram::pre_checkout`), button data (64) and messages (4096).
#[test]
fn every_text_fits_telegrams_limits_in_every_language_with_the_longest_values() {
    let title = "🔥".repeat(255);
    let long_date: chrono::DateTime<chrono::Utc> = "2030-11-30T23:59:00Z".parse().unwrap();
    let big = Money::new(i64::MAX, "UAH");
    let link = format!("https://t.me/+{}", "A".repeat(64));
    for l in Language::ALL {
        let when = texts::day(l, long_date);
        let price = price(l, &big);
        let days = period(l, 3660);
        let fits = |what: &str, text: &str, max: usize| {
            assert!(
                units(text) <= max,
                "{l} {what}: {} > {max}: {text}",
                units(text)
            );
        };
        // Callback answers: what carries no title fits whole; what names a channel is
        // clipped by `answer_callback`, and the hold answer keeps its time.
        for (what, text) in [
            ("invoice_on_its_way", texts::invoice_on_its_way(l)),
            ("invoice_already_sent", texts::invoice_already_sent(l)),
            ("button_invalid", texts::button_invalid(l)),
            ("channel_unavailable", texts::channel_unavailable(l)),
            ("promo_price_gone", texts::promo_price_gone(l)),
            ("renewal_cancelled", texts::renewal_cancelled(l)),
            (
                "renewal_already_cancelled",
                texts::renewal_already_cancelled(l),
            ),
            ("language_chosen", texts::language_chosen(l)),
        ] {
            fits(what, &text, CALLBACK_ANSWER_MAX);
        }
        for text in [
            texts::channel_full(l, &title),
            texts::cannot_be_paid(l, &title),
            texts::already_lifetime(l, &title),
            texts::trial_used(l, &title),
            texts::free_access_granted(l, &[title.clone(), title.clone()]),
            texts::card_unavailable(l, &title),
            texts::already_subscribed(l, &title, &when),
            texts::code_refused_at_order(
                l,
                &"C".repeat(32),
                &texts::CodeRefusal::FirstPurchase.text(l),
                &price,
            ),
        ] {
            let a = answer_callback("q", &text, true);
            fits("answer", a["text"].as_str().unwrap(), CALLBACK_ANSWER_MAX);
        }
        for cooldown in [true, false] {
            let a = hold_limited_answer(l, &title, &when, cooldown);
            fits("hold_limited_answer", &a, CALLBACK_ANSWER_MAX);
            assert!(a.contains(&when), "{l}: {a}");
        }
        // Invoices.
        fits(
            "invoice_title",
            &invoice_title(l, &title, 1),
            INVOICE_TITLE_MAX,
        );
        fits(
            "invoice_title fallback",
            &invoice_title(l, " ", i32::MAX),
            INVOICE_TITLE_MAX,
        );
        fits(
            "invoice_label",
            &texts::invoice_label(l, Some(&days)),
            INVOICE_TITLE_MAX,
        );
        fits(
            "invoice_label lifetime",
            &texts::invoice_label(l, None),
            INVOICE_TITLE_MAX,
        );
        for d in [Some(3660), None] {
            let text = invoice_description(l, None, &title, 1, d);
            fits("invoice_description", &text, INVOICE_DESCRIPTION_MAX);
            assert!(text.ends_with('.'), "{l}: {text}");
        }
        // Button data.
        for (_, data) in language_choice(l).rows.iter().map(|r| {
            (
                r[0]["text"].clone(),
                r[0]["callback_data"].as_str().unwrap().to_string(),
            )
        }) {
            assert!(data.len() <= CALLBACK_DATA_MAX);
            assert!(
                Callback::language(Callback::parse(&data).map_or(0, |c| match c {
                    Callback::Language(n) => n,
                    _ => 0,
                }))
                .is_some()
            );
        }
        // Messages, unclipped.
        let notices = [
            texts::grant(l, &title, &when, &link),
            texts::grant_for_life(l, &title, &link),
            texts::renewal_receipt(l, &title, &when),
            texts::lifetime_receipt(l, &title),
            texts::reminder(l, &title, &when),
            texts::grace_notice(l, &title, &when),
            texts::subscription_offer(l, &title, &price, &days),
            texts::card_offer(l, &title, &price, Some(&days), 1440),
            texts::card_offer(l, &title, &price, None, 1),
            texts::subscription_cancelled(l, &title, Some(&when)),
            texts::code_applied(
                l,
                &"C".repeat(32),
                &texts::code_gives(l, &price, Some(&[title.as_str(); 4].join(", "))),
            ),
            texts::with_subscription_stopped(
                l,
                &texts::payment_in_review(l, &title, &price, true),
                Some(crate::common::vocabulary::Reason::AlreadyLifetime),
            ),
            texts::payment_already_lifetime(l, &title, &price, false),
            texts::payment_refunded(l, &title, &price, false),
            texts::payment_unknown_order(l, &price),
            texts::help(l),
            language_choice(l).text,
        ];
        for text in &notices {
            fits("message", text, MESSAGE_MAX);
        }
        // The catalogue and /subscriptions at their fullest.
        let offers: Vec<OfferView> = (1..=30)
            .map(|i| {
                let mut o = offer_view(i, &title, Availability::Buyable);
                o.description = Some("🔥".repeat(1000));
                o.plans[0].price = big.clone();
                o.plans[0].period_days = Some(3660);
                o
            })
            .collect();
        let (r, _) = catalogue(l, Some(&texts::unknown_plan(l)), &offers, true);
        fits("catalogue", &r.text, MESSAGE_MAX);
        for row in &r.rows {
            fits("button", row[0]["text"].as_str().unwrap(), BUTTON_MAX);
        }
        let r = offer(l, Some(&"🔥".repeat(500)), &offers[0]);
        fits("offer", &r.text, MESSAGE_MAX);
    }
}
