-- Staff accounts changed from the command line (`subgate staff create`, `set-password`) are in
-- the audit log too. Such a row has no staff account behind it: `actor` says who made a write,
-- `staff` (an account, named by `staff_id` and `staff_email`) or `cli` (the command line, with
-- neither). Adding a column with a constant default and a CHECK changes no existing row, so
-- the append-only trigger is not involved.
ALTER TABLE audit_log
    ADD COLUMN actor text NOT NULL DEFAULT 'staff',
    ALTER COLUMN staff_id DROP NOT NULL,
    ALTER COLUMN staff_email DROP NOT NULL,
    ADD CONSTRAINT audit_log_actor_check CHECK (
        (actor = 'staff' AND staff_id IS NOT NULL AND staff_email IS NOT NULL)
        OR (actor = 'cli' AND staff_id IS NULL AND staff_email IS NULL));
ALTER TABLE audit_log ALTER COLUMN actor DROP DEFAULT;
