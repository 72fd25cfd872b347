package tidbenv

import (
	"os/exec"
	"syscall"
)

// setChildAttrs makes the kernel kill tidb-server when the process that
// started it dies, so an interrupted test binary leaves no server behind.
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
