package main

import (
	"os"
	"testing"
	"time"
)

func TestParseStatTicks(t *testing.T) {
	// A name with a space and a parenthesis; utime 250, stime 50.
	line := "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 1000 10"
	got, ok := parseStatTicks(line)
	if !ok || got != 300*tick {
		t.Fatalf("got %v %v, want %v", got, ok, 300*tick)
	}
	if _, ok := parseStatTicks("42 (x"); ok {
		t.Fatal("a cut line parsed")
	}
}

// This process's CPU time grows by about the time spent spinning on a CPU.
func TestProcessCPUIsFine(t *testing.T) {
	pid := os.Getpid()
	before := processCPU(pid)
	start := time.Now()
	for time.Since(start) < 50*time.Millisecond {
	}
	spun := time.Since(start)
	after := processCPU(pid)
	d := after - before
	if d < spun/2 || d > spun*3 {
		t.Fatalf("%v of CPU over %v of spinning", d, spun)
	}
}
