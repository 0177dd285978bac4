//! The `staff_accounts` table: its rows and every rule of changing them. Accounts are created
//! here (by the owner through the API, by start-up's admin and by the command line), read here
//! (the session a token opens, login's lookups, the owner's list), and changed here: roles,
//! disabling, deletion, passwords and ending sessions (the token version). What the command
//! line changes is in the audit log as the command line's.
//!
//! **The last owner.** A change that could leave no enabled owner (deleting, demoting or
//! disabling an enabled owner) first locks every enabled owner's row (`FOR UPDATE`, in id
//! order), then counts them. Two such changes at once queue on those locks; the second counts
//! after the first committed, so two owners removing each other cannot both succeed.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::Value;

use crate::{
    common::{email::valid_email, error::ApiError},
    db,
    staff::{
        Role,
        audit_log::{self, Entry},
        passwords::{check_new_password, hash_password},
    },
};

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

crate::from_row!(Account ["id, email, role, disabled, created_at, updated_at"] {
    id,
    email,
    role,
    disabled,
    created_at,
    updated_at,
});

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
/// account exists, is not disabled, and its `token_version` is still the token's (a password
/// change, a role change or a disabling bump it). One indexed read per request.
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

/// Creates a staff account of `role` unless one with that email exists (start-up's admin from
/// `ADMIN_EMAIL`, which is no staff write). Returns whether it was created. The email and
/// password are checked like the API's ([`new_account`]).
pub async fn create_staff(
    pool: &deadpool_postgres::Pool,
    email: &str,
    password: &str,
    role: Role,
    cost: u32,
) -> Result<bool, ApiError> {
    insert_staff(pool, email, password, role, cost, false).await
}

/// [`create_staff`] for `subgate staff create`: the account and its `staff.create` row in the
/// audit log (the command line's, [`audit_log::record_command_line`]) in one transaction.
pub async fn create_staff_from_command_line(
    pool: &deadpool_postgres::Pool,
    email: &str,
    password: &str,
    role: Role,
    cost: u32,
) -> Result<bool, ApiError> {
    insert_staff(pool, email, password, role, cost, true).await
}

const INSERT_STAFF_SQL: &str = "INSERT INTO staff_accounts (email, password_hash, role)
     VALUES ($1, $2, $3) ON CONFLICT (email) DO NOTHING
     RETURNING id, email, role, disabled, created_at, updated_at";

