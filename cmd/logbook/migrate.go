package main

import (
	"database/sql"
	"fmt"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for goose
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/migrations"
)

func newMigrateCmd(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply or list database migrations (DATABASE_URL)",
		Long: `Apply or list logbook's database migrations, embedded in this binary.

The connection (DATABASE_URL) must own the schema and be able to create the roles
logbook_app, logbook_auditor and logbook_retention (or they must exist already).
Migrations only go forward: there is no "down".`,
	}
	// withDB runs fn on DATABASE_URL, closing the connection after.
	withDB := func(fn func(db *sql.DB) error) error {
		dsn, err := databaseURL(e)
		if err != nil {
			return err
		}
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		return fn(db)
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withDB(func(db *sql.DB) error {
				if err := migrations.Up(c.Context(), db, e.stdout); err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, "database is up to date")
				return nil
			})
		},
	}, &cobra.Command{
		Use:   "status",
		Short: "List migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withDB(func(db *sql.DB) error {
				st, err := migrations.List(c.Context(), db)
				if err != nil {
					return err
				}
				for _, s := range st {
					state := "pending"
					if s.Applied {
						state = "applied"
					}
					fmt.Fprintf(e.stdout, "%-8s %05d %s\n", state, s.Version, s.Source)
				}
				return nil
			})
		},
	})
	return cmd
}
