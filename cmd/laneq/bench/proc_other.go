//go:build !linux

package bench

import "os/exec"

// setWorkerAttrs: only Linux can tie a child's life to its parent's; on
// other systems an interrupted run's workers exit when their database
// goes away or on SIGTERM.
func setWorkerAttrs(*exec.Cmd) {}
