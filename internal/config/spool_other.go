//go:build !linux

package config

// noDirsFS is Linux's check of /proc and /sys; elsewhere access(2) says it
// all.
func noDirsFS(string) string { return "" }
