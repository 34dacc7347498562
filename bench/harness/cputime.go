package main

// An app's CPU time to the nanosecond. /proc/<pid>/stat counts it in clock ticks (10 ms):
// at 1000 req/s for 3 s that is 3.3 us per request, as coarse as the differences the
// bench compares. Each live thread's /proc/<pid>/task/<tid>/schedstat has its time on a
// CPU in ns; threads that have exited are in the process's ticks only, so their share
// (the process's ticks less the live threads' ticks) is added at tick precision.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux

// processCPU is pid's CPU time so far (0 if it cannot be read).
func processCPU(pid int) time.Duration {
	total, ok := statTicks(fmt.Sprintf("/proc/%d/stat", pid))
	if !ok {
		return 0
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	var live, liveTicks time.Duration
	for _, t := range tasks {
		ns, ok1 := schedstatNs(filepath.Join(t, "schedstat"))
		tk, ok2 := statTicks(filepath.Join(t, "stat"))
		if !ok1 || !ok2 { // exited between the listing and the read: left to the ticks
			continue
		}
		live += ns
		liveTicks += tk
	}
	if live == 0 {
		return total
	}
	return live + max(0, total-liveTicks)
}

// statTicks is utime + stime of a /proc stat file.
func statTicks(path string) (time.Duration, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return parseStatTicks(string(b))
}

func parseStatTicks(s string) (time.Duration, bool) {
	at := strings.LastIndexByte(s, ')') // the name may hold spaces and parentheses
	if at < 0 || at+2 > len(s) {
		return 0, false
	}
	// After the name: state is field 3; utime 14 and stime 15 (1-indexed).
	f := strings.Fields(s[at+2:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * tick, true
}

// schedstatNs is the first field of a schedstat file: time on a CPU, in ns.
func schedstatNs(path string) (time.Duration, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	return time.Duration(ns), err == nil
}
