package config

import "syscall"

// noDirsFS names the kernel file system p is on when it is one where
// directories and files cannot be made whatever the permissions say: root
// passes access(2) on /proc, yet mkdir /proc/guard-spool fails.
func noDirsFS(p string) string {
	var st syscall.Statfs_t
	if syscall.Statfs(p, &st) != nil {
		return ""
	}
	switch int64(st.Type) {
	case 0x9fa0: // PROC_SUPER_MAGIC
		return "procfs"
	case 0x62656572: // SYSFS_MAGIC
		return "sysfs"
	}
	return ""
}
