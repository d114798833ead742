package master

import (
	"os"
	"sort"
	"strconv"

	"github.com/tierstore/tierstore/admission"
)

// EXPERIMENT (not for commit).
var expFreqSample, _ = strconv.Atoi(os.Getenv("TIERSTORE_EXP_FREQ"))
var expColdFirst = os.Getenv("TIERSTORE_EXP_COLDFIRST") != ""
var expLeCaR = os.Getenv("TIERSTORE_EXP_LECAR") != ""

func init() {
	if v, err := strconv.ParseFloat(os.Getenv("TIERSTORE_EXP_FIXED"), 64); err == nil {
		admission.ExpFixedFreq = v
	}
}

func (s *Service) expRerank(cands []victim, target int) []victim {
	if expLeCaR && expFreqSample > 0 {
		if ch, ok := s.policy.(interface {
			ChooseVictims([]string, int) []int
		}); ok {
			n := min(len(cands), expFreqSample*target)
			var out []victim
			if expColdFirst {
				for len(out) < target && len(out) < n && cands[len(out)].lastUse < 0 && !cands[len(out)].soft {
					out = append(out, cands[len(out)])
				}
			}
			rest := cands[len(out):n]
			keys := make([]string, len(rest))
			for i := range keys {
				keys[i] = rest[i].key
			}
			if len(out) < target {
				for _, j := range ch.ChooseVictims(keys, target-len(out)) {
					out = append(out, rest[j])
				}
			}
			return out
		}
	}
	e, ok := s.policy.(interface{ Estimate(string) uint32 })
	if !ok || expFreqSample <= 0 {
		return cands[:min(target, len(cands))]
	}
	n := min(len(cands), expFreqSample*target)
	c := append([]victim(nil), cands[:n]...)
	est := make(map[string]uint32, n)
	for _, v := range c {
		est[v.key] = e.Estimate(v.key)
	}
	sort.SliceStable(c, func(i, j int) bool {
		a, b := c[i], c[j]
		if a.soft != b.soft {
			return !a.soft
		}
		if expColdFirst && (a.lastUse < 0) != (b.lastUse < 0) {
			return a.lastUse < 0
		}
		if est[a.key] != est[b.key] {
			return est[a.key] < est[b.key]
		}
		return a.lastUse < b.lastUse
	})
	return c[:min(target, len(c))]
}
