WITH starts AS (
    SELECT s AT TIME ZONE 'UTC' AS start,
           (s + ('1 ' || $3)::interval) AT TIME ZONE 'UTC' AS stop
    FROM generate_series(date_trunc($3, $1::timestamptz AT TIME ZONE 'UTC'),
                         $2::timestamptz AT TIME ZONE 'UTC' - interval '1 microsecond',
                         ('1 ' || $3)::interval) AS s
),
bounds AS (SELECT min(start) AS first, max(stop) AS last FROM starts),
chans AS (SELECT unnest($5::int[]) AS channel_id),
live_now AS (
    SELECT channel_id, count(*) AS n FROM memberships
    WHERE status <> 'expired' AND ($4::int IS NULL OR channel_id = $4)
    GROUP BY channel_id
),
days AS (
    SELECT day, channel_id, new, renewed, expired, delta, trials_started,
           trials_converted
    FROM stats_member_days
    WHERE day >= ((SELECT first FROM bounds) AT TIME ZONE 'UTC')::date
      AND day < ((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date
      AND ($4::int IS NULL OR channel_id = $4)
    UNION ALL
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
            WHERE e.at >= greatest((SELECT first FROM bounds), (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC'))
              AND e.at < 'infinity'
            GROUP BY 1, 2
            UNION ALL
            SELECT (created_at AT TIME ZONE 'UTC')::date, channel_id, 0, 0, 0, 0, count(*), 0
            FROM trial_uses
            WHERE created_at >= greatest((SELECT first FROM bounds), (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC'))
              AND created_at < 'infinity'
            GROUP BY 1, 2
            UNION ALL
            SELECT (p.paid_at AT TIME ZONE 'UTC')::date, p.channel_id, 0, 0, 0, 0, 0, count(*)
            FROM payments p
            JOIN trial_uses t ON t.subscriber_id = p.subscriber_id
                             AND t.channel_id = p.channel_id AND t.created_at < p.paid_at
            WHERE p.paid_at >= greatest((SELECT first FROM bounds), (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC'))
              AND p.paid_at < 'infinity'
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
    ) raw WHERE ($4::int IS NULL OR channel_id = $4)
),
tail AS (
    SELECT channel_id, sum(delta) AS delta FROM days
    WHERE day::timestamp AT TIME ZONE 'UTC' >= (SELECT last FROM bounds)
    GROUP BY channel_id
),
per_interval AS (
    SELECT date_trunc($3, day::timestamp) AT TIME ZONE 'UTC' AS start, channel_id,
           sum(new) AS new, sum(renewed) AS renewed, sum(expired) AS expired,
           sum(delta) AS delta, sum(trials_started) AS trials_started,
           sum(trials_converted) AS trials_converted
    FROM days WHERE day::timestamp AT TIME ZONE 'UTC' < (SELECT last FROM bounds)
    GROUP BY 1, 2
),
grid AS (
    SELECT s.start, s.stop, c.channel_id, coalesce(p.new, 0) AS new,
           coalesce(p.renewed, 0) AS renewed, coalesce(p.expired, 0) AS expired,
           coalesce(p.delta, 0) AS delta,
           coalesce(p.trials_started, 0) AS trials_started,
           coalesce(p.trials_converted, 0) AS trials_converted
    FROM starts s CROSS JOIN chans c
    LEFT JOIN per_interval p ON p.start = s.start AND p.channel_id = c.channel_id
)
SELECT g.start, g.channel_id,
       (coalesce(l.n, 0) - coalesce(tl.delta, 0)
        - coalesce(sum(g.delta) OVER (PARTITION BY g.channel_id ORDER BY g.start DESC
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))::bigint
           AS live,
       g.new::bigint AS new, g.renewed::bigint AS renewed,
       g.expired::bigint AS expired, g.trials_started::bigint AS trials_started,
       g.trials_converted::bigint AS trials_converted
FROM grid g
LEFT JOIN live_now l ON l.channel_id = g.channel_id
LEFT JOIN tail tl ON tl.channel_id = g.channel_id
ORDER BY g.start, g.channel_id
