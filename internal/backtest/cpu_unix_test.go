//go:build unix

package backtest

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) this process has used: on a
// shared machine the benchmarks' wall-clock rates depend on the other
// load, their CPU cost per event does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
