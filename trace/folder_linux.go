package trace

import "golang.org/x/sys/unix"

// exchangeDirs swaps two paths in one step (renameat2 RENAME_EXCHANGE),
// so a reader sees one folder or the other, never neither.
func exchangeDirs(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}
