-- Outbound webhooks: the owner's endpoints, the events written in the transaction that made
-- each change (an outbox), one delivery per (event, endpoint) and the log of every attempt.
--
-- The events are written by triggers on the tables whose changes they report, so every way a
-- payment or a membership changes (the payment core, refunds, the set-based sweep, staff writes,
-- trials, cascades) reports it, in its own transaction — never lost, never written by one that
-- rolled back. A trigger does nothing but one EXISTS probe unless an enabled endpoint wants
-- that event type; then one INSERT of the event and one INSERT … SELECT of its deliveries.

CREATE TABLE webhook_endpoints (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url                   text        NOT NULL,
    description           text,
    event_types           text[]      NOT NULL,
    -- `whsec_<base64>`; the previous one keeps signing until `previous_secret_until`.
    secret                text        NOT NULL,
    previous_secret       text,
    previous_secret_until timestamptz,
    -- Null: enabled. Set with a reason when staff disable it, on `410 Gone`, or after five days
    -- of failing.
    disabled_at           timestamptz,
    disabled_reason       text,
    -- Since when every delivery to it has failed (null when the last one succeeded).
    failing_since         timestamptz,
    created_at            timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at            timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT webhook_endpoints_url_check CHECK (char_length(url) BETWEEN 1 AND 2048),
    CONSTRAINT webhook_endpoints_description_check CHECK (char_length(description) <= 500),
    CONSTRAINT webhook_endpoints_event_types_check CHECK (
        cardinality(event_types) >= 1
        AND event_types <@ ARRAY['payment.applied', 'payment.needs_review', 'payment.refunded',
            'membership.activated', 'membership.renewed', 'membership.grace',
            'membership.expired', 'membership.deleted', 'trial.started']::text[]),
    CONSTRAINT webhook_endpoints_disabled_check CHECK (
        (disabled_at IS NULL) = (disabled_reason IS NULL)),
    CONSTRAINT webhook_endpoints_disabled_reason_check CHECK (
        disabled_reason IN ('staff', 'gone', 'failing'))
);

CREATE TABLE webhook_events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- `webhook-id`: the same on every attempt and replay.
    msg_id     text        NOT NULL DEFAULT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
    type       text        NOT NULL,
    -- The body sent, byte for byte: {"type", "timestamp", "data"}.
    body       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT webhook_events_msg_id_key UNIQUE (msg_id)
);

CREATE TABLE webhook_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        bigint      NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    endpoint_id     bigint      NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    status          text        NOT NULL DEFAULT 'pending',
    -- Attempts made since it was enqueued or last replayed (the retry schedule's position).
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT webhook_deliveries_event_endpoint_key UNIQUE (event_id, endpoint_id),
    CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'delivered', 'failed'))
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at, id)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, id);

CREATE TABLE webhook_attempts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id  bigint      NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    at           timestamptz NOT NULL DEFAULT statement_timestamp(),
    status_code  integer,
    latency_ms   integer     NOT NULL,
    error        text
);
CREATE INDEX webhook_attempts_delivery_idx ON webhook_attempts (delivery_id, id);

-- RFC 3339 in UTC, as the API writes times; lifetime access ('infinity') as "infinity".
CREATE FUNCTION webhook_time(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN t = 'infinity' THEN 'infinity'
                ELSE to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') END
$$;

-- Writes event `kind` about `data` (the resource as the staff API shows it) and its deliveries
-- to every enabled endpoint that wants it; nothing when none does.
CREATE FUNCTION webhook_emit(kind text, data jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    event_id bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                   WHERE disabled_at IS NULL AND kind = ANY (event_types)) THEN
        RETURN;
    END IF;
    INSERT INTO webhook_events (type, body)
    VALUES (kind, jsonb_build_object('type', kind,
                                     'timestamp', webhook_time(statement_timestamp()),
                                     'data', data)::text)
    RETURNING id INTO event_id;
    INSERT INTO webhook_deliveries (event_id, endpoint_id)
    SELECT event_id, e.id FROM webhook_endpoints e
    WHERE e.disabled_at IS NULL AND kind = ANY (e.event_types);
END
$$;

CREATE FUNCTION webhook_payment_json(p payments) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', p.id, 'gateway', p.gateway, 'external_id', p.external_id,
        'order_reference', p.order_reference, 'order_id', p.order_id,
        'subscriber_id', p.subscriber_id, 'channel_id', p.channel_id,
        'amount_minor', p.amount_minor, 'currency', p.currency,
        'paid_at', webhook_time(p.paid_at), 'outcome', p.outcome, 'reason', p.reason,
        'created_at', webhook_time(p.created_at))
