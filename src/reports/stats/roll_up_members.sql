INSERT INTO stats_member_days (day, channel_id, new, renewed, expired, delta,
                               trials_started, trials_converted)
SELECT * FROM (
    SELECT day, channel_id, sum(new)::bigint AS new, sum(renewed)::bigint AS renewed,
           sum(expired)::bigint AS expired, sum(delta)::bigint AS delta,
           sum(trials)::bigint AS trials_started, sum(conversions)::bigint AS trials_converted
    FROM (
        SELECT (e.at AT TIME ZONE 'UTC')::date AS day, m.channel_id,
               count(*) FILTER (WHERE e.from_status IS NULL) AS new,
               count(*) FILTER (WHERE e.cause = 'payment' AND e.from_status IS NOT NULL)
                   AS renewed,
               count(*) FILTER (WHERE e.to_status = 'expired'
                                  AND e.from_status IS DISTINCT FROM 'expired') AS expired,
               sum((CASE WHEN e.to_status <> 'expired' THEN 1 ELSE 0 END
                    - CASE WHEN e.from_status IS NOT NULL AND e.from_status <> 'expired' THEN 1 ELSE 0 END))
                   AS delta,
               0 AS trials, 0 AS conversions
        FROM membership_events e JOIN memberships m ON m.id = e.membership_id
        WHERE e.at >= ((SELECT min(d) FROM unnest($1::date[]) d)::timestamp AT TIME ZONE 'UTC')
          AND e.at < (((SELECT max(d) FROM unnest($1::date[]) d) + 1)::timestamp AT TIME ZONE 'UTC')
        GROUP BY 1, 2
        UNION ALL
        SELECT (created_at AT TIME ZONE 'UTC')::date, channel_id, 0, 0, 0, 0, count(*), 0
        FROM trial_uses
        WHERE created_at >= ((SELECT min(d) FROM unnest($1::date[]) d)::timestamp AT TIME ZONE 'UTC')
          AND created_at < (((SELECT max(d) FROM unnest($1::date[]) d) + 1)::timestamp AT TIME ZONE 'UTC')
        GROUP BY 1, 2
        UNION ALL
        SELECT (p.paid_at AT TIME ZONE 'UTC')::date, p.channel_id, 0, 0, 0, 0, 0, count(*)
        FROM payments p
        JOIN trial_uses t ON t.subscriber_id = p.subscriber_id
                         AND t.channel_id = p.channel_id AND t.created_at < p.paid_at
        WHERE p.paid_at >= ((SELECT min(d) FROM unnest($1::date[]) d)::timestamp AT TIME ZONE 'UTC')
          AND p.paid_at < (((SELECT max(d) FROM unnest($1::date[]) d) + 1)::timestamp AT TIME ZONE 'UTC')
          AND p.outcome = 'applied' AND p.amount_minor > 0
          AND NOT EXISTS (
              SELECT 1 FROM payments q
              WHERE q.subscriber_id = p.subscriber_id AND q.channel_id = p.channel_id
                AND q.outcome = 'applied' AND q.amount_minor > 0
                AND q.paid_at > t.created_at
                AND (q.paid_at, q.id) < (p.paid_at, p.id))
        GROUP BY 1, 2
    ) x
    GROUP BY day, channel_id
) m WHERE day = ANY($1)
