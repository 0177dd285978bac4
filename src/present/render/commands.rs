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
    /// Any other text.
    Other,
}

/// Reads a command: `/start`, `/start <payload>`, `/start@<bot> <payload>`, `/help`,
/// `/subscriptions`, `/code <CODE>`, `/language [<code>]`, `/stop`.
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
}

/// Reads a deep-link payload: `c<id>`, `p<id>` or `p<id>-<CODE>` (Telegram allows `A-Z a-z 0-9
/// _ -` in a start parameter; the code is checked against the promo codes, not here, beyond
/// its length of 1..32).
pub fn deep_link(payload: &str) -> Option<DeepLink> {
    if let Some(id) = deep_link_channel(payload) {
        return Some(DeepLink::Channel(id));
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
        assert_eq!(deep_link("c12"), Some(DeepLink::Channel(12)));
        assert_eq!(deep_link("p7"), Some(DeepLink::Plan { id: 7, code: None }));
        assert_eq!(
            deep_link("p7-SPRING-25"),
            Some(DeepLink::Plan {
                id: 7,
                code: Some("SPRING-25".into())
            })
        );
        for bad in [
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
