//go:build !linux

package tidbenv

import "os/exec"

// setChildAttrs has no parent-death signal outside Linux; Close stops the server.
func setChildAttrs(cmd *exec.Cmd) {}
