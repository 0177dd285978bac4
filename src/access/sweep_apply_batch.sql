WITH updated AS (
    UPDATE memberships m
    SET status = d.to_status, updated_at = statement_timestamp()
    FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[])
         AS d(id, from_status, to_status, expires_at)
    WHERE m.id = d.id AND m.status = d.from_status AND m.expires_at = d.expires_at
    RETURNING m.id, m.subscriber_id, m.channel_id, d.from_status, m.status, m.expires_at
), events AS (
    INSERT INTO membership_events
        (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause)
    SELECT id, from_status, status, expires_at, expires_at, 'sweep' FROM updated
    RETURNING id, membership_id
), sweep_effects AS (
    INSERT INTO sweep_queue (event_id, membership_id, kind, chat_id, user_id, expires_at)
    SELECT ev.id, u.id,
           CASE WHEN u.status = 'expired' THEN 'revoke' ELSE 'grace_notice' END,
           c.telegram_chat_id, s.telegram_user_id, u.expires_at
    FROM updated u
    JOIN events ev ON ev.membership_id = u.id
    JOIN subscribers s ON s.id = u.subscriber_id
    JOIN channels c ON c.id = u.channel_id
    WHERE (u.from_status IN ('active', 'grace') AND u.status = 'expired')
       OR (u.from_status = 'active' AND u.status = 'grace')
    ORDER BY u.id
)
SELECT id, subscriber_id, channel_id, from_status, status, expires_at FROM updated
