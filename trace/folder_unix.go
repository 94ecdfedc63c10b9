//go:build unix

package trace

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockFolder takes the lock file at path without waiting (flock, so a
// killed holder releases it) and returns how to let it go.
func lockFolder(path string) (func(), error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, ErrBusy
			}
			return nil, err
		}
		// The holder before us removes the file as it lets go: a lock on a
		// removed file is no lock, so take the one now at path.
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return func() {
				_ = os.Remove(path)
				f.Close()
			}, nil
		}
		f.Close()
	}
}
