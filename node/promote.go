package node

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/tierstore/tierstore/internal/crc32c"
	"github.com/tierstore/tierstore/masterapi"
)

// Promotion loading (issue 24 item 4). The promotion tasks of a heartbeat
// reply are loaded from the tier promoteParallel at a time, alongside the
// round's offload (whose victims may be what makes room for the next
// promotions), and answered in groups as they complete: a PromoteEnd
// carries whatever finished since the previous one, so the first objects
// are readable from DRAM while the last are still being read. The round
// returns once every one of them is answered (OffloadNow's contract).
//
// A read of a key's SSD copy (openSSD) while its promotion is under way on
// this node does not read the SSD a second time: it takes the promotion's
// bytes. A load already started is waited for (it began earlier than a
// new read would, on the same disk); a task still waiting for its turn is
// started at once by the reader, which then does not wait behind the
// other promotions. Either way the reader gets the bytes the promotion
// checked against the object's CRC32C (and checks them again as every
// receiver does); a load that failed sends the reader to the SSD.

// promoteParallel bounds the promotion loads of a node in flight at once.
const promoteParallel = 8

// promoLoad is one promotion task's load from the tier.
type promoLoad struct {
	t       masterapi.PromoteTask
	ctx     context.Context // the round's: bounds the load whoever runs it
	claimed atomic.Bool     // set by whoever runs the load (a worker or a reader)
	done    chan struct{}   // closed once v and reason are set
	v       []byte          // the value loaded and checked; nil on failure
	reason  string          // why it was not loaded ("" when v is set)
	res     masterapi.PromoteResult
}

// promoLoads is the node's registry of promotion loads under way, by key.
type promoLoads struct {
	mu    sync.Mutex // protects byKey
	byKey map[string]*promoLoad
}

func (r *promoLoads) add(p *promoLoad) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey == nil {
		r.byKey = map[string]*promoLoad{}
	}
	r.byKey[p.t.Key] = p
}

func (r *promoLoads) get(key string) *promoLoad {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byKey[key]
}

// remove forgets p (not a newer load of the same key).
func (r *promoLoads) remove(p *promoLoad) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey[p.t.Key] == p {
		delete(r.byKey, p.t.Key)
	}
}

// tryRun loads p's object from n's tier and checks it against the task,
// unless someone else claimed the load first (false: then wait on done).
func (p *promoLoad) tryRun(n *Node) bool {
	if !p.claimed.CompareAndSwap(false, true) {
		return false
	}
	defer close(p.done)
	t := p.t
	if t.Length != t.Size || t.Size <= 0 {
		p.reason = "promotion range length differs from the object size"
		return true
	}
	lr := n.tier.Load(p.ctx, [][]byte{[]byte(t.Key)})
	if len(lr) != 1 || lr[0].Err != nil {
		p.reason = "not on SSD"
		if len(lr) == 1 {
			p.reason += ": " + lr[0].Err.Error()
		}
		return true
	}
	v := lr[0].Value
	if int64(len(v)) != t.Size || crc32c.Checksum(v) != t.CRC {
		p.reason = "the SSD copy has other bytes than the object"
		return true
	}
	p.v = v
	return true
}

// joinPromotion returns key's value from a promotion load under way on
// this node (running the load now if it waits for its turn), or false
// when there is none, it failed, or ctx ended first.
func (n *Node) joinPromotion(ctx context.Context, key []byte) ([]byte, bool) {
	p := n.promoting.get(string(key))
	if p == nil {
		return nil, false
	}
	if !p.tryRun(n) {
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, false
		}
	}
	if p.v == nil {
		return nil, false
	}
	n.metrics.promotionReadsJoined.Add(1)
	return p.v, true
}

// startPromotions starts loading tasks (promoteParallel at a time, oldest
// first) and answering them in groups as they complete; wait returns once
// every one is answered. ctx bounds the loads and the answers.
func (n *Node) startPromotions(ctx context.Context, tasks []masterapi.PromoteTask) (wait func()) {
	if len(tasks) == 0 {
		return func() {}
	}
	todo := make(chan *promoLoad, len(tasks))
	for _, t := range tasks {
		p := &promoLoad{t: t, ctx: ctx, done: make(chan struct{})}
		n.promoting.add(p)
		todo <- p
	}
	close(todo)
	finished := make(chan *promoLoad, len(tasks))
	var workers sync.WaitGroup
	for range min(promoteParallel, len(tasks)) {
		workers.Go(func() {
			for p := range todo {
				n.promoteOne(p)
				finished <- p
			}
		})
	}
	go func() {
		workers.Wait()
		close(finished)
	}()
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		for p := range finished {
			group := []*promoLoad{p}
		drain:
			for {
				select {
				case q, ok := <-finished:
					if !ok {
						break drain
					}
					group = append(group, q)
				default:
					break drain
				}
			}
			n.answerPromotions(ctx, group)
		}
	}()
	return func() { <-answered }
}
