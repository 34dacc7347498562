package slidingwindow

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strconv"
	"strings"
)

// LibraryCode is the Functions library shipped in this module: a committed copy of the
// repository's lua/slidingwindow.lua (library_test.go proves the two identical). It is
// what FUNCTION LOAD takes.
//
//go:embed slidingwindow.lua
var LibraryCode string

// LibraryLoadCommand is what an operator runs when the application's user may not load
// the library itself.
const LibraryLoadCommand = `redis-cli FUNCTION LOAD REPLACE "$(cat lua/slidingwindow.lua)"`

var (
	libraryBody    string
	librarySHA     string
	libraryVersion string
)

func init() {
	libraryBody = LibraryCode
	if i := strings.IndexByte(LibraryCode, '\n'); i >= 0 {
		libraryBody = LibraryCode[i+1:]
	}
	sum := sha1.Sum([]byte(libraryBody))
	librarySHA = hex.EncodeToString(sum[:])
	for _, line := range strings.Split(LibraryCode, "\n") {
		if v, ok := strings.CutPrefix(line, "local VERSION = '"); ok {
			libraryVersion = strings.TrimSuffix(v, "'")
			break
		}
	}
}

// LibraryBody is what EVAL and EVALSHA take: the library without its #!lua line.
func LibraryBody() string { return libraryBody }

// LibrarySHA is the sha1 (lower-case hex) of LibraryBody, as EVALSHA names it.
func LibrarySHA() string { return librarySHA }

// LibraryVersion is the shipped library's slidingwindow_version.
func LibraryVersion() string { return libraryVersion }

func versionParts(v string) []uint64 {
	var out []uint64
	for _, p := range strings.Split(v, ".") {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}

// libraryIsOlder reports whether a loaded library's version is older than the shipped one
// (anything unreadable is older).
func libraryIsOlder(v string) bool {
	a, b := versionParts(v), versionParts(libraryVersion)
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}
