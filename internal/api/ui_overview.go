package api

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
)

// overviewWindows are the overview's choices of how far back it looks.
var overviewWindows = []string{"1h", "3h", "6h", "12h", "24h"}

type topList struct {
	Title, Field string
	Rows         []topRow
}

type topRow struct {
	Value string
	Count int64
	URL   string
}

type legendItem struct {
	Key, Color string
	Count      int64
	URL        string
}

type overviewPage struct {
	Window, Since    string
	Windows          []string
	Chart            template.HTML
	YLabels, XLabels []string
	Legend           []legendItem
	Checks, Denied   int64
	DenyRate         string
	Tops             []topList
	Lockouts         []uiLockout
	LockoutCount     int
	LockoutMore      bool
	Readiness        Readiness
	HasStats         bool
	StatsError       string
	Now              time.Time
	DeniedEventsURL  string
	LockoutsURL      string
}

// handleUIOverview renders the overview: decisions per minute by decision
// and reason (an SVG drawn here, no script), the most denied IPs, users and
// devices, the active lockouts, the mode and the audit backlog.
func (s *server) handleUIOverview(c *gin.Context) {
	q, err := uiParams(c, "window")
	if err != nil {
		s.uiFail(c, err)
		return
	}
	now := s.now().UTC()
	p := overviewPage{Window: "3h", Windows: overviewWindows, Now: now, LockoutsURL: "/ui/lockouts"}
	if v := q["window"]; v != nil && *v != "" {
		ok := false
		for _, w := range overviewWindows {
			ok = ok || w == *v
		}
		if !ok {
			s.uiFail(c, badRequest("window", "window must be one of "+strings.Join(overviewWindows, ", ")))
			return
		}
		p.Window = *v
	}
	win, _ := time.ParseDuration(p.Window)
	until := now.Truncate(time.Minute).Add(time.Minute)
	since := until.Add(-win)
	p.Since = since.Format(time.RFC3339)
	ctx := c.Request.Context()
	p.Readiness = s.deps.Readiness(ctx)
	if rv, ok := s.review(); ok {
		o, err := rv.Overview(ctx, audit.OverviewQuery{Since: since, Until: until, Bucket: time.Minute, Top: 10})
		if err != nil {
			loggerFrom(c).Warn("audit overview failed", "err", err)
			p.StatsError = "The audit store did not answer: " + classify(dependency(err)).Message
		} else {
			p.HasStats = true
			s.fillOverview(&p, o)
		}
	}
	lp, err := s.deps.Guard.Lockouts(ctx, abuse.LockoutFilter{Limit: abuse.MaxLockoutLimit})
	if err != nil {
		loggerFrom(c).Warn("overview lockouts failed", "err", err)
	} else {
		p.LockoutCount, p.LockoutMore = len(lp.Lockouts), lp.Next != ""
		for i, l := range lp.Lockouts {
			if i == 5 {
				break
			}
			p.Lockouts = append(p.Lockouts, uiLockout{ActiveLockout: l, User: derefStr(l.User), IP: derefStr(l.IP), Device: derefStr(l.Device)})
		}
	}
	s.renderPage(c, http.StatusOK, s.ui.overview, "Overview", p)
}

// seriesColors are fixed per decision and reason, so a colour means the
// same on every day; other keys take the fallback palette in order.
var seriesColors = map[string]string{
	"allow/ok": "#2f855a", "allow/allowlisted": "#38a3a5", "allow/shadow": "#d69e2e",
	"allow/store_unavailable": "#a0aec0", "deny/rate_limited": "#dd6b20", "deny/locked_out": "#c53030",
	"deny/denylisted": "#6b46c1", "deny/store_unavailable": "#4a5568", "challenge/challenge_required": "#3182ce",
}

var fallbackColors = []string{"#805ad5", "#b83280", "#2c7a7b", "#975a16", "#2b6cb0", "#718096"}

