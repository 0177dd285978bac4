//! Staff accounts as the owner manages them: roles, disabling, deletion, and the rule that the
//! service never loses its last owner. Owner of the `role` and `disabled` columns of
//! `staff_accounts` and of every change of an account through the API; passwords, tokens and
//! the login lookups are [`crate::staff::auth`]'s.
//!
//! Roles are ranked: `owner` ⊇ `admin` ⊇ `support` ⊇ `viewer`, so a route names the least role
//! that may call it ([`Role::allows`]). The table of which route needs which role is the router
//! (`api::router`) and docs/staff.md.
//!
//! **The last owner.** A change that could leave no enabled owner (deleting, demoting or
//! disabling an enabled owner) first locks every enabled owner's row (`FOR UPDATE`, in id
//! order), then counts them. Two such changes at once queue on those locks; the second counts
//! after the first committed, so two owners removing each other cannot both succeed.

pub mod audit_log;
pub mod auth;
pub mod idempotency;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::Value;

use crate::{
    common::error::ApiError,
    db::{self, FromRow},
};

crate::text_enum! {
    /// What a staff account may do, from most to least.
    pub enum Role {
        /// Everything, and manages staff accounts.
        Owner => "owner",
        /// Everything but staff accounts.
        Admin => "admin",
        /// Reads everything; grants and corrects memberships, cancels orders, retries effects.
        Support => "support",
        /// Reads only.
        Viewer => "viewer",
    }
}

impl Role {
    /// Higher may do more.
    const fn rank(self) -> u8 {
        match self {
            Role::Owner => 3,
            Role::Admin => 2,
            Role::Support => 1,
            Role::Viewer => 0,
        }
    }

    /// Whether an account of this role may call a route that needs `required`.
    pub const fn allows(self, required: Role) -> bool {
        self.rank() >= required.rank()
    }
}

/// A staff account as the API shows it (never its password hash or token version).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(example = json!({"id": 2, "email": "support@example.com", "role": "support",
    "disabled": false, "created_at": "2026-01-01T12:00:00Z", "updated_at": "2026-01-01T12:00:00Z"}))]
