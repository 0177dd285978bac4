-- An audit's runner shows it is alive: `heartbeat_at` moves on with every batch it checks (and
-- while it waits out a rate limit). A `running` audit whose heartbeat stopped belongs to a
-- process that died; it is marked failed ("interrupted") before another audit of its channel
-- starts, and at start-up.
ALTER TABLE audits ADD COLUMN heartbeat_at timestamptz NOT NULL DEFAULT statement_timestamp();

-- One running audit per channel: a second request while one runs is a conflict.
CREATE UNIQUE INDEX audits_one_running ON audits (channel_id) WHERE status = 'running';
