package master

import (
	"context"
)

// Touch implements masterapi.Toucher: each key a client read from its
// replica-location cache, without a lookup, counts as a demand lookup of
// the object would for its recency (lastUse, the DRAM eviction order) and
// the admission policy (observeLookup, countLookup), once per call and
// key. No lease is granted or extended: the client read inside the lease
// of its cached answer. A key whose object is missing, or no longer
// readable in DRAM (a compact record: its DRAM copy is gone), is skipped.
func (s *Service) Touch(ctx context.Context, keys []string) error {
	if err := s.gate(ctx); err != nil {
		return err
	}
	for _, k := range keys {
		if err := validKey(k); err != nil {
			return s.observe(err)
		}
	}
	now := s.now()
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		sh := s.shardOf(k)
		sh.mu.Lock()
		if o, _ := s.lookup(sh, k); o != nil && o.readableDRAM() {
			o.lastUse = max(o.lastUse, now)
			if s.countLookups {
				s.observeLookup(k, o, true, false)
				s.countLookup(k, o)
			}
			s.cnt.touched.Add(1)
		}
		sh.mu.Unlock()
	}
	return nil
}
