//! A buyer's own referral link (`/referral` in the bot): the buyer's affiliate row, made on
//! their first ask when the program lets buyers have links (`buyer_links`), and what they earn
//! with it.
//!
//! The row is the one `affiliates` row of the buyer (`affiliates_subscriber_key`): one staff
//! made is reused, a deactivated one refuses the buyer. A new one gets a random code
//! ([`affiliates::draw_code`]); it is inserted with `ON CONFLICT DO NOTHING` and read back by the
//! buyer, so two asks at once end with one row, and a code that happens to be taken is simply
//! drawn again.

use deadpool_postgres::GenericClient;

use crate::{
    access::subscribers,
    common::error::ApiError,
    db,
    referrals::{
        affiliates,
        program::{self, Program},
    },
};

/// What a buyer asking for their link gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnLink {
    /// The program is off, or buyers get no links of their own.
    Unavailable,
    /// The buyer's affiliate row is deactivated.
    Refused,
    /// The buyer's code, and what a friend's first purchase earns them.
    Code { code: String, earns: Earns },
}

/// What a buyer-referrer earns for a friend's first purchase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Earns {
    /// Free days of the channel bought (`buyer_reward_days`).
    Days(i32),
    /// A percent of the purchase (the program's `first_percent`).
    Percent(i32),
    /// Nothing is set to earn.
    Nothing,
}

impl Earns {
    /// What the program pays a buyer-referrer: reward days when set, else the first purchase's
    /// percent.
    pub fn of(program: &Program) -> Earns {
        match program.buyer_reward_days {
            Some(days) => Earns::Days(days),
            None if program.first_percent > 0 => Earns::Percent(program.first_percent),
            None => Earns::Nothing,
        }
    }
}

/// The buyer's affiliate row, as far as a link needs it.
struct Own {
    code: String,
    active: bool,
}

crate::from_row!(Own { code, active });

const OWN_SQL: &str = "SELECT code, active FROM affiliates WHERE subscriber_id = $1";

const INSERT_SQL: &str = "
    INSERT INTO affiliates (name, subscriber_id, code) VALUES ($1, $2, $3)
    ON CONFLICT DO NOTHING";

/// Buyer `subscriber_id`'s own link: their affiliate row, made now if they have none (named
/// after them), when the program is on and lets buyers have links.
pub async fn own_link(
    client: &impl GenericClient,
    subscriber_id: i32,
) -> Result<OwnLink, ApiError> {
    let program = program::get(client).await?;
    if !(program.enabled && program.buyer_links) {
        return Ok(OwnLink::Unavailable);
    }
    let own = match db::opt::<Own>(client, OWN_SQL, &[&subscriber_id]).await? {
        Some(own) => own,
        None => create(client, subscriber_id).await?,
    };
    Ok(if own.active {
        OwnLink::Code {
            code: own.code,
            earns: Earns::of(&program),
        }
    } else {
        OwnLink::Refused
    })
}

/// Makes the buyer's affiliate row (or finds the one made meanwhile).
async fn create(client: &impl GenericClient, subscriber_id: i32) -> Result<Own, ApiError> {
    let name = name_of(client, subscriber_id).await?;
    for _ in 0..affiliates::DRAWS {
        let code = affiliates::draw_code();
        db::execute(client, INSERT_SQL, &[&name, &subscriber_id, &code]).await?;
        // Ours, or one made for the buyer at the same time; none: the code was taken.
        if let Some(own) = db::opt::<Own>(client, OWN_SQL, &[&subscriber_id]).await? {
            tracing::info!(subscriber_id, code = %own.code, "buyer's referral code made");
            return Ok(own);
        }
    }
    Err(ApiError::internal(format!(
        "no free referral code in {} draws",
        affiliates::DRAWS
    )))
}

/// What the buyer's affiliate row is called: their name in Telegram, else their username,
/// else their Telegram id.
async fn name_of(client: &impl GenericClient, subscriber_id: i32) -> Result<String, ApiError> {
    let Some(s) = subscribers::get(client, subscriber_id).await? else {
        return Err(ApiError::internal(format!(
            "subscriber {subscriber_id} is not there"
        )));
    };
    Ok(s.display_name
        .filter(|n| !n.trim().is_empty())
        .or_else(|| s.username.map(|u| format!("@{u}")))
        .unwrap_or_else(|| format!("Telegram {}", s.telegram_user_id)))
}
