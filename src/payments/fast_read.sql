SELECT o.*, c.active, c.seat_limit, c.billing_period_days, s.telegram_user_id,
       p.kind AS plan_kind, p.period_days AS plan_period_days,
       p.recurring AS plan_recurring, p.active AS plan_active,
       ARRAY(SELECT pc.channel_id FROM plan_channels pc WHERE pc.plan_id = o.plan_id
             ORDER BY pc.channel_id) AS plan_channel_ids,
       (SELECT count(*) FROM memberships lm
        WHERE lm.subscriber_id = o.subscriber_id
          AND lm.channel_id = ANY (COALESCE(
              NULLIF(ARRAY(SELECT pc.channel_id FROM plan_channels pc
                           WHERE pc.plan_id = o.plan_id), '{}'::integer[]),
              ARRAY[o.channel_id]))
          AND lm.expires_at = 'infinity' AND lm.status <> 'expired') AS lifetime_channels,
       o.row_version AS order_version, c.xmin::text AS channel_version,
       p.xmin::text AS plan_version,
       (SELECT pm.xmin::text FROM memberships pm
        WHERE pm.subscriber_id = o.subscriber_id AND pm.channel_id = o.channel_id)
           AS membership_version,
       EXISTS (SELECT 1 FROM referral_attributions ra JOIN referral_program rp ON rp.enabled
               WHERE ra.subscriber_id = o.subscriber_id) AS referred,
       st.stored,
       CASE WHEN st.stored THEN NULL
            ELSE nextval(pg_get_serial_sequence('payments', 'id')) END AS new_payment_id
FROM (SELECT id, reference, subscriber_id, channel_id, amount_minor, currency, status,
             hold_until, invoice_link, superseded_at, created_at, paid_at, plan_id,
             list_price_minor, discount_minor, promo_code_id, promo_held_until,
             (SELECT pcode.code FROM promo_codes pcode WHERE pcode.id = promo_code_id)
                 AS promo_code,
             xmin::text AS row_version
      FROM orders WHERE reference = $1) AS o
CROSS JOIN (SELECT EXISTS (SELECT 1 FROM payments sp
                           WHERE sp.gateway = $2 AND sp.external_id = $3) AS stored) AS st
JOIN channels c ON c.id = o.channel_id
JOIN subscribers s ON s.id = o.subscriber_id
JOIN plans p ON p.id = o.plan_id
