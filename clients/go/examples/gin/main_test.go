package main

import (
	"testing"

	"github.com/redis-slidingwindow/redis-slidingwindow/clients/go/examples/internal/exampletest"
)

func TestExample(t *testing.T) { exampletest.Drive(t, run) }
