-- A minimal payment transaction, the floor the service's is compared with: the pair lock, the
-- payment inserted unless already stored, the order marked paid and the membership upserted —
-- six prepared statements, one round trip each, nothing read back. No check, no audit event, no
-- outbox row: it keeps fewer guarantees than the service and is a yardstick, not a design.
-- Same orders and layout as payment_tx.sql (order n: reference n, subscriber (n - 1) / 10 + 1,
-- channel (n - 1) % 10 + 1); each client walks its own orders.
\set k :k + 1
\set n :lo + :client_id + (:k - 1) * :clients
\set sid (:n - 1) / 10 + 1
\set cid (:n - 1) % 10 + 1
\set pay random(1, 1099511627776)
BEGIN;
SELECT pg_advisory_xact_lock(:sid, :cid);
INSERT INTO payments (gateway, external_id, order_reference, order_id, subscriber_id, channel_id,
                      amount_minor, currency, paid_at, outcome)
VALUES ('bench', :pay, :n, :n, :sid, :cid, 19900, 'UAH', statement_timestamp(), 'applied')
ON CONFLICT (gateway, external_id) DO NOTHING;
UPDATE orders SET status = 'paid', paid_at = statement_timestamp() WHERE id = :n;
INSERT INTO memberships (subscriber_id, channel_id, status, expires_at)
VALUES (:sid, :cid, 'active', statement_timestamp() + make_interval(days => 30))
ON CONFLICT (subscriber_id, channel_id) DO UPDATE
SET status = 'active',
    expires_at = GREATEST(memberships.expires_at, statement_timestamp()) + make_interval(days => 30),
    updated_at = statement_timestamp();
COMMIT;
