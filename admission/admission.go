package admission

import "fmt"

// Object is the master's view of one object, passed to a Policy.
type Object struct {
	Key    string
	Size   int64
	InDRAM bool   // has a complete Memory replica
	OnDisk bool   // has a LocalDisk replica
	Queued bool   // an offload task is queued or in flight
	Reads  uint32 // demand lookups counted so far; OnLookup may advance it
}

// Policy decides when an object is queued for offload.
type Policy interface {
	// Name is the policy's name for logs and metrics.
	Name() string
	// AtPutEnd: queue o when its put completes?
	AtPutEnd(o Object) bool
	// WantsLookups reports whether OnLookup can ever answer true; the master
	// skips the per-batch bookkeeping of lookups when it cannot.
	WantsLookups() bool
	// OnLookup records one demand lookup of o (the master has already
	// removed duplicates within a batch and lookups by the offload path) and
	// says whether to queue o now. It may advance o.Reads.
	OnLookup(o *Object) bool
	// OnEvict: DRAM eviction picked o (which has no LocalDisk replica);
	// offload it instead of dropping it?
	OnEvict(o Object) bool
}

func eligible(o Object) bool { return o.InDRAM && !o.OnDisk && !o.Queued }

// Eager queues every object at PutEnd.
type Eager struct{}

func (Eager) Name() string            { return "eager" }
func (Eager) AtPutEnd(o Object) bool  { return eligible(o) }
func (Eager) OnLookup(o *Object) bool { return false }
func (Eager) OnEvict(o Object) bool   { return false }
func (Eager) WantsLookups() bool      { return false }

// OnEvict queues an object only when DRAM eviction picks it.
type OnEvict struct{}

func (OnEvict) Name() string            { return "on-evict" }
func (OnEvict) AtPutEnd(o Object) bool  { return false }
func (OnEvict) OnLookup(o *Object) bool { return false }
func (OnEvict) OnEvict(o Object) bool   { return eligible(o) }
func (OnEvict) WantsLookups() bool      { return false }

// ReadThreshold queues a DRAM-resident object at its N-th counted demand
// lookup.
type ReadThreshold struct{ N uint32 }

func (p ReadThreshold) Name() string           { return fmt.Sprintf("read-threshold(%d)", p.N) }
func (p ReadThreshold) AtPutEnd(o Object) bool { return false }
func (p ReadThreshold) OnEvict(o Object) bool  { return false }
func (p ReadThreshold) WantsLookups() bool     { return true }

// OnLookup counts the lookup if o is eligible and answers true when the count
// reaches N.
func (p ReadThreshold) OnLookup(o *Object) bool {
	if !eligible(*o) {
		return false
	}
	if o.Reads < ^uint32(0) {
		o.Reads++
	}
	return o.Reads >= p.N
}

// None never queues anything (offload disabled).
type None struct{}

func (None) Name() string            { return "none" }
func (None) AtPutEnd(o Object) bool  { return false }
func (None) OnLookup(o *Object) bool { return false }
func (None) OnEvict(o Object) bool   { return false }
func (None) WantsLookups() bool      { return false }

// Settings are the master flags that choose a policy.
type Settings struct {
	EnableOffload  bool  // enable_offload
	OffloadOnEvict bool  // offload_on_evict
	ReadThreshold  int64 // offload_read_admission_threshold (0: off)
}

// FromSettings returns the policy the flags select: None without
// enable_offload, OnEvict with offload_on_evict, ReadThreshold with a
// threshold > 0, else Eager. A negative threshold, a threshold together with
// offload_on_evict, and either without enable_offload are refused with an
// error naming the flags.
func FromSettings(s Settings) (Policy, error) {
	if s.ReadThreshold < 0 {
		return nil, fmt.Errorf("%w: offload_read_admission_threshold must be >= 0, got %d", ErrBadConfig, s.ReadThreshold)
	}
	if s.ReadThreshold > int64(^uint32(0)) {
		return nil, fmt.Errorf("%w: offload_read_admission_threshold too large: %d", ErrBadConfig, s.ReadThreshold)
	}
	if s.ReadThreshold > 0 && s.OffloadOnEvict {
		return nil, fmt.Errorf("%w: offload_read_admission_threshold and offload_on_evict cannot be used together", ErrBadConfig)
	}
	if !s.EnableOffload {
		if s.OffloadOnEvict {
			return nil, fmt.Errorf("%w: offload_on_evict requires enable_offload", ErrBadConfig)
		}
		if s.ReadThreshold > 0 {
			return nil, fmt.Errorf("%w: offload_read_admission_threshold requires enable_offload", ErrBadConfig)
		}
		return None{}, nil
	}
	switch {
	case s.OffloadOnEvict:
		return OnEvict{}, nil
	case s.ReadThreshold > 0:
		return ReadThreshold{N: uint32(s.ReadThreshold)}, nil
	}
	return Eager{}, nil
}
