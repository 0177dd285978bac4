//! The catalogue: channels with their plans, one page per message ([`catalogue`]), and one
//! channel's or plan's offer ([`offer`]), with a buy button per plan that can be bought.

use serde_json::Value;

use super::{
    callback::Callback,
    message::{Rendered, button},
    prices::{price, term},
    text::{BUTTON_MAX, MESSAGE_MAX, TITLE_IN_LIST_MAX, clip, one_line, title, units},
};
use crate::{
    common::currency::Money,
    present::texts::{self, Language},
};

/// A channel description in the list (the deep-link offer shows it whole).
const DESCRIPTION_IN_LIST_MAX: usize = 200;
/// A description in a single offer, leaving room for the rest of the message.
const DESCRIPTION_IN_OFFER_MAX: usize = 3000;

/// Whether a plan can be bought now, by this buyer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Buyable,
    /// A channel of the plan is seat-limited with no seat free (and the buyer is not a member).
    Full,
    /// No configured gateway takes its currency.
    NotOnSale,
    /// The buyer has lifetime access to every channel of the plan already.
    Lifetime,
}

/// One plan as the bot shows it.
#[derive(Debug, Clone)]
pub struct PlanView {
    pub id: i64,
    /// The channel this plan is the default plan of: it is named by the channel (its terms are
    /// the channel's own price fields) and bought with [`Callback::Buy`] of the channel.
    pub default_of: Option<i32>,
    /// The plan's title (the channel's, for a default plan).
    pub name: String,
    pub trial: bool,
    /// The list price.
    pub price: Money,
    /// What the buyer would pay with their promo code, when one applies to this plan.
    pub discounted_minor: Option<i64>,
    /// `None`: lifetime access.
    pub period_days: Option<i32>,
    pub recurring: bool,
    /// The titles of a bundle's other channels (empty: one channel).
    pub bundle_with: Vec<String>,
    pub availability: Availability,
}

impl PlanView {
    /// The button's callback: a default plan is bought by its channel (the button data every
    /// earlier message carries), any other by its id.
    pub fn callback(&self) -> Callback {
        match self.default_of {
            Some(channel) => Callback::Buy(channel),
            None => Callback::Plan(self.id),
        }
    }

    /// The price as buyers read it: `199.00 UAH, was 249.00 UAH` when a code applies.
    fn price_text(&self, l: Language) -> String {
        let list = price(l, &self.price);
        match self.discounted_minor {
            Some(now) if now != self.price.amount_minor => {
                texts::discounted(l, &price(l, &Money::new(now, &self.price.currency)), &list)
            }
            _ => list,
        }
    }

    fn line(&self, l: Language) -> String {
        let term = term(l, self.period_days);
        if self.trial {
            return texts::trial_line(l, term.as_deref().unwrap_or_default());
        }
        texts::price_line(l, &self.price_text(l), term.as_deref(), self.recurring)
    }

    fn button(&self, l: Language) -> Option<Value> {
        if self.availability != Availability::Buyable {
            return None;
        }
        if self.trial {
            let days = term(l, self.period_days).unwrap_or_default();
            return Some(button(&texts::trial_button(l, &days), self.callback()));
        }
        let price = self.price_text(l);
        // The name gives way, never the price.
        let room =
            BUTTON_MAX.saturating_sub(units(&texts::buy_button(l, "", &price, self.recurring)));
        let name = clip(&one_line(&self.name), room.min(TITLE_IN_LIST_MAX));
        Some(button(
            &texts::buy_button(l, &name, &price, self.recurring),
            self.callback(),
        ))
    }
}

/// One channel as the catalogue shows it, with the plans listed under it.
#[derive(Debug, Clone)]
pub struct OfferView {
    pub id: i32,
    pub title: String,
    pub description: Option<String>,
    pub plans: Vec<PlanView>,
}

/// Buttons one message carries at most (Telegram allows 100 in an inline keyboard).
const KEYBOARD_MAX: usize = 90;

fn availability_line(l: Language, a: Availability) -> Option<String> {
    match a {
        Availability::Buyable => None,
        Availability::Full => Some(texts::full(l)),
        Availability::NotOnSale => Some(texts::not_on_sale(l)),
        Availability::Lifetime => Some(texts::have_lifetime(l)),
    }
}

