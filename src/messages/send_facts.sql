SELECT m.id,
       m.kind,
       m.subscriber_id,
       m.broadcast_id,
       m.language,
       m.outcome,
       m.attempted_at IS NOT NULL AS attempted,
       s.telegram_user_id,
       coalesce(s.display_name, s.username) AS name,
       s.marketing_opt_out,
       s.reachable,
       pc.code AS promo_code,
       pc.percent_off AS promo_percent_off,
       b.status AS broadcast_status,
       b.paid_max_stars,
       b.button,
       coalesce(b.texts, a.texts) AS texts,
       coalesce(a.enabled, true) AS enabled,
       CASE m.kind
           WHEN 'unpaid_checkout' THEN
               o.status = 'pending'
               AND o.superseded_at IS NULL
               AND NOT EXISTS (
                       SELECT 1
                       FROM orders p
                       WHERE p.subscriber_id = o.subscriber_id
                         AND p.channel_id = o.channel_id
                         AND p.status = 'paid'
                         AND p.paid_at > o.created_at)
           WHEN 'win_back' THEN ms.status = 'expired'
           WHEN 'cancel_offer' THEN ss.status = 'cancelled'
           ELSE true
       END AS applies,
       ch.id AS channel_id,
       ch.title AS channel_title,
       ch.translations AS channel_translations,
       coalesce(ms.expires_at, ss.expires_at, about.expires_at) AS expires_at,
       CASE m.kind
           WHEN 'broadcast' THEN (b.button ->> 'plan_id')::bigint
           WHEN 'unpaid_checkout' THEN o.plan_id
           WHEN 'win_back' THEN renew.plan_id
           ELSE so.plan_id
       END AS plan_id
FROM messages m
JOIN subscribers s ON s.id = m.subscriber_id
LEFT JOIN promo_codes pc ON pc.id = m.promo_code_id
LEFT JOIN broadcasts b ON b.id = m.broadcast_id
LEFT JOIN automations a ON a.kind = m.kind
LEFT JOIN orders o ON o.id = m.order_id
LEFT JOIN memberships ms ON ms.id = m.membership_id
LEFT JOIN star_subscriptions ss ON ss.id = m.star_subscription_id
LEFT JOIN orders so ON so.id = ss.order_id
LEFT JOIN LATERAL (
        SELECT mb.channel_id, mb.expires_at
        FROM memberships mb
        WHERE m.kind = 'broadcast'
          AND mb.subscriber_id = m.subscriber_id
          AND (b.segment -> 'channel_ids' IS NULL
               OR mb.channel_id IN (
                      SELECT jsonb_array_elements_text(b.segment -> 'channel_ids')::integer))
        ORDER BY mb.status <> 'expired' DESC, mb.expires_at DESC
        LIMIT 1
     ) about ON true
LEFT JOIN LATERAL (
        SELECT coalesce(
                   (SELECT o2.plan_id
                    FROM orders o2
                    JOIN plans p2 ON p2.id = o2.plan_id
                    WHERE o2.subscriber_id = m.subscriber_id
                      AND o2.channel_id = ms.channel_id
                      AND o2.status = 'paid'
                      AND p2.kind = 'paid'
                      AND p2.active
                    ORDER BY o2.paid_at DESC
                    LIMIT 1),
                   (SELECT p3.id FROM plans p3 WHERE p3.default_of = ms.channel_id)) AS plan_id
        WHERE m.kind = 'win_back'
     ) renew ON true
LEFT JOIN channels ch
       ON ch.id = coalesce(o.channel_id, ms.channel_id, ss.channel_id, about.channel_id)
WHERE m.id = ANY($1)
