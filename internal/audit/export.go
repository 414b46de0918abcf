package audit

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// CSVHeader is the header row of a CSV export: the event's JSON field names
// in the order MarshalJSON writes them. Callers must not modify it.
var CSVHeader = []string{
	"id", "at", "kind", "action", "decision", "reason", "outcome", "user",
	"ip", "device", "phone", "rule", "retry_after_ms", "lockout_until", "degraded",
	"dry_run", "api_key", "decision_id", "instance", "note",
}

// CSVRecord returns the event as one CSV row matching CSVHeader; fields that
// do not apply (JSON null) are empty. A cell that a spreadsheet would run
// as a formula (starting with =, @, tab or carriage return, or with + or -
// followed by more than digits, spaces and . ( ) + -: a user named
// "=HYPERLINK(...)" is the caller's choice, the analyst opening the export
// is not) gets a leading apostrophe, which spreadsheets hide and take as
// "this is text". Phone numbers such as "+1 (555) 123-4567" stay as they
// are: a spreadsheet reads them as a number at worst, never as a call.
// NDJSON is the export that keeps every byte.
func (e Event) CSVRecord() []string {
	r := e.csvCells()
	for i, c := range r {
		r[i] = neutralizeFormula(c)
	}
	return r
}

// neutralizeFormula prefixes an apostrophe to a cell a spreadsheet would
// evaluate (OWASP's CSV injection advice).
func neutralizeFormula(c string) string {
	if c == "" {
		return c
	}
	switch c[0] {
	case '=', '@', '\t', '\r':
		return "'" + c
	case '+', '-':
		if strings.Trim(c, "0123456789 .()+-") != "" {
			return "'" + c
		}
	}
	return c
}

func (e Event) csvCells() []string {
	r := make([]string, 0, len(CSVHeader))
	r = append(r, e.ID, formatTime(e.At), e.Kind, e.Action, e.Decision,
		e.Reason, e.Outcome, e.User, e.IP, e.Device, e.Phone, e.Rule)
	if e.RetryAfterMs != nil {
		r = append(r, strconv.FormatInt(*e.RetryAfterMs, 10))
	} else {
		r = append(r, "")
	}
	if e.LockoutUntil != nil {
		r = append(r, formatTime(*e.LockoutUntil))
	} else {
		r = append(r, "")
	}
	r = append(r, boolCell(e.Degraded), boolCell(e.DryRun), e.APIKey,
		e.DecisionID, e.Instance, e.Note)
	return r
}

func boolCell(b *bool) string {
	if b == nil {
		return ""
	}
	return strconv.FormatBool(*b)
}

// Exporter writes events one at a time in an export format; Close flushes
// what is buffered. Memory use does not grow with the number of events.
type Exporter interface {
	Write(Event) error
	Close() error
}

// Export content types accepted by NewExporter.
const (
	ContentTypeNDJSON = "application/x-ndjson"
	ContentTypeCSV    = "text/csv"
)

// NewExporter returns an NDJSON or CSV exporter for contentType
// (ContentTypeNDJSON or ContentTypeCSV), or an error for anything else.
func NewExporter(w io.Writer, contentType string) (Exporter, error) {
	switch contentType {
	case ContentTypeNDJSON:
		return NewNDJSONExporter(w), nil
	case ContentTypeCSV:
		return NewCSVExporter(w)
	default:
		return nil, fmt.Errorf("export: unsupported content type %q", contentType)
	}
}

// NDJSONExporter writes one JSON event (MarshalJSON) per line.
type NDJSONExporter struct {
	bw  *bufio.Writer
	enc *json.Encoder
}

// NewNDJSONExporter returns an exporter writing NDJSON to w.
func NewNDJSONExporter(w io.Writer) *NDJSONExporter {
	bw := bufio.NewWriterSize(w, 32<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &NDJSONExporter{bw: bw, enc: enc}
}

// Write appends e as one line.
func (x *NDJSONExporter) Write(e Event) error {
	if err := x.enc.Encode(e); err != nil {
		return fmt.Errorf("write ndjson: %w", err)
	}
	return nil
}

// Close flushes buffered lines to the underlying writer (it does not close it).
func (x *NDJSONExporter) Close() error {
	if err := x.bw.Flush(); err != nil {
		return fmt.Errorf("flush ndjson: %w", err)
	}
	return nil
}

// CSVExporter writes a CSVHeader row, then one CSVRecord row per event.
type CSVExporter struct {
	cw *csv.Writer
}

// NewCSVExporter writes the header row to w and returns the exporter.
func NewCSVExporter(w io.Writer) (*CSVExporter, error) {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return nil, fmt.Errorf("write csv header: %w", err)
	}
	return &CSVExporter{cw: cw}, nil
}

// Write appends e as one row.
func (x *CSVExporter) Write(e Event) error {
	if err := x.cw.Write(e.CSVRecord()); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

// Close flushes buffered rows to the underlying writer (it does not close it).
func (x *CSVExporter) Close() error {
	x.cw.Flush()
	if err := x.cw.Error(); err != nil {
		return fmt.Errorf("flush csv: %w", err)
	}
	return nil
}

// WriteNDJSON streams every event of s matching f to w as NDJSON, newest
// first, at constant memory; f.Limit is ignored, f.Cursor (when set)
// starts the export after it.
func WriteNDJSON(ctx context.Context, w io.Writer, s Store, f Filter) error {
	return Export(ctx, NewNDJSONExporter(w), s, f)
}

// WriteCSV streams every event of s matching f to w as CSV with a header
// row, newest first, at constant memory; f.Limit is ignored, f.Cursor
// (when set) starts the export after it.
func WriteCSV(ctx context.Context, w io.Writer, s Store, f Filter) error {
	x, err := NewCSVExporter(w)
	if err != nil {
		return err
	}
	return Export(ctx, x, s, f)
}

// Export streams every event of s matching f into x and closes x (also on
// error, so what was written reaches the client).
func Export(ctx context.Context, x Exporter, s Store, f Filter) error {
	err := s.Stream(ctx, f, x.Write)
	if cerr := x.Close(); err == nil {
		err = cerr
	}
	return err
}
