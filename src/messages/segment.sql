SELECT s.id AS subscriber_id,
       s.telegram_user_id,
       coalesce(s.language, $6) AS language
FROM subscribers s
WHERE NOT s.marketing_opt_out
  AND s.reachable
  AND ($5::text[] IS NULL OR coalesce(s.language, $6) = ANY ($5::text[]))
  AND (
        ($1::integer[] IS NULL AND $2::bigint[] IS NULL AND $3::text[] IS NULL
         AND $4::integer IS NULL)
     OR EXISTS (
            SELECT 1
            FROM memberships m
            WHERE m.subscriber_id = s.id
              AND ($1::integer[] IS NULL OR m.channel_id = ANY ($1::integer[]))
              AND ($2::bigint[] IS NULL OR EXISTS (
                      SELECT 1
                      FROM orders o
                      WHERE o.subscriber_id = s.id
                        AND o.channel_id = m.channel_id
                        AND o.status = 'paid'
                        AND o.plan_id = ANY ($2::bigint[])))
              AND (
                    ($3::text[] IS NULL AND $4::integer IS NULL AND m.status <> 'expired')
                 OR (m.status = 'grace' AND 'grace' = ANY ($3::text[]))
                 OR (m.status = 'active'
                     AND CASE WHEN EXISTS (
                                       SELECT 1
                                       FROM trial_uses t
                                       WHERE t.subscriber_id = s.id
                                         AND t.channel_id = m.channel_id)
                                   AND NOT EXISTS (
                                       SELECT 1
                                       FROM payments p
                                       WHERE p.subscriber_id = s.id
                                         AND p.channel_id = m.channel_id
                                         AND p.outcome = 'applied')
                              THEN 'trial'
                              ELSE 'active'
                         END = ANY ($3::text[]))
                 OR (m.status = 'expired'
                     AND ('expired' = ANY ($3::text[])
                          OR ($3::text[] IS NULL AND $4::integer IS NOT NULL))
                     AND ($4::integer IS NULL
                          OR m.updated_at >= statement_timestamp() - make_interval(days => $4::integer)))))
     OR ('never_paid' = ANY ($3::text[])
         AND $2::bigint[] IS NULL
         AND NOT EXISTS (
                 SELECT 1
                 FROM payments p
                 WHERE p.subscriber_id = s.id
                   AND p.outcome = 'applied'
                   AND ($1::integer[] IS NULL OR p.channel_id = ANY ($1::integer[]))))
      )
