INSERT INTO stats_revenue_days (day, currency, gross, refunded, affiliate_fees, payments)
SELECT * FROM (
    SELECT (paid_at AT TIME ZONE 'UTC')::date AS day, currency,
           sum(amount_minor) AS gross,
           coalesce(sum(amount_minor) FILTER (WHERE outcome IN ('refunded', 'disputed')), 0)
               AS refunded,
           coalesce(sum(affiliate_fee_minor)
                    FILTER (WHERE outcome NOT IN ('refunded', 'disputed')), 0) AS affiliate_fees,
           count(*) AS payments
    FROM payments
    WHERE paid_at >= ((SELECT min(d) FROM unnest($1::date[]) d)::timestamp AT TIME ZONE 'UTC')
      AND paid_at < (((SELECT max(d) FROM unnest($1::date[]) d) + 1)::timestamp AT TIME ZONE 'UTC')
      AND outcome IN ('applied', 'refund_pending', 'refunded', 'refund_failed', 'disputed')
    GROUP BY 1, 2
) r WHERE day = ANY($1)