/// A channel with only its default plan reads as one offer: its price line under its title.
/// Any other shows each plan on a line of its own, named.
fn entry(l: Language, o: &OfferView, description_max: usize) -> String {
    let name = clip(&title(l, &o.title, o.id), TITLE_IN_LIST_MAX);
    let mut lines = vec![name];
    if let Some(d) = o
        .description
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        lines.push(clip(d, description_max));
    }
    match o.plans.as_slice() {
        [] => lines.push(texts::not_on_sale(l)),
        [only] if only.default_of == Some(o.id) => {
            lines.push(only.line(l));
            lines.extend(availability_line(l, only.availability));
        }
        plans => {
            for p in plans {
                let name = clip(&title(l, &p.name, o.id), TITLE_IN_LIST_MAX);
                lines.push(texts::plan_line(l, &name, &p.line(l)));
                if !p.bundle_with.is_empty() {
                    let others: Vec<String> = p
                        .bundle_with
                        .iter()
                        .map(|t| clip(&one_line(t), TITLE_IN_LIST_MAX))
                        .collect();
                    lines.push(texts::bundle_line(l, &others));
                }
                if let Some(a) = availability_line(l, p.availability) {
                    lines.push(texts::plan_note(&a));
                }
            }
        }
    }
    lines.join("\n")
}

fn buttons_of(l: Language, o: &OfferView) -> Vec<Vec<Value>> {
    o.plans
        .iter()
        .filter_map(|p| p.button(l))
        .map(|b| vec![b])
        .collect()
}

/// The catalogue: `intro` (if any), then as many of `offers` as fit in one message, each with
/// a buy button per plan that can be bought, and a "more" button when offers were left out or
/// `more` says the database has more. Returns the message and how many offers it shows.
pub fn catalogue(
    l: Language,
    intro: Option<&str>,
    offers: &[OfferView],
    more: bool,
) -> (Rendered, usize) {
    let mut text = String::new();
    if let Some(intro) = intro {
        text.push_str(intro);
        text.push_str("\n\n");
    }
    if offers.is_empty() {
        text.push_str(&texts::catalogue_empty(l));
        return (
            Rendered {
                text: clip(&text, MESSAGE_MAX),
                rows: Vec::new(),
            },
            0,
        );
    }
    text.push_str(&texts::catalogue_header(l));
    let footer = format!("\n\n{}", texts::catalogue_footer(l));
    let mut rows = Vec::new();
    let mut shown = 0;
    for (i, o) in offers.iter().enumerate() {
        let piece = format!("\n\n{}. {}", i + 1, entry(l, o, DESCRIPTION_IN_LIST_MAX));
        let buttons = buttons_of(l, o);
        // The first entry always fits (its parts are clipped); later ones only if the footer
        // (and the "more" button) still fit after them.
        if shown > 0
            && (units(&text) + units(&piece) + units(&footer) > MESSAGE_MAX
                || rows.len() + buttons.len() + 1 > KEYBOARD_MAX)
        {
            break;
        }
        text.push_str(&piece);
        rows.extend(buttons);
        shown += 1;
    }
    text.push_str(&footer);
    if more || shown < offers.len() {
        let last = offers[shown - 1].id;
        rows.push(vec![button(&texts::more_button(l), Callback::More(last))]);
    }
    (
        Rendered {
            text: clip(&text, MESSAGE_MAX),
            rows,
        },
        shown,
    )
}

