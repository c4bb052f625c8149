package part_test

import (
	"context"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/logbook/logbook/bot/part"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A cell makes each value once, closes them last made first when it ends, and makes nothing
// after: a part that asks once the cell ended gets no value it would have to close itself.
func TestCellMakesOnceAndClosesInReverse(t *testing.T) {
	t.Parallel()
	c := &part.Cell{}
	var made, closed []string
	open := func(name string) func() (any, func()) {
		return func() (any, func()) {
			made = append(made, name)
			return name, func() { closed = append(closed, name) }
		}
	}
	type keyA struct{}
	type keyB struct{}
	for range 3 {
		if v, ok := c.Value(keyA{}, open("a")); !ok || v != "a" {
			t.Fatalf("Value(a) = %v, %v", v, ok)
		}
	}
	if v, ok := c.Value(keyB{}, open("b")); !ok || v != "b" {
		t.Fatalf("Value(b) = %v, %v", v, ok)
	}
	if !slices.Equal(made, []string{"a", "b"}) {
		t.Fatalf("made %v, want a then b, once each", made)
	}
	c.Close()
	if !slices.Equal(closed, []string{"b", "a"}) {
		t.Fatalf("closed %v, want b then a", closed)
	}
	if v, ok := c.Value(keyA{}, open("late")); ok || v != nil {
		t.Fatalf("Value after Close = %v, %v; want nothing", v, ok)
	}
	c.Close() // again: nothing more to close
	if len(closed) != 2 || slices.Contains(made, "late") {
		t.Fatalf("after a second Close: made %v, closed %v", made, closed)
	}
	var none *part.Cell
	none.Close() // a cell that never began
}

// Func is a Part: its Offer is the function's.
func TestFuncIsAPart(t *testing.T) {
	t.Parallel()
	var p part.Part = part.Func(func(_ context.Context, s part.Scope) (part.Offer, error) {
		return part.Offer{Notes: []string{s.Requester}}, nil
	})
	o, err := p.Offer(context.Background(), part.Scope{Requester: "U1"})
	if err != nil || !slices.Equal(o.Notes, []string{"U1"}) {
		t.Fatalf("Offer = %+v, %v", o, err)
	}
}
