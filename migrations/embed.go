// Package migrations holds Guard's Postgres schema as numbered golang-migrate
// up/down pairs, embedded so that `guard migrate` needs no files on disk.
package migrations

import "embed"

// FS holds every NNNNNN_name.up.sql / .down.sql file of this directory; use
// it with golang-migrate's iofs source at the root path ".".
//
//go:embed *.sql
var FS embed.FS
