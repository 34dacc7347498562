// Command bench is the Go app of the client benchmark: bench/harness (make bench-go)
// starts it as `bench <variant> <redis addr> <limit> <window s>`; it prints "PORT n" and
// serves GET / behind the variant's limiter, keyed by the X-Id header (apps.go).
package main

import (
	"fmt"
	"os"
	"strconv"
)

func main() {
	a := os.Args[1:]
	if len(a) < 4 {
		fmt.Fprintln(os.Stderr, "bench <variant> <redis addr> <limit> <window s>")
		os.Exit(2)
	}
	limit, err1 := strconv.Atoi(a[2])
	window, err2 := strconv.Atoi(a[3])
	if err1 != nil || err2 != nil {
		fmt.Fprintf(os.Stderr, "limit and window are integers: %q %q\n", a[2], a[3])
		os.Exit(2)
	}
	if err := serve(a[0], a[1], limit, window); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}
