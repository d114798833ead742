package eviction

import "testing"

// benchBuckets is the number of buckets tracked: 256 MiB buckets on a
// 2.5 TiB SSD make ~10,000.
const benchBuckets = 10000

func filled(b *testing.B, name string) Policy {
	p, err := New(name)
	if err != nil {
		b.Fatal(err)
	}
	for id := uint64(0); id < benchBuckets; id++ {
		p.Add(id, 256<<20)
		if id%3 == 0 {
			p.Touch(id)
			p.Touch(id)
		}
	}
	return p
}

func BenchmarkTouch(b *testing.B) {
	for _, name := range Names {
		b.Run(name, func(b *testing.B) {
			p := filled(b, name)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				p.Touch(uint64(i*7919) % benchBuckets)
			}
		})
	}
}

// BenchmarkVictims asks for 10% of the tracked bytes (one eviction round
// from a 90% high watermark to an 80% low one), skipping every 16th bucket.
func BenchmarkVictims(b *testing.B) {
	for _, name := range Names {
		b.Run(name, func(b *testing.B) {
			p := filled(b, name)
			need := p.Size() / 10
			skip := func(id uint64) bool { return id%16 == 0 }
			b.ReportAllocs()
			for b.Loop() {
				if len(p.Victims(need, skip)) == 0 {
					b.Fatal("no victims")
				}
			}
		})
	}
}

// BenchmarkAddRemove is the steady state: a new bucket in, the oldest out.
func BenchmarkAddRemove(b *testing.B) {
	for _, name := range Names {
		b.Run(name, func(b *testing.B) {
			p := filled(b, name)
			next := uint64(benchBuckets)
			b.ReportAllocs()
			for b.Loop() {
				p.Add(next, 256<<20)
				next++
				v := p.Victims(1, nil)
				p.Remove(v[0])
			}
		})
	}
}
