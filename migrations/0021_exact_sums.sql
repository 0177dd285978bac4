-- A day's revenue is a sum of payments, and a sum of `bigint` amounts can exceed `bigint`:
-- the roll-up keeps it exact (`numeric`), as the reads that add the days up do.
ALTER TABLE stats_revenue_days
    ALTER COLUMN gross TYPE numeric,
    ALTER COLUMN refunded TYPE numeric;
