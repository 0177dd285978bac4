-- Outbound webhooks, one lane per endpoint: a delivery being sent carries its lease, so a claim
-- counts an endpoint's deliveries in flight over every process (src/outbound/delivery.rs).
-- NULL when no attempt is under way; an attempt's record clears it, and one left by a killed
-- process stops counting when it runs out.
ALTER TABLE webhook_deliveries ADD COLUMN leased_until timestamptz;

-- The leases a claim counts, per endpoint: only deliveries under way (or left by a killed
-- process) carry one.
CREATE INDEX webhook_deliveries_leased_idx ON webhook_deliveries (endpoint_id)
    WHERE leased_until IS NOT NULL;

-- One endpoint's next due deliveries, read in due order up to its limit, however long the
-- queue of another endpoint is.
CREATE INDEX webhook_deliveries_endpoint_due_idx
    ON webhook_deliveries (endpoint_id, next_attempt_at, id) WHERE status = 'pending';
