package mem_test

import (
	"testing"

	"github.com/tierstore/tierstore/backend"
	"github.com/tierstore/tierstore/backend/backendtest"
	"github.com/tierstore/tierstore/backend/mem"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, dir string) backend.Backend { return mem.New() })
}
