//! The embedded migrations: the ordered `migrations/*.sql` files, applied under a session
//! advisory lock so two processes starting together apply each migration once, and the
//! readiness check that every migration this binary knows is applied. An applied migration is
//! never edited; a change is a new file.

use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};

use crate::common::error::ApiError;

/// The migrations, in order. A new migration is appended here and never edited after release.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "init", include_str!("../../migrations/0001_init.sql")),
    (
        2,
        "telegram",
        include_str!("../../migrations/0002_telegram.sql"),
    ),
    (
        3,
        "effects",
        include_str!("../../migrations/0003_effects.sql"),
    ),
    (
        4,
        "effect_leases",
        include_str!("../../migrations/0004_effect_leases.sql"),
    ),
    (
        5,
        "buyer_bot",
        include_str!("../../migrations/0005_buyer_bot.sql"),
    ),
    (
        6,
        "star_subscription_refusals",
        include_str!("../../migrations/0006_star_subscription_refusals.sql"),
    ),
    (
        7,
        "seat_holds",
        include_str!("../../migrations/0007_seat_holds.sql"),
    ),
    (
        8,
        "staff_token_version",
        include_str!("../../migrations/0008_staff_token_version.sql"),
    ),
    (
        9,
        "offers",
        include_str!("../../migrations/0009_offers.sql"),
    ),
    (
        10,
        "telegram_truth",
        include_str!("../../migrations/0010_telegram_truth.sql"),
    ),
    (11, "audit", include_str!("../../migrations/0011_audit.sql")),
    (
        12,
        "languages",
        include_str!("../../migrations/0012_languages.sql"),
    ),
    (
        13,
        "outbound_webhooks",
        include_str!("../../migrations/0013_outbound_webhooks.sql"),
    ),
    (
        14,
        "staff_roles",
        include_str!("../../migrations/0014_staff_roles.sql"),
    ),
    (
        15,
        "cheaper_writes",
        include_str!("../../migrations/0015_cheaper_writes.sql"),
    ),
    (
        16,
        "effects_wake_up",
        include_str!("../../migrations/0016_effects_wake_up.sql"),
    ),
    (
        17,
        "sweep_queue",
        include_str!("../../migrations/0017_sweep_queue.sql"),
    ),
    (
        18,
        "refund_before_payment",
        include_str!("../../migrations/0018_refund_before_payment.sql"),
    ),
    (
        19,
        "subscription_updates_code_guesses",
        include_str!("../../migrations/0019_subscription_updates_code_guesses.sql"),
    ),
    (
        20,
        "stripe_disputes",
        include_str!("../../migrations/0020_stripe_disputes.sql"),
    ),
    (
        21,
        "exact_sums",
        include_str!("../../migrations/0021_exact_sums.sql"),
    ),
    (
        22,
        "cli_audit",
        include_str!("../../migrations/0022_cli_audit.sql"),
    ),
    (
        23,
        "outbound_lanes",
        include_str!("../../migrations/0023_outbound_lanes.sql"),
    ),
    (
        24,
        "messages_to_members",
        include_str!("../../migrations/0024_messages_to_members.sql"),
    ),
    (
        25,
        "referrals",
        include_str!("../../migrations/0025_referrals.sql"),
    ),
    (
        26,
        "affiliate_fees",
        include_str!("../../migrations/0026_affiliate_fees.sql"),
    ),
    (
        27,
        "the_door",
        include_str!("../../migrations/0027_the_door.sql"),
    ),
    (
        28,
        "more_money",
        include_str!("../../migrations/0028_more_money.sql"),
    ),
    (
        29,
        "monobank",
        include_str!("../../migrations/0029_monobank.sql"),
    ),
    (
        30,
        "cryptopay",
        include_str!("../../migrations/0030_cryptopay.sql"),
    ),
    (
        31,
        "fiscal_receipts",
        include_str!("../../migrations/0031_fiscal_receipts.sql"),
    ),
    (
        32,
        "staff_refunds",
        include_str!("../../migrations/0032_staff_refunds.sql"),
    ),
];

/// Key of the session advisory lock that serializes migrations (the single-bigint keyspace,
/// distinct from the two-int4 keys the payment path uses).
const MIGRATION_LOCK: i64 = 0x5375_6267_6174_6501;

/// Applies every migration not yet applied, each in its own transaction, under an advisory lock.
/// Returns how many were applied now.
pub async fn migrate(pool: &Pool) -> Result<usize, ApiError> {
    let mut client = pool.get().await?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let result = apply_pending(&mut client).await;
    // Unlock even when a migration failed; the connection goes back to the pool.
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    let applied = result?;
    unlock?;
    Ok(applied)
}

async fn apply_pending(client: &mut deadpool_postgres::Object) -> Result<usize, ApiError> {
    // Checked first rather than `CREATE … IF NOT EXISTS`, whose notice would be logged at every
    // start; the advisory lock held by the caller makes check-then-create safe.
    let exists: bool = client
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        client
            .batch_execute(
                "CREATE TABLE schema_migrations (
                     version    integer PRIMARY KEY,
                     name       text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT now()
                 )",
            )
            .await?;
    }
    let mut applied = 0;
    for &(version, name, sql) in MIGRATIONS {
        let tx = client.transaction().await?;
        let done = tx
            .query_opt(
                "SELECT 1 FROM schema_migrations WHERE version = $1",
                &[&version],
            )
            .await?
            .is_some();
        if done {
            continue;
        }
        tracing::info!(version, name, "applying migration");
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[&version, &name],
        )
        .await?;
        tx.commit().await?;
        applied += 1;
    }
    Ok(applied)
}

/// The newest migration this binary knows.
pub fn latest_migration() -> i32 {
    MIGRATIONS.last().map(|m| m.0).unwrap_or(0)
}

/// True when the database answers and every migration this binary knows is applied.
pub async fn is_ready(pool: &Pool) -> bool {
    let Ok(client) = pool.get().await else {
        return false;
    };
    let latest = latest_migration();
    let query = async {
        client
            .query_opt(
                "SELECT max(version) FROM schema_migrations HAVING max(version) >= $1",
                &[&latest],
            )
            .await
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), query).await,
        Ok(Ok(Some(_)))
    )
}
