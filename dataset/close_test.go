package dataset

import (
	"sync"
	"testing"
)

// TestCloseWaitsForReads: a Close while other goroutines read (a run's
// read-ahead outliving its run) waits for them instead of unmapping under
// them; every Read after it fails, none crashes.
func TestCloseWaitsForReads(t *testing.T) {
	for round := 0; round < 20; round++ {
		s, err := Open(writeShards(t, 4000, 3000))
		if err != nil {
			t.Fatal(err)
		}
		if s.files[0].data == nil {
			t.Fatal("the shards are not mapped: this test is about mappings")
		}
		rows := make([]int, 7000)
		for i := range rows {
			rows[i] = (i * 13) % 7000
		}
		var wg, reading sync.WaitGroup
		var mu sync.Mutex
		reading.Add(4)
		var after int
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				closed := false
				for i := 0; i < 200; i++ {
					got, err := s.Read(nil, rows)
					if i == 0 {
						reading.Done()
					}
					switch {
					case err != nil:
						closed = true
					case closed:
						t.Error("a Read succeeded after one failed: Close is not final")
					case got["x"].F32[3*6999+2] != wantX(rows[6999])[2]:
						t.Errorf("row %d read wrong", rows[6999])
					}
				}
				if closed {
					mu.Lock()
					after++
					mu.Unlock()
				}
			}()
		}
		reading.Wait() // every reader is in its loop
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if _, err := s.Read(nil, rows[:1]); err == nil {
			t.Fatal("Read after Close succeeded")
		}
		if round == 19 {
			t.Logf("%d of 4 readers saw the Close in the last round", after)
		}
	}
}
