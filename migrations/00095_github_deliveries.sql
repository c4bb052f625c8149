-- GitHub webhook deliveries seen, and looks at followed pull requests due (issue 32; the
-- security review's finding 9). A delivery's body is signed but its X-GitHub-Delivery is not,
-- so a captured delivery can be sent again under its own id or a new one: each would cost
-- five or six requests to GitHub's API per followed pull request.
--
-- github_deliveries: a delivery is claimed once, by its id and by its body's SHA-256, until
-- expires_at; a delivery whose id or body is already claimed costs one INSERT and no request
-- to GitHub. A claim whose look failed is deleted again, so GitHub's redelivery looks again.
-- Expired rows are deleted by the next claim: the table holds a few days of deliveries.
--
-- followup_looks: when the newest look at a followed pull request starts (look_at, by the
-- database's clock). A delivery is covered by a look not yet started; otherwise it takes the
-- next slot, at least the gap after the last look's start: at most one look per pull request
-- per gap, across replicas, and none lost.

-- +goose Up
CREATE TABLE github_deliveries (
    delivery_id text PRIMARY KEY CHECK (length(delivery_id) BETWEEN 1 AND 100),
    body_sha256 bytea NOT NULL UNIQUE CHECK (length(body_sha256) = 32),
    received_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX github_deliveries_expires ON github_deliveries (expires_at);

CREATE TABLE followup_looks (
    repo    text NOT NULL,
    number  integer NOT NULL CHECK (number > 0),
    look_at timestamptz NOT NULL,
    PRIMARY KEY (repo, number)
);

GRANT SELECT, INSERT, DELETE ON github_deliveries TO logbook_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON followup_looks TO logbook_app;
GRANT SELECT ON github_deliveries, followup_looks TO logbook_auditor;

-- +goose Down
DROP TABLE followup_looks;
DROP TABLE github_deliveries;
