WITH fresh AS (
    SELECT o.id
    FROM (SELECT id FROM orders WHERE id = $15 AND xmin::text = $20 FOR UPDATE) AS o
    JOIN channels c ON c.id = $2 AND c.xmin::text = $21
    WHERE EXISTS (SELECT 1 FROM plans p WHERE p.id = $22 AND p.xmin::text = $23)
      AND (SELECT pm.xmin::text FROM memberships pm
           WHERE pm.subscriber_id = $1 AND pm.channel_id = $2)
          IS NOT DISTINCT FROM $24::text
      AND NOT EXISTS (SELECT 1 FROM referral_attributions ra JOIN referral_program rp ON rp.enabled
                      WHERE ra.subscriber_id = $1)
    FOR KEY SHARE OF c
), inserted AS (
    INSERT INTO payments (id, gateway, external_id, order_reference, order_id, subscriber_id,
                          channel_id, payer, amount_minor, currency, paid_at, outcome, reason,
                          renewal, subscription_expires_at)
    OVERRIDING SYSTEM VALUE
    SELECT $6, $12, $13, $14, fresh.id, $1, $2, NULL, $16, $17,
           LEAST($18::timestamptz, statement_timestamp()), $19, NULL, false, NULL
    FROM fresh
    ON CONFLICT (gateway, external_id) DO NOTHING
    RETURNING id, order_id, paid_at, created_at
), to_mark AS (SELECT order_id, paid_at FROM inserted), paid AS (
    UPDATE orders o SET status = 'paid', paid_at = m.paid_at, promo_held_until = NULL
    FROM to_mark m WHERE o.id = m.order_id
), sub AS (
    SELECT id, telegram_user_id FROM subscribers WHERE id = $1 AND (EXISTS (SELECT 1 FROM inserted)) FOR KEY SHARE
), b AS (
    SELECT id, status, expires_at FROM memberships
    WHERE subscriber_id = $1 AND channel_id = $2
), m AS (
    INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
    SELECT sub.id, $2, $4,
           CASE WHEN $3::integer IS NULL THEN 'infinity'::timestamptz
                ELSE GREATEST(statement_timestamp() + make_interval(days => $3),
                              $11::timestamptz) END
    FROM sub
    ON CONFLICT (subscriber_id, channel_id) DO UPDATE
    SET status = $4,
        expires_at = CASE WHEN $3::integer IS NULL THEN 'infinity'::timestamptz
                          ELSE GREATEST(GREATEST(memberships.expires_at, statement_timestamp())
                                        + make_interval(days => $3), $11::timestamptz) END,
        updated_at = statement_timestamp()
    RETURNING id, subscriber_id, channel_id, status, expires_at, created_at, updated_at
), ev AS (
    INSERT INTO membership_events
        (membership_id, from_status, to_status, expires_at_before, expires_at_after, cause,
         payment_id)
    SELECT m.id, b.status, m.status, b.expires_at, m.expires_at, $5, $6
    FROM m LEFT JOIN b ON true
    RETURNING id, membership_id
), fx AS (
    INSERT INTO effects (kind, membership_id, payment_id, chat_id, user_id, payload, dedupe_key)
    SELECT k.kind, m.id, $6, c.telegram_chat_id, sub.telegram_user_id,
           jsonb_build_object('expires_at',
               CASE WHEN isfinite(m.expires_at)
                    THEN to_char((m.expires_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                    ELSE (m.expires_at)::text END),
           (k.key_prefix) || ':' || (m.id) || ':ev' || (ev.id)
    FROM m
    JOIN ev ON ev.membership_id = m.id
    LEFT JOIN b ON true
    CROSS JOIN LATERAL (
        SELECT CASE WHEN b.status <> 'expired' THEN $7::text ELSE $8::text END,
               CASE WHEN b.status <> 'expired' THEN $9::text ELSE $10::text END
    ) AS k(kind, key_prefix)
    JOIN sub ON sub.id = m.subscriber_id
    JOIN channels c ON c.id = m.channel_id
    WHERE b.id IS NULL OR NOT (b.status <> 'expired') OR m.expires_at > b.expires_at
    FOR KEY SHARE OF c
)
SELECT m.*, i.paid_at AS payment_paid_at, i.created_at AS payment_created_at
FROM inserted i CROSS JOIN m