/// One channel's offer (a deep link), or one plan's (its channel with only that plan): the
/// whole description and the buy buttons, after `intro` if any.
pub fn offer(l: Language, intro: Option<&str>, o: &OfferView) -> Rendered {
    let mut text = String::new();
    if let Some(intro) = intro {
        text.push_str(&clip(intro, 500));
        text.push_str("\n\n");
    }
    text.push_str(&format!(
        "{}\n\n{}",
        entry(l, o, DESCRIPTION_IN_OFFER_MAX),
        texts::catalogue_footer(l)
    ));
    let mut rows = buttons_of(l, o);
    rows.truncate(KEYBOARD_MAX);
    Rendered {
        text: clip(&text, MESSAGE_MAX),
        rows,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::present::render::{CALLBACK_DATA_MAX, send_message};

    const EN: Language = Language::En;

    fn plan_view(
        id: i64,
        default_of: Option<i32>,
        name: &str,
        availability: Availability,
    ) -> PlanView {
        PlanView {
            id,
            default_of,
            name: name.to_string(),
            trial: false,
            price: Money::new(250, "XTR"),
            discounted_minor: None,
            period_days: Some(30),
            recurring: false,
            bundle_with: Vec::new(),
            availability,
        }
    }

    pub(in crate::present::render) fn offer_view(
        id: i32,
        title: &str,
        availability: Availability,
    ) -> OfferView {
        OfferView {
            id,
            title: title.to_string(),
            description: Some("d".repeat(1000)),
            plans: vec![plan_view(
                1000 + i64::from(id),
                Some(id),
                title,
                availability,
            )],
        }
    }
    #[test]
    fn the_catalogue_fits_one_message_and_pages_the_rest() {
        let long_title = "T".repeat(255);
        let offers: Vec<OfferView> = (1..=30)
            .map(|i| offer_view(i, &long_title, Availability::Buyable))
            .collect();
        let (r, shown) = catalogue(EN, Some(&texts::unknown_channel(EN)), &offers, false);
        assert!(units(&r.text) <= MESSAGE_MAX);
        assert!(shown >= 1 && shown < offers.len(), "{shown}");
        assert!(r.text.ends_with(&texts::catalogue_footer(EN)));
        // One buy button per shown offer, then "more" after the last shown.
        assert_eq!(r.rows.len(), shown + 1);
        let more = &r.rows[shown][0];
        assert_eq!(more["callback_data"], Callback::More(shown as i32).data());
        for row in &r.rows {
            for b in row {
                assert!(b["callback_data"].as_str().unwrap().len() <= CALLBACK_DATA_MAX);
                assert!(units(b["text"].as_str().unwrap()) <= BUTTON_MAX);
            }
        }
    }

    #[test]
    fn several_plans_are_listed_each_with_its_button_and_the_discount_in_words() {
        let mut monthly = plan_view(11, Some(1), "Club", Availability::Buyable);
        monthly.price = Money::new(24900, "UAH");
        monthly.discounted_minor = Some(19900);
        let mut life = plan_view(12, None, "Forever", Availability::Buyable);
        life.period_days = None;
        let mut trial = plan_view(13, None, "Taster", Availability::Buyable);
        trial.trial = true;
        trial.price = Money::new(0, "XTR");
        trial.period_days = Some(7);
        let mut bundle = plan_view(14, None, "Both", Availability::Full);
        bundle.bundle_with = vec!["Other".into()];
        let o = OfferView {
            id: 1,
            title: "Club".into(),
            description: None,
            plans: vec![trial, monthly, life, bundle],
        };
        let (r, _) = catalogue(EN, None, &[o], false);
        for part in [
            "• Taster: free for 7 days",
            "• Club: 199.00 UAH, was 249.00 UAH for 30 days",
            "• Forever: 250 ⭐, lifetime access",
            "• Both: 250 ⭐ for 30 days\n  Also gives access to «Other».\n  Full right now",
        ] {
            assert!(r.text.contains(part), "{part:?} in {}", r.text);
        }
        let data: Vec<(&str, &str)> = r
            .rows
            .iter()
            .map(|row| {
                (
                    row[0]["text"].as_str().unwrap(),
                    row[0]["callback_data"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            data,
            [
                ("Try free for 7 days", "p:13"),
                ("Buy: Club · 199.00 UAH, was 249.00 UAH", "b:1"),
                ("Buy: Forever · 250 ⭐", "p:12"),
            ]
        );
        // A long name gives way to the price.
        let mut long = plan_view(15, None, &"Я".repeat(200), Availability::Buyable);
        long.price = Money::new(24900, "UAH");
        long.discounted_minor = Some(19900);
        let b = long.button(EN).unwrap();
        let text = b["text"].as_str().unwrap();
        assert!(
            units(text) <= BUTTON_MAX && text.ends_with("199.00 UAH, was 249.00 UAH"),
            "{text}"
        );
    }

    #[test]
    fn full_and_unsellable_channels_are_shown_without_a_button() {
        let offers = vec![
            offer_view(1, "Open", Availability::Buyable),
            offer_view(2, "Full", Availability::Full),
            offer_view(3, "Card", Availability::NotOnSale),
        ];
        let (r, shown) = catalogue(EN, None, &offers, false);
        assert_eq!(shown, 3);
        assert!(r.text.contains(&texts::full(EN)) && r.text.contains(&texts::not_on_sale(EN)));
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.rows[0][0]["callback_data"], "b:1");
        assert!(r.text.contains("250 ⭐ for 30 days"));
    }

    #[test]
    fn an_empty_catalogue_says_so() {
        let (r, shown) = catalogue(EN, None, &[], false);
        assert_eq!(
            (r.text.as_str(), shown),
            (texts::catalogue_empty(EN).as_str(), 0)
        );
        assert!(r.reply_markup().is_none());
    }

    #[test]
    fn a_single_offer_fits_with_the_longest_description() {
        let mut o = offer_view(4, &"🔥".repeat(255), Availability::Buyable);
        o.description = Some("🔥".repeat(1000));
        let r = offer(EN, None, &o);
        assert!(units(&r.text) <= MESSAGE_MAX);
        assert_eq!(r.rows.len(), 1);
        let reply = send_message(42, &r);
        assert_eq!(reply["method"], "sendMessage");
        assert_eq!(reply["chat_id"], 42);
        assert_eq!(
            reply["reply_markup"]["inline_keyboard"][0][0]["callback_data"],
            "b:4"
        );
    }
}
