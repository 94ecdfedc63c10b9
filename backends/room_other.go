//go:build !linux

package backends

// addressRoom is known on Linux only.
func addressRoom() (int64, bool) { return 0, false }
