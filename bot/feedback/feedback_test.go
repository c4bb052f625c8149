package feedback_test

import (
	"context"
	"testing"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/logbook/logbook/bot/feedback"
	"github.com/logbook/logbook/migrations/pgtest"
	"github.com/logbook/logbook/session"
)

func newStore(t *testing.T) *session.Store {
	t.Helper()
	pool, err := session.Connect(context.Background(), pgtest.New(t), session.PoolOptions{Role: "logbook_app"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return session.NewStore(pool, session.Options{})
}

// click is the block_actions payload of a click on b's button value by user.
func click(b slack.Block, sess session.Session, user, value, actionTS string) slack.InteractionCallback {
	var cb slack.InteractionCallback
	cb.Type = slack.InteractionTypeBlockActions
	cb.User.ID = user
	cb.Channel.ID = sess.Key.Channel
	cb.Container.ChannelID = sess.Key.Channel
	cb.Container.ThreadTs = sess.Key.ThreadTS
	cb.Container.MessageTs = "1700000001.000200"
	cb.ActionCallback.BlockActions = []*slack.BlockAction{{ActionID: feedback.ActionID, BlockID: b.ID(), Value: value, ActionTs: actionTS}}
	return cb
}

// One click delivered twice (a redelivered envelope, a replica that answered it too) is one
// feedback event; the model that wrote the reply is recorded with it; logbook's own text gets
// no buttons; a value that is no rating, or a reply the session does not have, records nothing.
func TestAClickDeliveredTwiceIsOneEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	sess, err := store.Open(ctx, session.ThreadKey{Team: "T0000001", Channel: "C0000001", ThreadTS: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	evs, err := store.Append(ctx, sess.ID, session.NewEvent{Type: session.TypeAssistantMessage, Actor: session.Actor{Kind: session.ActorBot, ID: "UB000001"},
		Payload: session.AssistantMessage{Text: "the answer", Usage: &session.Usage{Provider: "anthropic", Model: "claude-x"}}})
	if err != nil {
		t.Fatal(err)
	}
	if feedback.Buttons(sess, evs[0], session.AssistantMessage{Text: "muted", Own: true}) != nil {
		t.Fatal("logbook's own text got feedback buttons")
	}
	b := feedback.Buttons(sess, evs[0], session.AssistantMessage{Text: "the answer"})
	s := &feedback.Surface{Store: store, Log: zerolog.Nop()}
	for range 2 {
		if !s.Interaction(ctx, click(b, sess, "U0000001", session.FeedbackPositive, "1700000002.000001")) {
			t.Fatal("the surface did not claim its own button")
		}
	}
	// Not ours or not valid: claimed (the button is the surface's) but never recorded.
	s.Interaction(ctx, click(b, sess, "U0000001", "meh", "1700000002.000002"))
	other := slack.NewContextActionsBlock("logbook_feedback " + sess.ID.String() + " 0190f0a0-0000-7000-8000-000000000000")
	s.Interaction(ctx, click(other, sess, "U0000001", session.FeedbackNegative, "1700000002.000003"))
	if s.Interaction(ctx, slack.InteractionCallback{Type: slack.InteractionTypeMessageAction, CallbackID: "open_transcript"}) {
		t.Fatal("the feedback surface claimed a shortcut")
	}
	got, err := store.Events(ctx, sess.ID, session.Range{Types: []session.Type{session.TypeFeedback}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d feedback events, want 1: %+v", len(got), got)
	}
	var f session.Feedback
	if err := got[0].Decode(&f); err != nil {
		t.Fatal(err)
	}
	if f.Model != "claude-x" || f.Rating != session.FeedbackPositive || f.Reply != evs[0].ID.String() {
		t.Fatalf("recorded %+v", f)
	}
}