pub struct Account {
    pub id: i64,
    pub email: String,
    #[schema(value_type = String, pattern = "^(owner|admin|support|viewer)$")]
    pub role: Role,
    /// A disabled account cannot log in, and its tokens were ended when it was disabled.
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Account {
    /// The account as an audit log snapshot.
    pub fn snapshot(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl FromRow for Account {
    const COLUMNS: &'static str = "id, email, role, disabled, created_at, updated_at";

    fn from_row(r: &tokio_postgres::Row) -> Result<Account, tokio_postgres::Error> {
        Ok(Account {
            id: r.try_get("id")?,
            email: r.try_get("email")?,
            role: r.try_get("role")?,
            disabled: r.try_get("disabled")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
        })
    }
}

/// Who a valid, current token speaks for.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: i64,
    pub email: String,
    pub role: Role,
}

const SESSION_SQL: &str = "SELECT email, role FROM staff_accounts
     WHERE id = $1 AND token_version = $2 AND NOT disabled";

/// The session of a verified token (its `sub` and `ver`), if it still opens the API: its
/// account exists, is not
/// disabled, and its `token_version` is still the token's (a password change, a role change
/// or a disabling bump it)). One indexed read per request.
pub async fn session(
    client: &impl GenericClient,
    staff_id: i64,
    token_version: i32,
) -> Result<Option<Session>, ApiError> {
    let row = db::row_opt(client, SESSION_SQL, &[&staff_id, &token_version]).await?;
    row.map(|r| {
        Ok(Session {
            id: staff_id,
            email: r.try_get("email")?,
            role: r.try_get("role")?,
        })
    })
    .transpose()
}

const LIST_SQL: &str = "SELECT id, email, role, disabled, created_at, updated_at
     FROM staff_accounts WHERE id > $1 ORDER BY id LIMIT $2";

/// A page of accounts by id.
pub async fn list(
    client: &impl GenericClient,
    after: i64,
    limit: i64,
) -> Result<Vec<Account>, ApiError> {
    db::all(client, LIST_SQL, &[&after, &limit]).await
}

const GET_SQL: &str = "SELECT id, email, role, disabled, created_at, updated_at
     FROM staff_accounts WHERE id = $1";

const GET_FOR_UPDATE_SQL: &str = "SELECT id, email, role, disabled, created_at, updated_at
     FROM staff_accounts WHERE id = $1 FOR UPDATE";

/// One account.
pub async fn get(client: &impl GenericClient, id: i64) -> Result<Option<Account>, ApiError> {
    db::opt(client, GET_SQL, &[&id]).await
}

const CREATE_SQL: &str = "INSERT INTO staff_accounts (email, password_hash, role)
     VALUES ($1, $2, $3)
     RETURNING id, email, role, disabled, created_at, updated_at";

/// Creates an account; a taken email is a 409 (`staff_accounts_email_key`). `email` is
/// normalized and checked, `password_hash` a bcrypt hash of a checked password.
pub async fn create(
    client: &impl GenericClient,
    email: &str,
    password_hash: &str,
    role: Role,
) -> Result<Account, ApiError> {
    db::one(client, CREATE_SQL, &[&email, &password_hash, &role]).await
}

/// A change of an account: its role and/or whether it is disabled.
#[derive(Debug, Clone, Copy, Default)]
pub struct Change {
    pub role: Option<Role>,
    pub disabled: Option<bool>,
}

const CHANGE_SQL: &str = "UPDATE staff_accounts
     SET role = COALESCE($2, role), disabled = COALESCE($3, disabled),
         token_version = token_version + CASE WHEN $4 THEN 1 ELSE 0 END,
         updated_at = statement_timestamp()
     WHERE id = $1
     RETURNING id, email, role, disabled, created_at, updated_at";

/// Changes an account's role and/or disabled flag, in `tx`; returns it before and after.
/// A change of role, and a disabling, end the account's tokens at once (its token version is
/// bumped); re-enabling does not need to. See `auth::end_sessions`. Refused with 409 when it would leave no enabled owner.
pub async fn change(
    tx: &deadpool_postgres::Transaction<'_>,
    id: i64,
    change: Change,
) -> Result<(Account, Account), ApiError> {
    let before = lock_account(tx, id).await?;
    let stays_enabled_owner = change.role.unwrap_or(before.role) == Role::Owner
        && !change.disabled.unwrap_or(before.disabled);
    if is_enabled_owner(&before) && !stays_enabled_owner {
        keep_an_owner(tx, id).await?;
    }
    let ends_sessions = change.role.is_some_and(|r| r != before.role)
        || (change.disabled == Some(true) && !before.disabled);
    let after = db::one(
        tx,
        CHANGE_SQL,
        &[&id, &change.role, &change.disabled, &ends_sessions],
    )
    .await?;
    Ok((before, after))
}

const DELETE_SQL: &str = "DELETE FROM staff_accounts WHERE id = $1";

/// Deletes an account, in `tx`; returns it as it was. Refused with 409 when it is the last
/// enabled owner. Its audit log rows stay (they copy its email).
pub async fn delete(tx: &deadpool_postgres::Transaction<'_>, id: i64) -> Result<Account, ApiError> {
    let before = lock_account(tx, id).await?;
    if is_enabled_owner(&before) {
        keep_an_owner(tx, id).await?;
    }
    db::execute(tx, DELETE_SQL, &[&id]).await?;
    Ok(before)
}

fn is_enabled_owner(a: &Account) -> bool {
    a.role == Role::Owner && !a.disabled
}

/// The owner-lock first (so every last-owner check takes the locks in one order), then the
/// account's row.
async fn lock_account(
    tx: &deadpool_postgres::Transaction<'_>,
    id: i64,
) -> Result<Account, ApiError> {
    lock_owners(tx).await?;
    db::opt(tx, GET_FOR_UPDATE_SQL, &[&id])
        .await?
        .ok_or(ApiError::NotFound("staff account"))
}

const LOCK_OWNERS_SQL: &str = "SELECT id FROM staff_accounts
     WHERE role = 'owner' AND NOT disabled ORDER BY id FOR UPDATE";

/// Locks every enabled owner's row, in id order; returns their ids as they are once locked.
async fn lock_owners(tx: &deadpool_postgres::Transaction<'_>) -> Result<Vec<i64>, ApiError> {
    db::rows(tx, LOCK_OWNERS_SQL, &[])
        .await?
        .iter()
        .map(|r| r.try_get("id").map_err(ApiError::from))
        .collect()
}

/// 409 unless an enabled owner other than `leaving` remains.
async fn keep_an_owner(
    tx: &deadpool_postgres::Transaction<'_>,
    leaving: i64,
) -> Result<(), ApiError> {
    // Read again after the account's own lock: a change that committed while this one waited
    // for it is seen.
    let owners = lock_owners(tx).await?;
    if owners.iter().any(|&o| o != leaving) {
        Ok(())
    } else {
        Err(ApiError::Conflict(
            "this is the last enabled owner; make another account an owner first".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ranked() {
        use Role::*;
        let allowed = |who: Role| {
            Role::ALL
                .iter()
                .filter(|&&r| who.allows(r))
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(allowed(Owner), vec![Owner, Admin, Support, Viewer]);
        assert_eq!(allowed(Admin), vec![Admin, Support, Viewer]);
        assert_eq!(allowed(Support), vec![Support, Viewer]);
        assert_eq!(allowed(Viewer), vec![Viewer]);
    }
}
