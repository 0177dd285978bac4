//! What a buyer types: commands (`/start`, `/code`, …) and the payloads of deep links.

/// A command in a message to the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/start`, with the deep link's payload if any.
    Start(Option<String>),
    /// `/help`.
    Help,
    /// `/subscriptions`.
    Subscriptions,
    /// `/code`, with the code if one was given.
    Code(Option<String>),
    /// `/language`, with a language code if one was given.
    Language(Option<String>),
    /// `/stop`: no more broadcasts or automations.
    Stop,
    /// `/referral`: the buyer's own referral link.
    Referral,
    /// Any other text.
    Other,
}

/// Reads a command: `/start`, `/start <payload>`, `/start@<bot> <payload>`, `/help`,
/// `/subscriptions`, `/code <CODE>`, `/language [<code>]`, `/stop`, `/referral`.
pub fn parse_command(text: &str) -> Command {
    let text = text.trim();
    let (head, rest) = match text.split_once(char::is_whitespace) {
        Some((head, rest)) => (head, rest.trim()),
        None => (text, ""),
    };
    let name = head.split('@').next().unwrap_or(head);
    match name {
        "/start" => Command::Start((!rest.is_empty()).then(|| rest.to_string())),
        "/help" => Command::Help,
        "/subscriptions" => Command::Subscriptions,
        "/code" => Command::Code((!rest.is_empty()).then(|| rest.to_string())),
        "/language" => Command::Language((!rest.is_empty()).then(|| rest.to_string())),
        "/stop" => Command::Stop,
        "/referral" => Command::Referral,
        _ => Command::Other,
    }
}

/// The channel a deep-link payload names: `c<id>`.
pub fn deep_link_channel(payload: &str) -> Option<i32> {
    let id = payload.strip_prefix('c')?;
    if id.is_empty() || id.len() > 10 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok().filter(|id: &i32| *id > 0)
}

/// What a deep link's payload opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeepLink {
    /// `c<id>`: a channel's plans.
    Channel(i32),
    /// `p<id>`, or `p<id>-<CODE>`: one plan, with a promo code to apply first.
    Plan { id: i64, code: Option<String> },
    /// `r_<CODE>`, or `r_<CODE>-p<id>`: a referral link's click, then the catalogue, or that
    /// plan. The code is upper-cased (codes are matched in any case).
    Referral { code: String, plan: Option<i64> },
}

/// Reads a deep-link payload: `c<id>`, `p<id>`, `p<id>-<CODE>`, `r_<CODE>` or
/// `r_<CODE>-p<id>` (Telegram allows `A-Z a-z 0-9 _ -` in a start parameter; a promo code is
/// checked against the promo codes, not here, beyond its length of 1..32; a referral code is
/// 3..32 of `A-Z a-z 0-9 _`).
pub fn deep_link(payload: &str) -> Option<DeepLink> {
    if let Some(id) = deep_link_channel(payload) {
        return Some(DeepLink::Channel(id));
    }
    if let Some(rest) = payload.strip_prefix("r_") {
        return referral_link(rest);
    }
    let rest = payload.strip_prefix('p')?;
    let (id, code) = match rest.split_once('-') {
        Some((id, code)) => (id, Some(code)),
        None => (rest, None),
    };
    if id.is_empty() || id.len() > 18 || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id: i64 = id.parse().ok().filter(|id: &i64| *id > 0)?;
    let code = match code {
        Some(c) if c.is_empty() || c.chars().count() > 32 => return None,
        Some(c) => Some(c.to_string()),
        None => None,
    };
    Some(DeepLink::Plan { id, code })
}

/// A referral link's payload after `r_`: `<CODE>` or `<CODE>-p<id>`.
fn referral_link(rest: &str) -> Option<DeepLink> {
    let (code, plan) = match rest.split_once('-') {
        Some((code, plan)) => match deep_link(plan)? {
            DeepLink::Plan { id, code: None } => (code, Some(id)),
            _ => return None,
        },
        None => (rest, None),
    };
    let spelled = code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ((3..=32).contains(&code.len()) && spelled).then(|| DeepLink::Referral {
        code: code.to_ascii_uppercase(),
        plan,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_deep_links() {
        assert_eq!(parse_command("/start"), Command::Start(None));
        assert_eq!(
            parse_command(" /start c12 "),
            Command::Start(Some("c12".into()))
        );
        assert_eq!(
            parse_command("/start@SubGate_bot c12"),
            Command::Start(Some("c12".into()))
        );
        assert_eq!(parse_command("/help"), Command::Help);
        assert_eq!(parse_command("/subscriptions"), Command::Subscriptions);
        assert_eq!(parse_command("/startx"), Command::Other);
        assert_eq!(parse_command("hello"), Command::Other);
        assert_eq!(parse_command("🔥"), Command::Other);
        assert_eq!(deep_link_channel("c12"), Some(12));
        for bad in ["c", "c0", "c-1", "12", "cx", "c99999999999", "c+1"] {
            assert_eq!(deep_link_channel(bad), None, "{bad}");
        }
        assert_eq!(
            parse_command("/code  spring25 "),
            Command::Code(Some("spring25".into()))
        );
        assert_eq!(parse_command("/code"), Command::Code(None));
        assert_eq!(parse_command("/referral"), Command::Referral);
        assert_eq!(deep_link("c12"), Some(DeepLink::Channel(12)));
        assert_eq!(deep_link("p7"), Some(DeepLink::Plan { id: 7, code: None }));
        assert_eq!(
            deep_link("p7-SPRING-25"),
            Some(DeepLink::Plan {
                id: 7,
                code: Some("SPRING-25".into())
            })
        );
        assert_eq!(
            deep_link("r_ann_2026"),
            Some(DeepLink::Referral {
                code: "ANN_2026".into(),
                plan: None
            })
        );
        assert_eq!(
            deep_link("r_ABC-p7"),
            Some(DeepLink::Referral {
                code: "ABC".into(),
                plan: Some(7)
            })
        );
        assert_eq!(
            deep_link(&format!("r_{}", "Z".repeat(32))),
            Some(DeepLink::Referral {
                code: "Z".repeat(32),
                plan: None
            })
        );
        for bad in [
            "r_",
            "r_AB",
            &format!("r_{}", "Z".repeat(33)),
            "r_ABC-",
            "r_ABC-p",
            "r_ABC-p0",
            "r_ABC-c7",
            "r_ABC-p7-SPRING",
            "r_A-B-p7",
            "rABC",
            "p",
            "p0",
            "p-X",
            "p7-",
            "px",
            "p1x",
            &format!("p1-{}", "A".repeat(33)),
        ] {
            assert_eq!(deep_link(bad), None, "{bad}");
        }
    }
}