$$;

CREATE FUNCTION webhook_membership_json(m memberships) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', m.id, 'subscriber_id', m.subscriber_id, 'channel_id', m.channel_id,
        'status', m.status, 'expires_at', webhook_time(m.expires_at),
        'created_at', webhook_time(m.created_at), 'updated_at', webhook_time(m.updated_at))
$$;

-- payment.applied / payment.needs_review when stored; payment.refunded, payment.applied or
-- payment.needs_review when its outcome changes to one of those.
CREATE FUNCTION webhook_payments_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.outcome IS NOT DISTINCT FROM NEW.outcome THEN
        RETURN NULL;
    END IF;
    IF NEW.outcome = 'applied' THEN
        PERFORM webhook_emit('payment.applied', webhook_payment_json(NEW));
    ELSIF NEW.outcome = 'needs_review' THEN
        PERFORM webhook_emit('payment.needs_review', webhook_payment_json(NEW));
    ELSIF NEW.outcome = 'refunded' THEN
        PERFORM webhook_emit('payment.refunded', webhook_payment_json(NEW));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_payments AFTER INSERT OR UPDATE OF outcome ON payments
    FOR EACH ROW EXECUTE FUNCTION webhook_payments_trigger();

-- A membership's history row says what happened to it: activated (new, or live again after
-- expiry), renewed (a live one extended), grace, expired; a trial's grant is also
-- trial.started. The data is the membership as it is now.
CREATE FUNCTION webhook_membership_events_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text;
    m memberships;
BEGIN
    IF NEW.to_status = 'active' AND (NEW.from_status IS NULL OR NEW.from_status = 'expired') THEN
        kind := 'membership.activated';
    ELSIF NEW.to_status = 'active' AND NEW.expires_at_after > NEW.expires_at_before THEN
        kind := 'membership.renewed';
    ELSIF NEW.to_status = 'grace' AND NEW.from_status IS DISTINCT FROM 'grace' THEN
        kind := 'membership.grace';
    ELSIF NEW.to_status = 'expired' AND NEW.from_status IS DISTINCT FROM 'expired' THEN
        kind := 'membership.expired';
    END IF;
    IF kind IS NULL AND NEW.cause <> 'trial' THEN
        RETURN NULL;
    END IF;
    -- Without an endpoint that wants it, not even the membership is read.
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                   WHERE disabled_at IS NULL
                     AND (kind = ANY (event_types)
                          OR (NEW.cause = 'trial' AND 'trial.started' = ANY (event_types)))) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO m FROM memberships WHERE id = NEW.membership_id;
    IF kind IS NOT NULL THEN
        PERFORM webhook_emit(kind, webhook_membership_json(m));
    END IF;
    IF NEW.cause = 'trial' THEN
        PERFORM webhook_emit('trial.started', webhook_membership_json(m));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_membership_events AFTER INSERT ON membership_events
    FOR EACH ROW EXECUTE FUNCTION webhook_membership_events_trigger();

CREATE FUNCTION webhook_memberships_delete_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_emit('membership.deleted', webhook_membership_json(OLD));
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_memberships_delete AFTER DELETE ON memberships
    FOR EACH ROW EXECUTE FUNCTION webhook_memberships_delete_trigger();
