package client

import (
	"fmt"
	"log/slog"

	"github.com/tierstore/tierstore/tier"
)

// openTier opens the SSD tier engine configured by cfg. Temporary: replaced
// when package tier's Open lands.
func openTier(cfg NodeConfig, onEvict tier.EvictFunc, log *slog.Logger) (SSDTier, string, error) {
	return nil, "", fmt.Errorf("%w: the SSD tier engine is not available in this build", ErrBadConfig)
}
