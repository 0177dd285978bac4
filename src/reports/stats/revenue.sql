WITH starts AS (
    SELECT s AT TIME ZONE 'UTC' AS start,
           (s + ('1 ' || $3)::interval) AT TIME ZONE 'UTC' AS stop
    FROM generate_series(date_trunc($3, $1::timestamptz AT TIME ZONE 'UTC'),
                         $2::timestamptz AT TIME ZONE 'UTC' - interval '1 microsecond',
                         ('1 ' || $3)::interval) AS s
),
bounds AS (SELECT min(start) AS first FROM starts),
days AS (
    SELECT day, currency, gross, refunded, affiliate_fees, payments FROM stats_revenue_days
    WHERE day >= ((SELECT first FROM bounds) AT TIME ZONE 'UTC')::date
      AND day < ((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date
    UNION ALL
    SELECT (paid_at AT TIME ZONE 'UTC')::date AS day, currency,
           sum(amount_minor) AS gross,
           coalesce(sum(amount_minor) FILTER (WHERE outcome IN ('refunded', 'disputed')), 0)
               AS refunded,
           coalesce(sum(affiliate_fee_minor)
                    FILTER (WHERE outcome NOT IN ('refunded', 'disputed')), 0) AS affiliate_fees,
           count(*) AS payments
    FROM payments
    WHERE paid_at >= greatest((SELECT first FROM bounds), (((statement_timestamp() - interval '1 hour') AT TIME ZONE 'UTC')::date::timestamp AT TIME ZONE 'UTC'))
      AND paid_at < $2
      AND outcome IN ('applied', 'refund_pending', 'refunded', 'refund_failed', 'disputed')
    GROUP BY 1, 2
),
agg AS (
    SELECT date_trunc($3, day::timestamp) AT TIME ZONE 'UTC' AS start, currency,
           sum(gross) AS gross, sum(refunded) AS refunded,
           sum(affiliate_fees) AS affiliate_fees,
           sum(payments)::bigint AS payments
    FROM days WHERE day::timestamp AT TIME ZONE 'UTC' < $2
    GROUP BY 1, 2
),
currencies AS (SELECT DISTINCT currency FROM agg)
SELECT s.start, c.currency, coalesce(a.gross, 0)::text AS gross_minor,
       coalesce(a.refunded, 0)::text AS refunded_minor,
       coalesce(a.gross - a.refunded, 0)::text AS net_minor,
       coalesce(a.affiliate_fees, 0)::text AS affiliate_fees_minor,
       coalesce(a.gross - a.refunded - a.affiliate_fees, 0)::text AS net_after_fees_minor,
       coalesce(a.payments, 0) AS payments
FROM starts s CROSS JOIN currencies c
LEFT JOIN agg a ON a.start = s.start AND a.currency = c.currency
ORDER BY s.start, c.currency
