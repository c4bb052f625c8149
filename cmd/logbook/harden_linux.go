package main

import "golang.org/x/sys/unix"

// harden makes this process undumpable: its /proc files (environ, mem, ...) become
// root-owned, so a command run as the same user — the plain-process sandbox, or anything
// else — cannot read logbook's tokens and keys from its environment or memory.
func harden() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
