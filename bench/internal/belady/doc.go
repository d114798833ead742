// Package belady computes Belady's MIN, the offline optimum hit count of a
// cache of a given byte capacity, for a trace known in advance. The churn
// benchmark prints it as the upper bound that no online admission+eviction
// policy can beat.
//
// Algorithm: the trace is scanned once to find, for every request, the index
// of the next request of the same key. The simulated cache then keeps its
// residents in a max-heap by next use. A request of a resident key is a hit;
// a resident whose next use is "never" is dropped at once. On a miss the
// object is admitted only if room can be made by evicting residents whose
// next use is later than the new object's own next use (furthest first);
// otherwise it bypasses the cache (MIN with bypass: an object never requested
// again is never admitted).
//
// Exactness: with equal object sizes (every generated trace of the churn
// benchmark uses one block size) this is exactly Belady's MIN, the optimal
// demand cache, and therefore a true upper bound for any policy, including
// ones that admit objects at other times than their requests.
//
// Approximation for variable sizes: the optimum with variable object sizes is
// NP-hard (it contains knapsack). With variable sizes this package applies the
// same furthest-next-use rule, counting bytes against the capacity. That is
// the usual practical heuristic, but it is NOT a proven upper bound: a policy
// that prefers many small objects can occasionally beat it on object hit
// ratio. Result.Exact reports whether the trace had a single size. For
// variable-size traces treat the figure as an estimate of the optimum; Berger
// et al., "Practical Bounds on Optimal Caching with Variable Object Sizes"
// (SIGMETRICS 2018) give bounds that are tighter and provable.
//
// A request whose size differs from the resident copy's counts as a hit and
// keeps the resident size (the trace replayer behaves the same: the stored
// object answers the lookup).
//
// Concurrency: MIN is a pure function; the package has no state.
package belady
