package backends

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// addressRoom is the address space left under RLIMIT_AS (ulimit -v): its
// limit less the process's VmSize; ok is false when there is no limit.
func addressRoom() (int64, bool) {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_AS, &lim) != nil || lim.Cur > 1<<62 { // RLIM_INFINITY is all ones
		return 0, false
	}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmSize:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, false
			}
			return max(int64(lim.Cur)-kb<<10, 0), true
		}
	}
	return 0, false
}