func (s *server) fillOverview(p *overviewPage, o audit.Overview) {
	totals := map[string]int64{}
	for _, sc := range o.Series {
		k := sc.Decision + "/" + sc.Reason
		totals[k] += sc.Count
		p.Checks += sc.Count
		if sc.Decision == "deny" {
			p.Denied += sc.Count
		}
	}
	keys := make([]string, 0, len(totals))
	for k := range totals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	colors := map[string]string{}
	fb := 0
	for _, k := range keys {
		col, ok := seriesColors[k]
		if !ok {
			col = fallbackColors[fb%len(fallbackColors)]
			fb++
		}
		colors[k] = col
		dec, reason, _ := strings.Cut(k, "/")
		v := url.Values{"kind": {"check"}, "decision": {dec}, "reason": {reason}, "since": {p.Window}}
		p.Legend = append(p.Legend, legendItem{Key: k, Color: col, Count: totals[k], URL: "/ui/events?" + v.Encode()})
	}
	if p.Checks > 0 {
		p.DenyRate = fmt.Sprintf("%.1f%%", 100*float64(p.Denied)/float64(p.Checks))
	}
	p.Chart, p.YLabels, p.XLabels = decisionChart(o, keys, colors)
	dv := url.Values{"kind": {"check"}, "decision": {"deny"}, "since": {p.Window}}
	p.DeniedEventsURL = "/ui/events?" + dv.Encode()
	for _, t := range []struct {
		title, field string
		rows         []audit.TopCount
	}{{"Top denied IPs", "ip", o.TopIPs}, {"Top denied users", "user", o.TopUsers}, {"Top denied devices", "device", o.TopDevices},
		{"Top denied phones", "phone", o.TopPhones}} {
		tl := topList{Title: t.title, Field: t.field}
		for _, r := range t.rows {
			v := url.Values{"kind": {"check"}, "decision": {"deny"}, "since": {p.Window}, s.storedParam(t.field): {r.Value}}
			tl.Rows = append(tl.Rows, topRow{Value: r.Value, Count: r.Count, URL: "/ui/events?" + v.Encode()})
		}
		p.Tops = append(p.Tops, tl)
	}
}

// storedParam is the events filter parameter that matches field's value
// as audit events store it (see parseUITemplates).
func (s *server) storedParam(field string) string {
	if s.exact {
		return field + "_exact"
	}
	return field
}

// decisionChart draws the stacked per-minute counts as an SVG that
// stretches to its container (viewBox, preserveAspectRatio none), with the
// axis labels returned apart (top to bottom, left to right) so the page
// sets them as text that stays legible at any width. Colours are
// presentation attributes, not style, so the strict CSP allows them; each
// bar segment has a <title> tooltip with its minute, key and count.
func decisionChart(o audit.Overview, keys []string, colors map[string]string) (template.HTML, []string, []string) {
	const w, h = 960.0, 200.0
	n := int(o.Until.Sub(o.Since) / o.Bucket)
	if n <= 0 {
		return "", nil, nil
	}
	per := make([]map[string]int64, n)
	totals := make([]int64, n)
	for _, sc := range o.Series {
		i := int(sc.Start.Sub(o.Since) / o.Bucket)
		if i < 0 || i >= n {
			continue
		}
		if per[i] == nil {
			per[i] = map[string]int64{}
		}
		per[i][sc.Decision+"/"+sc.Reason] += sc.Count
		totals[i] += sc.Count
	}
	var max int64 = 1
	for _, t := range totals {
		if t > max {
			max = t
		}
	}
	max = niceCeil(max)
	bw := w / float64(n)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" preserveAspectRatio="none" role="img" aria-label="Decisions per minute by decision and reason" xmlns="http://www.w3.org/2000/svg">`, w, h)
	for _, frac := range []float64{0, 0.5, 1} {
		y := h * (1 - frac)
		fmt.Fprintf(&b, `<line x1="0" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#d0d7de" stroke-width="1" vector-effect="non-scaling-stroke"/>`, y, w, y)
	}
	for i := 0; i < n; i++ {
		if totals[i] == 0 {
			continue
		}
		x := float64(i) * bw
		y := h
		at := o.Since.Add(time.Duration(i) * o.Bucket).UTC().Format("15:04")
		for _, k := range keys {
			cnt := per[i][k]
			if cnt == 0 {
				continue
			}
			hh := h * float64(cnt) / float64(max)
			y -= hh
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"><title>%s %s: %d</title></rect>`,
				x, y, max64(bw*0.85, 0.3), hh, colors[k], at, template.HTMLEscapeString(k), cnt)
		}
	}
	b.WriteString(`</svg>`)
	ylabels := []string{fmt.Sprint(max), fmt.Sprint(max / 2), "0"}
	var xlabels []string
	const ticks = 6
	for t := 0; t <= ticks; t++ {
		xlabels = append(xlabels, o.Since.Add(time.Duration(n*t/ticks)*o.Bucket).UTC().Format("15:04"))
	}
	return template.HTML(b.String()), ylabels, xlabels
}

func max64(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

// niceCeil rounds n up to 1, 2 or 5 times a power of ten.
func niceCeil(n int64) int64 {
	p := int64(1)
	for {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
		p *= 10
	}
}