/// [`create_staff`], with the command line's audit row when `audited`.
async fn insert_staff(
    pool: &deadpool_postgres::Pool,
    email: &str,
    password: &str,
    role: Role,
    cost: u32,
    audited: bool,
) -> Result<bool, ApiError> {
    let (email, hash) = new_account(email, password, cost).await?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let Some(account) = db::opt::<Account>(&tx, INSERT_STAFF_SQL, &[&email, &hash, &role]).await?
    else {
        return Ok(false);
    };
    if audited {
        let entry = Entry::new("staff.create", Some(account.id)).after(&account);
        audit_log::record_command_line(&tx, entry).await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// A new account's normalized email and the bcrypt hash of its password, both checked (422
/// naming the field: an invalid email, a weak or over-long password, [`check_new_password`]).
pub async fn new_account(
    email: &str,
    password: &str,
    cost: u32,
) -> Result<(String, String), ApiError> {
    let email = email.trim().to_lowercase();
    let mut errors = std::collections::BTreeMap::new();
    if !valid_email(&email) {
        errors.insert(
            "email".to_string(),
            "must be a valid email address".to_string(),
        );
    }
    if let Err(why) = check_new_password(password, &email) {
        errors.insert("password".to_string(), why);
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(errors));
    }
    let hash = hash_password(password.to_string(), cost).await?;
    Ok((email, hash))
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
/// bumped, as [`end_sessions`] does); re-enabling does not need to. Refused with 409 when it
/// would leave no enabled owner.
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

/// A staff account as login needs it.
#[derive(Debug, Clone)]
pub struct LoginAccount {
    pub id: i64,
    pub password_hash: String,
    /// Goes into the token (`ver`), read in the same row as the hash it was checked against:
    /// a password changed after this read ends the token being issued too.
    pub token_version: i32,
    /// What the token will allow, for the client to know (the API checks it on every request).
    pub role: Role,
}

crate::from_row!(LoginAccount ["id, password_hash, token_version, role"] {
    id,
    password_hash,
    token_version,
    role,
});

const LOGIN_ACCOUNT_SQL: &str = "SELECT id, password_hash, token_version, role FROM staff_accounts
     WHERE email = $1 AND NOT disabled";

/// The enabled staff account with this (normalized) email, if any, as login needs it (a
/// disabled account is answered like an unknown email).
pub async fn find_login(
    client: &deadpool_postgres::Object,
    email: &str,
) -> Result<Option<LoginAccount>, ApiError> {
    db::opt(client, LOGIN_ACCOUNT_SQL, &[&email]).await
}

const ACCOUNT_SQL: &str = "SELECT id, password_hash FROM staff_accounts WHERE email = $1";

/// The id and password hash of the staff account with this (normalized) email, if any,
/// disabled or not.
pub async fn find_account(
    client: &deadpool_postgres::Object,
    email: &str,
) -> Result<Option<(i64, String)>, ApiError> {
    Ok(db::row_opt(client, ACCOUNT_SQL, &[&email])
        .await?
        .map(|r| (r.get("id"), r.get("password_hash"))))
}

const PASSWORD_HASH_SQL: &str = "SELECT password_hash FROM staff_accounts WHERE id = $1";

/// The password hash of staff account `id`, if it exists.
pub async fn password_hash(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
) -> Result<Option<String>, ApiError> {
    Ok(db::row_opt(client, PASSWORD_HASH_SQL, &[&id])
        .await?
        .map(|r| r.get("password_hash")))
}

const SET_PASSWORD_BY_ID_SQL: &str = "UPDATE staff_accounts
     SET password_hash = $2, token_version = token_version + 1, updated_at = statement_timestamp()
     WHERE id = $1 RETURNING token_version";

/// Sets the password hash of staff account `id` and ends its sessions, in `tx`; returns the
/// new token version (for the token that replaces the caller's).
pub async fn change_password(
    tx: &deadpool_postgres::Transaction<'_>,
    id: i64,
    hash: &str,
) -> Result<i32, ApiError> {
    let row = db::row_opt(tx, SET_PASSWORD_BY_ID_SQL, &[&id, &hash])
        .await?
        .ok_or(ApiError::NotFound("staff account"))?;
    Ok(row.try_get("token_version")?)
}

const END_SESSIONS_SQL: &str = "UPDATE staff_accounts SET token_version = token_version + 1
     WHERE id = $1";

/// Ends every session of staff account `id` at once: bumps its `token_version`, so every token
/// issued before is refused from the next request on ([`session`]); a new login gets a token of
/// the new version. Call it in the transaction of the change that must end them (a
/// password change, [`set_password`]; a role change or a disabling). Returns whether the
/// account exists.
pub async fn end_sessions(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
) -> Result<bool, ApiError> {
    Ok(db::execute(client, END_SESSIONS_SQL, &[&id]).await? == 1)
}

const SET_PASSWORD_SQL: &str = "UPDATE staff_accounts SET password_hash = $2 WHERE email = $1
     RETURNING id";

/// Sets the password of the staff account with this email (8..72 bytes, like
/// [`create_staff`]) and ends its sessions ([`end_sessions`]), in one transaction with its
/// `staff.change_password` row in the audit log: `subgate staff set-password`, so the row is
/// the command line's ([`audit_log::record_command_line`]). Returns whether the account exists.
pub async fn set_password(
    pool: &deadpool_postgres::Pool,
    email: &str,
    password: &str,
    cost: u32,
) -> Result<bool, ApiError> {
    let email = email.trim().to_lowercase();
    check_new_password(password, &email).map_err(|why| ApiError::field("password", why))?;
    let hash = hash_password(password.to_string(), cost).await?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let Some(row) = db::row_opt(&tx, SET_PASSWORD_SQL, &[&email, &hash]).await? else {
        return Ok(false);
    };
    let id: i64 = row.try_get("id")?;
    end_sessions(&tx, id).await?;
    // No password, old or new, in the record: only that it changed.
    audit_log::record_command_line(&tx, Entry::new("staff.change_password", Some(id))).await?;
    tx.commit().await?;
    Ok(true)
}
