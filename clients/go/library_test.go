package slidingwindow

import (
	"os"
	"path/filepath"
	"testing"
)

// The committed copy is byte-identical to the repository's lua/slidingwindow.lua.
func TestLibraryCopyIsIdentical(t *testing.T) {
	root := os.Getenv("SLIDINGWINDOW_REPO")
	if root == "" {
		root = filepath.Join("..", "..")
	}
	want, err := os.ReadFile(filepath.Join(root, "lua", "slidingwindow.lua"))
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != LibraryCode {
		t.Fatalf("clients/go/slidingwindow.lua differs from lua/slidingwindow.lua: cp lua/slidingwindow.lua clients/go/")
	}
	if LibraryVersion() == "" || len(LibrarySHA()) != 40 {
		t.Fatalf("version %q sha %q", LibraryVersion(), LibrarySHA())
	}
}
