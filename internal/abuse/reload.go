package abuse

import (
	"log/slog"

	"github.com/guardhq/guard/internal/audit"
)

// ActionReload is the action of the admin audit event a config reload
// records.
const ActionReload = "reload"

// Reconfigure returns a new Guard for cfg over the same limits store,
// audit recorder and event lookup as g; g itself is unchanged, so requests
// already using it finish on its policy. With the same key secret and key
// prefix (a reload keeps both: they name every key in the store) the new
// Guard also shares g's record of recent strikes, so lockout listings keep
// naming the identifiers behind them. Errors are New's.
func (g *Guard) Reconfigure(logger *slog.Logger, cfg Config) (*Guard, error) {
	n, err := New(logger, cfg, g.store, g.rec, g.lookup)
	if err != nil {
		return nil, err
	}
	probe := identity{user: "guard:reload-probe", hasUser: true}
	if n.keys.key("p", &probe, dimUser) == g.keys.key("p", &probe, dimUser) {
		n.strikes = g.strikes
	}
	return n, nil
}

// RecordReload records the admin audit event of a config reload (action
// ActionReload, no API key: the operator's signal made it) with note
// saying what changed.
func (g *Guard) RecordReload(note string) {
	now := g.nowMs()
	g.rec.Record(audit.Event{
		ID:       newID(now),
		At:       now,
		Kind:     audit.KindAdmin,
		Action:   ActionReload,
		Instance: g.cfg.Instance,
		Note:     note,
	})
}
