-- A staff account's token version: every token carries the version it was issued under (claim
-- `ver`) and opens the API only while it is still the account's. Bumping it (a password change,
-- a role change, a disabling) ends every session of the account at once. Tokens issued before
-- this column existed carry no version and count as 0.
ALTER TABLE staff_accounts
    ADD COLUMN token_version integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT staff_accounts_token_version_check CHECK (token_version >= 0);
