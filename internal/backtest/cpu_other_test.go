//go:build !unix

package backtest

import "time"

// cpuTime is not measured off unix.
func cpuTime() time.Duration { return 0 }
