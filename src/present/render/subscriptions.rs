//! `/subscriptions`: the buyer's memberships, their renewal state and their buttons.

use super::{
    callback::Callback,
    message::{Rendered, button},
    text::{MESSAGE_MAX, TITLE_IN_LIST_MAX, clip, title, units},
};
use crate::{
    common::expiry::Expiry,
    present::texts::{self, Language},
};

/// One of the buyer's memberships as `/subscriptions` shows it.
#[derive(Debug, Clone)]
pub struct MembershipView {
    pub channel_id: i32,
    pub title: String,
    /// `active`, `grace` or `expired`.
    pub status: String,
    /// When it ends (lifetime access: never).
    pub expires_at: Expiry,
    /// The renew button's callback (the plan the buyer last paid for the channel, else its
    /// default plan), when it can be bought again now.
    pub renew: Option<Callback>,
    pub subscription: Option<SubscriptionView>,
}

/// The Stars subscription of a live membership.
#[derive(Debug, Clone)]
pub struct SubscriptionView {
    pub id: i64,
    /// `Some(next renewal)` while it renews; `None` once cancelled.
    pub renews_at: Option<String>,
}

/// `/subscriptions`: each membership with its status and expiry, a renew button (unless a
/// live Stars subscription renews it anyway) and, for a live Stars subscription, a
/// cancel-renewal button. Memberships that do not fit are summed up in a last line.
pub fn subscriptions(l: Language, memberships: &[MembershipView]) -> Rendered {
    if memberships.is_empty() {
        return Rendered {
            text: texts::subscriptions_empty(l),
            rows: Vec::new(),
        };
    }
    let mut text = texts::subscriptions_header(l);
    let mut rows = Vec::new();
    // Room for the "…and N more" line.
    let reserve = 40;
    for (i, m) in memberships.iter().enumerate() {
        let name = clip(&title(l, &m.title, m.channel_id), TITLE_IN_LIST_MAX);
        let mut piece = format!(
            "\n\n{name}\n{}",
            texts::membership_line(l, &m.status, m.expires_at)
        );
        let live = m.status != "expired";
        match &m.subscription {
            Some(SubscriptionView {
                renews_at: Some(at),
                ..
            }) if live => {
                piece.push('\n');
                piece.push_str(&texts::renews_automatically(l, at));
            }
            Some(SubscriptionView {
                renews_at: None, ..
            }) if live => {
                piece.push('\n');
                piece.push_str(&texts::renewal_off(l));
            }
            _ => {}
        }
        if i > 0 && units(&text) + units(&piece) + reserve > MESSAGE_MAX {
            text.push_str(&format!(
                "\n\n{}",
                texts::subscriptions_more(l, memberships.len() - i)
            ));
            break;
        }
        text.push_str(&piece);
        let renewing = live
            && m.subscription
                .as_ref()
                .is_some_and(|s| s.renews_at.is_some());
        if let Some(renew) = m.renew.filter(|_| !renewing && !m.expires_at.is_never()) {
            rows.push(vec![button(&texts::renew_button(l, &name), renew)]);
        }
        if let Some(s) = m.subscription.as_ref().filter(|_| renewing) {
            rows.push(vec![button(
                &texts::cancel_renewal_button(l, &name),
                Callback::CancelRenewal(s.id),
            )]);
        }
    }
    Rendered {
        text: clip(&text, MESSAGE_MAX),
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EN: Language = Language::En;

    #[test]
    fn subscriptions_show_renewal_state_and_the_right_buttons() {
        let m = |id, status: &str, sub: Option<SubscriptionView>| MembershipView {
            channel_id: id,
            title: format!("C{id}"),
            status: status.into(),
            expires_at: Expiry::At("2030-01-01T00:00:00Z".parse().unwrap()),
            renew: Some(Callback::Buy(id)),
            subscription: sub,
        };
        let r = subscriptions(
            EN,
            &[
                m(1, "active", None),
                m(
                    2,
                    "active",
                    Some(SubscriptionView {
                        id: 7,
                        renews_at: Some("2030-01-01 00:00 UTC".into()),
                    }),
                ),
                m(
                    3,
                    "grace",
                    Some(SubscriptionView {
                        id: 8,
                        renews_at: None,
                    }),
                ),
                m(4, "expired", None),
                MembershipView {
                    expires_at: Expiry::Never,
                    renew: None,
                    ..m(5, "active", None)
                },
                MembershipView {
                    renew: Some(Callback::Plan(9)),
                    ..m(6, "active", None)
                },
            ],
        );
        assert!(
            r.text
                .contains("Renews automatically on 2030-01-01 00:00 UTC.")
        );
        assert!(r.text.contains("C1\nActive until 2030-01-01 00:00 UTC."));
        assert!(
            r.text.contains("C5\nLifetime access: it never expires."),
            "{}",
            r.text
        );
        assert!(r.text.contains(&texts::renewal_off(EN)));
        let data: Vec<&str> = r
            .rows
            .iter()
            .map(|row| row[0]["callback_data"].as_str().unwrap())
            .collect();
        assert_eq!(data, ["b:1", "x:7", "b:3", "b:4", "p:9"]);
        assert_eq!(subscriptions(EN, &[]).text, texts::subscriptions_empty(EN));
    }

    #[test]
    fn many_subscriptions_still_fit() {
        let all: Vec<MembershipView> = (1..=200)
            .map(|i| MembershipView {
                channel_id: i,
                title: "🔥".repeat(255),
                status: "active".into(),
                expires_at: Expiry::At("2030-01-01T00:00:00Z".parse().unwrap()),
                renew: Some(Callback::Buy(i)),
                subscription: None,
            })
            .collect();
        let r = subscriptions(EN, &all);
        assert!(units(&r.text) <= MESSAGE_MAX);
        assert!(r.text.contains("more."));
    }
}
