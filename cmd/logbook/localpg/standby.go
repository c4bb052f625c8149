package localpg

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strconv"
)

// StandbyPort names a standby's socket file (.s.PGSQL.5434) in its own directory: its own
// port, beside its primary's 5433.
const StandbyPort = 5434

// StartStandby starts (or adopts) a streaming hot standby of primary in opts.Dir, listening on
// its own port (StandbyPort, a unix socket in opts.Dir only), and returns when it accepts
// connections. The first time, the cluster is copied from the running primary with
// `pg_basebackup -R -X stream` (PostgreSQL's own replication: the copy's configuration streams
// the primary's WAL over its socket and replays it); the primary's defaults allow that
// (wal_level replica, max_wal_senders 10, trusted local replication connections). The URL
// names opts.Database (default "logbook") as it is on the primary: a standby creates nothing.
// Errors as Start's. Stop it as any Server.
func StartStandby(ctx context.Context, primary *Server, opts Options) (*Server, error) {
	root := os.Geteuid() == 0
	dir, err := resolveDir(opts.Dir, root)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, port: StandbyPort, log: opts.Log, bin: primary.bin}
	if s.log == nil {
		s.log = primary.log
	}
	major, err := clusterMajor(s.dataDir())
	if err != nil {
		return nil, err
	}
	if major != 0 && major != s.bin.major {
		return nil, fmt.Errorf("standby cluster in %s is PostgreSQL %d, its primary %d", s.dataDir(), major, s.bin.major)
	}
	if err := s.takeDir(ctx, root, opts.User); err != nil {
		return nil, err
	}
	if major == 0 {
		fmt.Fprintf(s.log, "copying the PostgreSQL %d cluster of %s into %s (pg_basebackup)\n", s.bin.major, primary.dir, s.dataDir())
		scratch := s.dataDir() + ".basebackup"
		if err := os.RemoveAll(scratch); err != nil {
			s.lock.Close()
			return nil, fmt.Errorf("remove the remains of an interrupted pg_basebackup: %w", err)
		}
		if out, err := s.run(ctx, s.bin.tool("pg_basebackup"), "-D", scratch, "-R", "-X", "stream", "-c", "fast",
			"-h", primary.dir, "-p", strconv.Itoa(primary.socketPort()), "-U", superuser); err != nil {
			os.RemoveAll(scratch)
			s.lock.Close()
			return nil, fmt.Errorf("pg_basebackup into %s: %w\n%s", scratch, err, tail(out, 20))
		}
		if err := os.Rename(scratch, s.dataDir()); err != nil {
			s.lock.Close()
			return nil, fmt.Errorf("move the standby's cluster into place: %w", err)
		}
	}
	if err := s.launch(ctx); err != nil {
		s.lock.Close()
		return nil, err
	}
	s.url = socketURL(s.dir, s.socketPort(), cmp.Or(opts.Database, "logbook"))
	return s, nil
}
