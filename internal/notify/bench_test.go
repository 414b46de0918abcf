package notify

import (
	"fmt"
	"log/slog"
	"testing"
	"time"
)

// BenchmarkNotify is what a strike, a manual lockout or an unlock pays on
// the decision path: the settings check and the enqueue (no spooler runs,
// so nothing is dropped or written).
func BenchmarkNotify(b *testing.B) {
	n := &Notifier{log: slog.New(slog.DiscardHandler), cfg: Config{Now: time.Now}, in: make(chan *pending, b.N+1)}
	n.setSettings(Settings{WebhookURL: memURL, Secret: testSecret})
	e := sampleEvent("01JDA0000000000000000000M1")
	b.ReportAllocs()
	for b.Loop() {
		n.Notify(e)
	}
}

// BenchmarkNotifyOff is Notify for an event the settings do not send.
func BenchmarkNotifyOff(b *testing.B) {
	n := &Notifier{log: slog.New(slog.DiscardHandler), cfg: Config{Now: time.Now}}
	n.setSettings(Settings{})
	e := sampleEvent("01JDA0000000000000000000M2")
	b.ReportAllocs()
	for b.Loop() {
		n.Notify(e)
	}
}

// BenchmarkSpoolWriteRemove is the disk cost of one notification: its file
// written and fsync'd (and the directory), then removed after delivery.
func BenchmarkSpoolWriteRemove(b *testing.B) {
	sp, err := openSpool(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	p := &pending{ev: sampleEvent("01JDA0000000000000000000M3"), enqueued: time.Now()}
	b.ReportAllocs()
	for b.Loop() {
		if err := sp.writeBatch([]*pending{p})[0]; err != nil {
			b.Fatal(err)
		}
		if err := sp.remove(p.ev.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSpoolBatch64 is the disk cost of a burst: notifications
// written 64 to a batch (ns/op is per notification).
func BenchmarkSpoolBatch64(b *testing.B) {
	sp, err := openSpool(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]*pending, 64)
	for i := range batch {
		batch[i] = &pending{ev: sampleEvent(fmt.Sprintf("01JDA00000000000000000%04d", i)), enqueued: time.Now()}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += len(batch) {
		for _, err := range sp.writeBatch(batch) {
			if err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		for _, p := range batch {
			_ = sp.remove(p.ev.ID)
		}
		b.StartTimer()
	}
}
