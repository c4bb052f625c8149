package main

import (
	"fmt"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/logbook/logbook/bot/slackemu"
)

// newSlackEmulatorCmd is `logbook slack-emulator` (cobra's shape, as every subcommand; what it runs is its own).
func newSlackEmulatorCmd(e env) *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "slack-emulator",
		Short: "Run the local Slack emulator (Web API + Socket Mode) for tests and experiments",
		Long: `Run the local Slack emulator: a Web API under /api/ and Socket Mode WebSockets that the
unmodified slack-go client connects to, plus a JSON control surface under /_emu/ (post as a
user, read a thread, disconnect sockets, inject faults). Point logbook serve at it with
SLACK_API_URL=<url>/api/ and the tokens it prints.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			log := zerolog.New(e.stderr).With().Timestamp().Logger()
			return slackemu.Run(c.Context(), slackemu.Options{Addr: addr, Logger: &log}, func(s *slackemu.Server) {
				fmt.Fprintf(e.stdout, "SLACK_API_URL=%s\nSLACK_BOT_TOKEN=%s\nSLACK_APP_TOKEN=%s\ncontrol: %s/_emu/\n",
					s.APIURL(), s.BotToken(), s.AppToken(), s.URL())
			})
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:3000", "address to listen on")
	return cmd
}
