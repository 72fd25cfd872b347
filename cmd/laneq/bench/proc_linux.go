package bench

import (
	"os/exec"
	"syscall"
)

// setWorkerAttrs makes the kernel kill a worker whose coordinator died, so
// an interrupted run leaves no workers behind.
func setWorkerAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
