package client

import (
	"context"
	"fmt"

	"github.com/tierstore/tierstore/internal/errcode"
	"github.com/tierstore/tierstore/masterapi"
)

// Prefetch asks the master to bring keys whose only readable copies are on
// SSD into DRAM ahead of a read (issue 24 item 4): each is queued for
// promotion on the node of its SSD copy, admitted by the admission
// policy's frequency test (tinylfu with dram_promotion_min_freq) and
// bounded by the master's prefetch_budget; it never evicts an object hotter
// than the one it brings in. It returns how many keys were queued. Missing
// keys, keys in DRAM already and keys the policy or the budget refuse are
// not errors; a malformed key is (ErrInvalidKey, nothing queued). The
// promotion runs in the background: a Get right after Prefetch may still
// read from SSD. A lookup (Exists, BatchExists) of an SSD-only object
// prefetches it as well.
func (c *Client) Prefetch(ctx context.Context, keys []string) (int, error) {
	for _, k := range keys {
		if err := c.check(k); err != nil {
			return 0, err
		}
	}
	p, ok := c.m.(masterapi.Prefetcher)
	if !ok {
		return 0, errcode.Errorf(errcode.UnableOffload, "client: prefetch: the master connection (%T) has no Prefetch", c.m)
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	n, err := p.Prefetch(ctx, keys)
	if err != nil {
		return 0, fmt.Errorf("client: prefetch of %d keys: %w", len(keys), err)
	}
	return n, nil
}
