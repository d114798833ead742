package admission

import "fmt"

// Object is the master's view of one object, passed to a Policy.
type Object struct {
	Key    string
	Size   int64
	InDRAM bool   // has a complete DRAM replica
	OnSSD  bool   // has an SSD replica
	Queued bool   // an offload task is queued or in flight
	Reads  uint32 // demand lookups counted so far; OnLookup may advance it
	Node   string // node holding the DRAM replica ("" without one): where an offload would go
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
	// OnEvict: DRAM eviction picked o (which has no SSD replica);
	// offload it instead of dropping it?
	OnEvict(o Object) bool
}

// ColdPutter is implemented by a policy that places completed puts in the
// master's DRAM eviction order. ColdPut reports whether the object just
// put (o, as AtPutEnd saw it) should be the first DRAM eviction candidate
// (before every object read or put warm since, the newest cold put first)
// rather than the last. A loop or scan larger than DRAM+SSD then keeps a
// fixed part of itself in DRAM, as TinyLFU keeps one on SSD, instead of
// cycling DRAM like LRU; an object read while in DRAM becomes warm again.
// The master calls it once per put, after AtPutEnd, with the shard lock
// held.
type ColdPutter interface {
	ColdPut(o Object) bool
}

func eligible(o Object) bool { return o.InDRAM && !o.OnSSD && !o.Queued }

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
	// Options are the flags beyond Mooncake's three.
	Options Options
}

// Policy names accepted by offload_admission_policy.
const (
	PolicyEager         = "eager"
	PolicyOnEvict       = "on-evict"
	PolicyReadThreshold = "read-threshold"
	PolicyTinyLFU       = "tinylfu"
)

// Options are the admission flags of the master beyond Mooncake's
// enable_offload, offload_on_evict and offload_read_admission_threshold.
type Options struct {
	// Policy (offload_admission_policy): "" lets Mooncake's flags choose;
	// otherwise eager, on-evict, read-threshold or tinylfu.
	Policy string
	// SampleFactor (admission_sample_factor): tinylfu ageing period in
	// multiples of the cached object count; 0 takes the default.
	SampleFactor int64
	// Margin (admission_margin): tinylfu's margin, in accesses.
	Margin float64
	// WriteBudgetMBps (ssd_write_budget): SSD write budget per node in
	// MB/s (10^6 bytes), 0 = none. tinylfu only.
	WriteBudgetMBps float64
	// PromoteMinFreq (dram_promotion_min_freq): with tinylfu, an SSD hit
	// on an object of at least this estimated frequency asks for a DRAM
	// copy; 0 = no promotion.
	PromoteMinFreq int64
	// ColdPutMinFreq (admission_cold_put_freq): with tinylfu, a put of a
	// key whose estimated frequency, this access included, reaches N (a
	// key coming back after it left DRAM and SSD) enters DRAM as the first
	// eviction candidate instead of the last (ColdPutter); 0 = off.
	ColdPutMinFreq int64
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	c := DefaultTinyLFUConfig()
	return Options{SampleFactor: c.SampleFactor, Margin: c.Margin, ColdPutMinFreq: int64(c.ColdPutFreq)}
}

// Flags is the subset of flag.FlagSet that RegisterFlags uses.
type Flags interface {
	StringVar(p *string, name, value, usage string)
	Int64Var(p *int64, name string, value int64, usage string)
	Float64Var(p *float64, name string, value float64, usage string)
}

// RegisterFlags defines the Options flags on fs with o's current values as
// defaults.
func (o *Options) RegisterFlags(fs Flags) {
	fs.StringVar(&o.Policy, "offload_admission_policy", o.Policy,
		"SSD admission policy: eager, on-evict, read-threshold or tinylfu (\"\": chosen by offload_on_evict / offload_read_admission_threshold)")
	fs.Int64Var(&o.SampleFactor, "admission_sample_factor", o.SampleFactor,
		"tinylfu: the frequency sketch halves every N x (objects cached) accesses")
	fs.Float64Var(&o.Margin, "admission_margin", o.Margin,
		"tinylfu: accesses by which a candidate must beat the SSD bucket it displaces")
	fs.Float64Var(&o.WriteBudgetMBps, "ssd_write_budget", o.WriteBudgetMBps,
		"tinylfu: SSD write budget per node in MB/s, least frequent candidates refused first (0: none)")
	fs.Int64Var(&o.PromoteMinFreq, "dram_promotion_min_freq", o.PromoteMinFreq,
		"tinylfu: an SSD hit on an object of at least this estimated frequency (1..16) asks for a DRAM copy (0: off)")
	fs.Int64Var(&o.ColdPutMinFreq, "admission_cold_put_freq", o.ColdPutMinFreq,
		"tinylfu: a put of a key of at least this estimated frequency (a key coming back after it left DRAM and SSD) is the first DRAM eviction candidate, not the last (0: off)")
}

