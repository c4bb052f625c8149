-- Who named the operator of an audit command: audit_access.who_source says where the name in
-- who came from, so a record made by a cron job or a container (where USER is often unset)
-- is as explainable as one typed at a terminal. Values (set by cmd/logbook):
--   --as                    the command's --as flag
--   LOGBOOK_AUDIT_OPERATOR  that environment variable
--   USER                    that environment variable
--   os-account              the operating system account running the command (os/user)
--   system                  a part of logbook (the scheduler)
--   ''                      records written before this migration, or by a caller that did not say
-- Adding a column with a constant default rewrites no row and fires no trigger: the records
-- stay append-only.

-- +goose Up
ALTER TABLE audit_access ADD COLUMN who_source text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE audit_access DROP COLUMN who_source;
