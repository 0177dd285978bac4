WITH gone AS (
    DELETE FROM memberships WHERE id = $1
    RETURNING id, subscriber_id, channel_id, status, expires_at
), deleted_revokes AS (
    INSERT INTO effects (kind, chat_id, user_id, payload, dedupe_key)
    SELECT 'revoke', c.telegram_chat_id, s.telegram_user_id,
           jsonb_build_object('membership_id', g.id, 'deleted', true, 'expires_at',
               CASE WHEN isfinite(g.expires_at)
                    THEN to_char((g.expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                    ELSE (g.expires_at)::text END),
           'revoke:' || (g.id) || ':deleted'
    FROM gone g
    JOIN subscribers s ON s.id = g.subscriber_id
    JOIN channels c ON c.id = g.channel_id
    WHERE g.status IN ('active', 'grace')
    ORDER BY g.id
)
SELECT count(*) AS deleted FROM gone
