package main

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestReconcileSmoke runs the reconcile scenario with 20000 keys against a
// real master process: re-registration and the three reconciles must leave
// the master and the SSD as expected (the scenario checks the replicas
// dropped and the strays removed, and fails otherwise), and nothing is
// left running.
func TestReconcileSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs tierstore-master")
	}
	_, _, rep := runQuick(t, "reconcile", "--keys", "20000")
	rows := rep.Results[0].Tables[0].Rows
	if len(rows) != 4 {
		t.Fatalf("%d steps, want 4: %v", len(rows), rows)
	}
	if sent := rows[1][4].(float64); sent != 0 {
		t.Errorf("a reconcile with nothing changed sent %v keys", sent)
	}
	if sent := rows[2][4].(float64); sent == 0 || sent >= 20000 {
		t.Errorf("a reconcile with 100 keys drifted sent %v keys of 20000", sent)
	}
}

// TestProcThreadsCountsThreads: procThreads sums the CPU time and the
// context switches of this process's live threads: more than none, no more
// than getrusage's count of every thread taken after it; a process that
// does not exist is an error.
func TestProcThreadsCountsThreads(t *testing.T) {
	cpu, n, err := procThreads(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	if n <= 0 || n > ru.Nvcsw+ru.Nivcsw {
		t.Fatalf("procThreads switches = %d, getrusage after it %d", n, ru.Nvcsw+ru.Nivcsw)
	}
	if all := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()); cpu <= 0 || cpu > all+10*time.Millisecond {
		t.Fatalf("procThreads CPU = %v, getrusage after it %v", cpu, all)
	}
	if _, _, err := procThreads(-1); err == nil {
		t.Fatal("no error for pid -1")
	}
}
