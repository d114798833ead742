package node

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Close drains and stops the node: the loops stop after the offload round
// in progress (which finishes and answers its tasks), the segment is
// unmounted and the node leaves at the master (which stops listing its SSD
// replicas too), the peer service stops after its in-flight calls
// (bounded), then the tier and the segment are closed.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.cancel()
		n.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := n.m.UnmountSegment(ctx, n.name, n.segName); err != nil {
			n.log.Warn("unmount at close failed", "err", err)
		}
		// Leave, so that the master stops listing the SSD replicas too at
		// once, not client_ttl later (they are re-registered when the node
		// mounts again).
		if err := n.m.LeaveNode(ctx, n.name, n.incarnation); err != nil {
			n.log.Warn("leave at close failed", "err", err)
		}
		cancel()
		if n.srv != nil {
			done := make(chan struct{})
			go func() { n.srv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				n.srv.Stop()
			}
			n.srv = nil
		}
		n.closeErr = n.release()
		n.log.Info("node stopped")
	})
	return n.closeErr
}

// release frees the tier, the listener and the segment.
func (n *Node) release() error {
	var errs []error
	if n.srv != nil {
		n.srv.Stop()
	} else if n.lis != nil {
		n.lis.Close()
	}
	if n.tier != nil {
		if err := n.tier.Close(); err != nil {
			errs = append(errs, fmt.Errorf("node: closing the SSD tier: %w", err))
		}
	}
	if n.seg != nil {
		if err := n.seg.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.unlockDir != nil {
		_ = n.unlockDir()
		n.unlockDir = nil
	}
	return errors.Join(errs...)
}
