package rpcpb_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/tierstore/tierstore/internal/rpcpb"
)

// TestVersionTable: docs/design.md's table of format and protocol versions
// names the versions this build speaks (a bump of MasterProtocol or
// NodeProtocol without its row fails here).
func TestVersionTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("| %d (`rpcpb.MasterProtocol`;", rpcpb.MasterProtocol),
		fmt.Sprintf("| %d (`rpcpb.NodeProtocol`)", rpcpb.NodeProtocol),
		fmt.Sprintf(`"master speaks protocol version %d, the caller version N"`, rpcpb.MasterProtocol),
	} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/design.md lacks %q", want)
		}
	}
}
