package sandbox

import (
	"bufio"
	"bytes"
	"path/filepath"
	"strings"
)

// shownInMountinfo returns the path a bind mount of dir shows in /proc/self/mountinfo (its
// "root" field: dir's path inside the file system holding it), given the host's mountinfo.
// "/" means dir is a file system's root, and a sandbox bound below it sees only its own name;
// anything longer is the host's layout, which every process in a bwrap sandbox can read.
func shownInMountinfo(mountinfo []byte, dir string) string {
	dir = filepath.Clean(dir)
	best, shown := -1, dir
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// id parent major:minor root mount-point options [optional...] - fstype source super-options
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		root, mount := unescapeMountinfo(f[3]), unescapeMountinfo(f[4])
		rel, err := filepath.Rel(mount, dir)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		// The longest mount point holding dir wins; of equal ones, the last (mounted over).
		if len(mount) >= best {
			best, shown = len(mount), filepath.Join(root, rel)
		}
	}
	return shown
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space, \011, \012, \134).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
