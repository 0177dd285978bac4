-- Staff roles, disabled accounts and the audit log of staff writes.
--
-- Every account that existed before roles could do everything: it becomes an `owner`. A new
-- account always names its role (no default).
ALTER TABLE staff_accounts
    ADD COLUMN role text NOT NULL DEFAULT 'owner',
    ADD COLUMN disabled boolean NOT NULL DEFAULT false,
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    ADD CONSTRAINT staff_accounts_role_check CHECK (role IN ('owner', 'admin', 'support', 'viewer'));
ALTER TABLE staff_accounts ALTER COLUMN role DROP DEFAULT;

-- One row per staff write, written in the write's transaction (a rolled-back write leaves
-- none). `staff_id` has no foreign key and `staff_email` is copied: the record of what an
-- account did outlives the account. Rows are never changed or removed (the trigger below).
CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    staff_id    bigint      NOT NULL,
    staff_email text        NOT NULL,
    action      text        NOT NULL,
    target_type text        NOT NULL,
    target_id   bigint,
    before      jsonb,
    after       jsonb,
    request_id  text,
    at          timestamptz NOT NULL DEFAULT statement_timestamp(),
    CONSTRAINT audit_log_action_check CHECK (action ~ '^[a-z_]+\.[a-z_]+$'),
    CONSTRAINT audit_log_target_type_check CHECK (target_type ~ '^[a-z_]+$')
);
CREATE INDEX audit_log_staff_idx ON audit_log (staff_id, id);
CREATE INDEX audit_log_action_idx ON audit_log (action, id);
CREATE INDEX audit_log_target_idx ON audit_log (target_type, target_id, id);
CREATE INDEX audit_log_at_idx ON audit_log (at);

CREATE FUNCTION audit_log_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log rows are never changed or removed'
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_is_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_is_append_only();

-- Statistics (`GET /api/stats/*`): each series reads one range of one index, without the heap.
-- Revenue: payments by time, with what is summed.
CREATE INDEX payments_paid_at_idx ON payments (paid_at) INCLUDE (currency, amount_minor, outcome);
-- Trial conversions and unpaid trials: a pair's paid payments by time.
CREATE INDEX payments_pair_paid_idx ON payments (subscriber_id, channel_id, paid_at)
    WHERE outcome = 'applied' AND amount_minor > 0;
-- Members: the events by time, with what is counted.
CREATE INDEX membership_events_at_idx ON membership_events (at)
    INCLUDE (membership_id, from_status, to_status, cause);
-- Live memberships by channel (lifetime told apart) and by subscriber (active members).
CREATE INDEX memberships_live_channel_expiry_idx ON memberships (channel_id, expires_at)
    WHERE status <> 'expired';
CREATE INDEX memberships_live_subscriber_idx ON memberships (subscriber_id)
    WHERE status <> 'expired';
CREATE INDEX trial_uses_created_idx ON trial_uses (created_at);
