package session_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/logbook/logbook/session"
)

// wire counts what a client sends to the server: the frontend messages by type, and the Sync
// messages (each one a round trip: the client waits for ReadyForQuery).
type wire struct {
	mu    sync.Mutex
	msgs  map[byte]int
	bytes int
}

func (w *wire) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs, w.bytes = map[byte]int{}, 0
}

func (w *wire) counts() (map[byte]int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[byte]int, len(w.msgs))
	for k, v := range w.msgs {
		out[k] = v
	}
	return out, w.bytes
}

type countingConn struct {
	net.Conn
	w       *wire
	started bool // past the startup message, which has no type byte
	pending []byte
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.w.mu.Lock()
	c.pending = append(c.pending, b...)
	for {
		if !c.started {
			if len(c.pending) < 4 {
				break
			}
			n := int(uint32(c.pending[0])<<24 | uint32(c.pending[1])<<16 | uint32(c.pending[2])<<8 | uint32(c.pending[3]))
			if len(c.pending) < n {
				break
			}
			c.pending, c.started = c.pending[n:], true
			continue
		}
		if len(c.pending) < 5 {
			break
		}
		n := 1 + int(uint32(c.pending[1])<<24|uint32(c.pending[2])<<16|uint32(c.pending[3])<<8|uint32(c.pending[4]))
		if len(c.pending) < n {
			break
		}
		if c.w.msgs != nil {
			c.w.msgs[c.pending[0]]++
			c.w.bytes += n
		}
		c.pending = c.pending[n:]
	}
	c.w.mu.Unlock()
	return c.Conn.Write(b)
}

// countingPool is a pool of one connection of the application role whose frontend messages w
// counts.
func countingPool(t *testing.T, dbURL string, w *wire) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, w: w}, nil
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE logbook_app")
		return err
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	if pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// An append costs the round trips of BenchmarkLog's floor, a raw single-row INSERT: one, a
// Bind and an Execute of the prepared statement and a Sync; no Parse, no BEGIN, COMMIT, SET or
// SELECT beside it.
func TestAppendIsOneRoundTripLikeARawInsert(t *testing.T) {
	t.Parallel()
	_, dbURL := newStore(t)
	ctx := context.Background()
	if _, err := superuser(t, dbURL).Exec(ctx, `CREATE TABLE raw_events (LIKE events INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES INCLUDING CONSTRAINTS);
		GRANT SELECT, INSERT ON raw_events TO logbook_app`); err != nil {
		t.Fatal(err)
	}
	var w wire
	pool := countingPool(t, dbURL, &w)
	st := session.NewStore(pool, session.Options{})
	sess := openSession(t, st, "1700000000.000001")

	perCall := func(name string, fn func(i int) error) (map[byte]int, int) {
		t.Helper()
		if err := fn(0); err != nil { // prepares the statement
			t.Fatalf("%s: %v", name, err)
		}
		w.reset()
		const n = 20
		for i := 1; i <= n; i++ {
			if err := fn(i); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		got, bytes := w.counts()
		for k, v := range got {
			if v%n != 0 {
				t.Fatalf("%s: %d %q messages in %d calls", name, v, k, n)
			}
			got[k] = v / n
		}
		return got, bytes / n
	}
	raw, rawBytes := perCall("raw insert", func(i int) error { return rawInsert(ctx, pool, sess.ID, int64(i+1)) })
	api, apiBytes := perCall("append", func(int) error {
		_, err := st.Append(ctx, sess.ID, msg("benchmark message with a realistic length of text"))
		return err
	})
	// pgx's Exec asks for the portal's description (D) as well; the append's Query does not.
	for name, got := range map[string]map[byte]int{"raw insert": raw, "append": api} {
		for k, v := range got {
			if k != 'B' && k != 'E' && k != 'D' && k != 'S' || v != 1 {
				t.Errorf("%s sends %d %q per call, want one Bind, Execute and Sync (and at most a Describe): %v", name, v, k, printable(got))
			}
		}
		if got['S'] != 1 {
			t.Errorf("%s makes %d round trips per call, want 1: %v", name, got['S'], printable(got))
		}
	}
	t.Logf("per call: raw insert %v, %d bytes; append %v, %d bytes", printable(raw), rawBytes, printable(api), apiBytes)
}

func printable(m map[byte]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[string(k)] = v
	}
	return out
}
