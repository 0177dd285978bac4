//! Performing the messages about a membership: a receipt of a longer term, a reminder before
//! its end and the notice of its grace period, each sent only while still true.

use chrono::{DateTime, Utc};

use super::{Worker, failure::Performed, perform::account_changed};
use crate::{
    access::memberships::{EffectView, Expiry, Status},
    outbox::effects::Effect,
    present::texts,
    telegram_api::client::BotApi,
};

impl Worker {
    /// A member's longer term, in the words of what made it longer (`source`).
    pub(super) async fn receipt(
        &self,
        bot: &BotApi,
        e: &Effect,
        m: Option<EffectView>,
        source: texts::Source,
    ) -> Performed {
        let Some(m) = m else {
            return Ok(Some("skipped: the membership was deleted".into()));
        };
        if let Some(skip) = account_changed(e, &m) {
            return Ok(Some(skip));
        }
        if !m.status.holds_access() {
            return Ok(Some(format!("skipped: the membership is {} now", m.status)));
        }
        let (l, title) = m.speaking();
        let text = texts::access_extended(l, source, title, m.expires_at);
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }

    /// A reminder (`status` active) or grace notice (`status` grace): sent only while the
    /// membership is still in the state and term it was enqueued for. A reminder of a
    /// membership whose Stars subscription is active and `renews` on a date says when it renews;
    /// any other (a cancelled subscription's too) says when access ends.
    pub(super) async fn notice(
        &self,
        bot: &BotApi,
        e: &Effect,
        m: Option<EffectView>,
        status: Status,
        renews: Option<DateTime<Utc>>,
    ) -> Performed {
        let Some(m) = m else {
            return Ok(Some("skipped: the membership was deleted".into()));
        };
        if let Some(skip) = account_changed(e, &m) {
            return Ok(Some(skip));
        }
        // The term the notice was enqueued for (an unreadable payload names none).
        let enqueued_for = e.typed_payload().ok().and_then(|p| p.expires_at());
        if m.status != status || enqueued_for != Some(m.expires_at) {
            return Ok(Some(
                "skipped: the membership changed since (renewed or ended)".into(),
            ));
        }
        // Never enqueued for lifetime access (its term has no end to tell of).
        let Expiry::At(at) = m.expires_at else {
            return Ok(Some("skipped: lifetime access never ends".into()));
        };
        let (l, title) = m.speaking();
        let text = if let (Status::Active, Some(renews)) = (status, renews) {
            texts::reminder_renews(l, title, &texts::day(l, renews))
        } else if status == Status::Active {
            texts::reminder(l, title, &texts::day(l, at))
        } else {
            texts::grace_notice(l, title, &texts::day(l, at))
        };
        bot.send_message(e.user_id, &text).await?;
        Ok(None)
    }
}