// FromSettings returns the policy the flags select. With
// offload_admission_policy empty: None without enable_offload, OnEvict with
// offload_on_evict, ReadThreshold with a threshold > 0, else Eager (the
// Mooncake behaviour). A named policy needs enable_offload and must agree
// with offload_on_evict and the threshold. Every invalid value or
// combination is refused with an error naming the flags.
func FromSettings(s Settings) (Policy, error) {
	if err := checkMooncake(s); err != nil {
		return nil, err
	}
	if err := s.Options.check(); err != nil {
		return nil, err
	}
	name := s.Options.Policy
	if name == "" {
		switch {
		case !s.EnableOffload:
			return None{}, nil
		case s.OffloadOnEvict:
			name = PolicyOnEvict
		case s.ReadThreshold > 0:
			name = PolicyReadThreshold
		default:
			name = PolicyEager
		}
	} else if !s.EnableOffload {
		return nil, fmt.Errorf("%w: offload_admission_policy=%s requires enable_offload", ErrBadConfig, name)
	}
	if err := s.agree(name); err != nil {
		return nil, err
	}
	switch name {
	case PolicyEager:
		return Eager{}, nil
	case PolicyOnEvict:
		return OnEvict{}, nil
	case PolicyReadThreshold:
		return ReadThreshold{N: uint32(s.ReadThreshold)}, nil
	}
	c := DefaultTinyLFUConfig()
	if s.Options.SampleFactor > 0 {
		c.SampleFactor = s.Options.SampleFactor
	}
	c.Margin = s.Options.Margin
	c.WriteBudget = s.Options.WriteBudgetMBps * 1e6
	c.PromoteFreq = uint32(s.Options.PromoteMinFreq)
	c.ColdPutFreq = uint32(s.Options.ColdPutMinFreq)
	return NewTinyLFU(c), nil
}

// checkMooncake validates Mooncake's three flags on their own.
func checkMooncake(s Settings) error {
	if s.ReadThreshold < 0 {
		return fmt.Errorf("%w: offload_read_admission_threshold must be >= 0, got %d", ErrBadConfig, s.ReadThreshold)
	}
	if s.ReadThreshold > int64(^uint32(0)) {
		return fmt.Errorf("%w: offload_read_admission_threshold too large: %d", ErrBadConfig, s.ReadThreshold)
	}
	if s.ReadThreshold > 0 && s.OffloadOnEvict {
		return fmt.Errorf("%w: offload_read_admission_threshold and offload_on_evict cannot be used together", ErrBadConfig)
	}
	if !s.EnableOffload {
		if s.OffloadOnEvict {
			return fmt.Errorf("%w: offload_on_evict requires enable_offload", ErrBadConfig)
		}
		if s.ReadThreshold > 0 {
			return fmt.Errorf("%w: offload_read_admission_threshold requires enable_offload", ErrBadConfig)
		}
	}
	return nil
}

// check validates the Options' values on their own.
func (o Options) check() error {
	switch o.Policy {
	case "", PolicyEager, PolicyOnEvict, PolicyReadThreshold, PolicyTinyLFU:
	default:
		return fmt.Errorf("%w: offload_admission_policy: %q is not one of eager, on-evict, read-threshold, tinylfu", ErrBadConfig, o.Policy)
	}
	switch {
	case o.SampleFactor < 0 || o.SampleFactor > 1000:
		return fmt.Errorf("%w: admission_sample_factor must be in 1..1000 (0: default), got %d", ErrBadConfig, o.SampleFactor)
	case !(o.Margin >= 0 && o.Margin <= 16):
		return fmt.Errorf("%w: admission_margin must be in [0, 16], got %v", ErrBadConfig, o.Margin)
	case !(o.WriteBudgetMBps >= 0 && o.WriteBudgetMBps < 1e9):
		return fmt.Errorf("%w: ssd_write_budget must be >= 0 MB/s, got %v", ErrBadConfig, o.WriteBudgetMBps)
	case o.PromoteMinFreq < 0 || o.PromoteMinFreq > 16:
		return fmt.Errorf("%w: dram_promotion_min_freq must be in 0..16, got %d", ErrBadConfig, o.PromoteMinFreq)
	case o.ColdPutMinFreq < 0 || o.ColdPutMinFreq > 16:
		return fmt.Errorf("%w: admission_cold_put_freq must be in 0..16, got %d", ErrBadConfig, o.ColdPutMinFreq)
	}
	return nil
}

// agree checks that the named policy agrees with Mooncake's flags and that
// tinylfu-only flags are not given to another policy.
func (s Settings) agree(name string) error {
	if s.OffloadOnEvict && name != PolicyOnEvict {
		return fmt.Errorf("%w: offload_admission_policy=%s and offload_on_evict cannot be used together", ErrBadConfig, name)
	}
	if s.ReadThreshold > 0 && name != PolicyReadThreshold {
		return fmt.Errorf("%w: offload_admission_policy=%s and offload_read_admission_threshold cannot be used together", ErrBadConfig, name)
	}
	if name == PolicyReadThreshold && s.ReadThreshold == 0 {
		return fmt.Errorf("%w: offload_admission_policy=read-threshold requires offload_read_admission_threshold > 0", ErrBadConfig)
	}
	if name != PolicyTinyLFU {
		if s.Options.WriteBudgetMBps > 0 {
			return fmt.Errorf("%w: ssd_write_budget requires offload_admission_policy=tinylfu", ErrBadConfig)
		}
		if s.Options.PromoteMinFreq > 0 {
			return fmt.Errorf("%w: dram_promotion_min_freq requires offload_admission_policy=tinylfu", ErrBadConfig)
		}
	}
	return nil
}
