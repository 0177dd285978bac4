-- A payout of affiliate $1's payable lines in currency $2, recorded by staff account $3, in one
-- statement (the caller holds the affiliate's row lock): the payable lines, both signs, are
-- summed; when there is at least one and the net is positive the payout row is written and
-- exactly those lines are marked paid by it. Always answers one row: the net and the count
-- (whether paid or not), and the payout when one was written.
WITH payable AS (
    SELECT l.id, l.amount_minor
    FROM commission_lines l
    WHERE l.affiliate_id = $1 AND l.currency = $2
      AND l.status = 'pending' AND l.payable_at <= statement_timestamp()
),
totals AS (
    SELECT sum(amount_minor) AS net, count(*) AS n FROM payable
),
payout AS (
    INSERT INTO payouts (affiliate_id, currency, amount_minor, lines, staff_id)
    SELECT $1, $2, t.net, t.n, $3 FROM totals t
    WHERE t.n > 0 AND t.net > 0
    RETURNING id, affiliate_id, currency, amount_minor, lines, created_at
),
paid AS (
    UPDATE commission_lines l SET status = 'paid', payout_id = p.id
    FROM payout p
    WHERE l.id IN (SELECT id FROM payable)
    RETURNING l.id
)
SELECT t.net::text AS net, t.n AS n, (SELECT count(*) FROM paid) AS paid,
       p.id, p.affiliate_id, p.currency, p.amount_minor, p.lines, p.created_at
FROM totals t LEFT JOIN payout p ON true
