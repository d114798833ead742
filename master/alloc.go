package master

// allocator hands out byte ranges of one DRAM segment. It is best-fit (the
// smallest free extent that holds the request, lowest offset among equals),
// which keeps large extents intact for large objects, and it coalesces a freed
// range with its free neighbours at once, so free space never stays split at
// a boundary that nothing occupies.
//
// Free extents are indexed three ways: by start and by end (hash maps, O(1)
// neighbour lookup for coalescing) and by (length, start) in a treap (O(log n)
// best-fit search). Alloc and Free are O(log n) in the number of free extents.
//
// Sizes are rounded up to allocAlign; offsets are multiples of allocAlign.
//
// Not safe for concurrent use: the owning segment's mutex protects it.
type allocator struct {
	size    int64
	used    int64           // bytes allocated (rounded)
	byStart map[int64]int64 // free extent start -> length
	byEnd   map[int64]int64 // free extent end -> start
	tree    *tnode          // free extents by (length, start)
	spare   *tnode          // removed treap nodes for reuse (linked by right)
	seed    uint64          // treap priorities
}

// allocAlign is the allocation granularity in bytes.
const allocAlign = 64

func alignUp(n int64) int64 { return (n + allocAlign - 1) &^ (allocAlign - 1) }

func newAllocator(size int64) *allocator {
	size &^= allocAlign - 1
	a := &allocator{size: size, byStart: map[int64]int64{}, byEnd: map[int64]int64{}, seed: 0x9E3779B97F4A7C15}
	if size > 0 {
		a.addFree(0, size)
	}
	return a
}

// Alloc reserves n bytes and returns their offset, or false when no free
// extent is large enough.
func (a *allocator) Alloc(n int64) (int64, bool) {
	if n <= 0 {
		return 0, false
	}
	n = alignUp(n)
	t := ceil(a.tree, n)
	if t == nil {
		return 0, false
	}
	start, length := t.start, t.length
	a.removeFree(start, length)
	if length > n {
		a.addFree(start+n, length-n)
	}
	a.used += n
	return start, true
}

// Free returns [off, off+n) (n as passed to Alloc) to the free space. The
// range must have been returned by Alloc and not freed since.
func (a *allocator) Free(off, n int64) {
	n = alignUp(n)
	a.used -= n
	start, end := off, off+n
	if ls, ok := a.byEnd[start]; ok { // free neighbour on the left
		a.removeFree(ls, start-ls)
		start = ls
	}
	if rl, ok := a.byStart[end]; ok { // free neighbour on the right
		a.removeFree(end, rl)
		end += rl
	}
	a.addFree(start, end-start)
}

// Largest is the length of the largest free extent.
func (a *allocator) Largest() int64 {
	t := a.tree
	if t == nil {
		return 0
	}
	for t.right != nil {
		t = t.right
	}
	return t.length
}

// Free bytes.
func (a *allocator) FreeBytes() int64 { return a.size - a.used }

// Extents is the number of free extents (fragmentation indicator).
func (a *allocator) Extents() int { return len(a.byStart) }

func (a *allocator) addFree(start, length int64) {
	a.byStart[start] = length
	a.byEnd[start+length] = start
	a.seed ^= a.seed << 13
	a.seed ^= a.seed >> 7
	a.seed ^= a.seed << 17
	n := a.spare
	if n != nil {
		a.spare = n.right
		*n = tnode{}
	} else {
		n = &tnode{}
	}
	n.length, n.start, n.prio = length, start, a.seed
	a.tree = insert(a.tree, n)
}

func (a *allocator) removeFree(start, length int64) {
	delete(a.byStart, start)
	delete(a.byEnd, start+length)
	var gone *tnode
	a.tree, gone = remove(a.tree, length, start)
	if gone != nil {
		gone.left, gone.right = nil, a.spare
		a.spare = gone
	}
}

// tnode is a treap node keyed by (length, start), heap-ordered by prio.
type tnode struct {
	length, start int64
	prio          uint64
	left, right   *tnode
}

func less(l1, s1, l2, s2 int64) bool { return l1 < l2 || (l1 == l2 && s1 < s2) }

// split returns the treap of keys < (l, s) and the treap of keys >= (l, s).
func split(t *tnode, l, s int64) (*tnode, *tnode) {
	if t == nil {
		return nil, nil
	}
	if less(t.length, t.start, l, s) {
		a, b := split(t.right, l, s)
		t.right = a
		return t, b
	}
	a, b := split(t.left, l, s)
	t.left = b
	return a, t
}

// merge joins a and b where every key of a < every key of b.
func merge(a, b *tnode) *tnode {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	if a.prio > b.prio {
		a.right = merge(a.right, b)
		return a
	}
	b.left = merge(a, b.left)
	return b
}

func insert(t, n *tnode) *tnode {
	if t == nil {
		return n
	}
	if n.prio > t.prio {
		n.left, n.right = split(t, n.length, n.start)
		return n
	}
	if less(n.length, n.start, t.length, t.start) {
		t.left = insert(t.left, n)
	} else {
		t.right = insert(t.right, n)
	}
	return t
}

// remove deletes key (l, s) and returns the new root and the removed node.
func remove(t *tnode, l, s int64) (*tnode, *tnode) {
	if t == nil {
		return nil, nil
	}
	if t.length == l && t.start == s {
		return merge(t.left, t.right), t
	}
	var gone *tnode
	if less(l, s, t.length, t.start) {
		t.left, gone = remove(t.left, l, s)
	} else {
		t.right, gone = remove(t.right, l, s)
	}
	return t, gone
}

// ceil returns the node with the smallest (length, start) whose length >= n.
func ceil(t *tnode, n int64) *tnode {
	var best *tnode
	for t != nil {
		if t.length >= n {
			best = t
			t = t.left
		} else {
			t = t.right
		}
	}
	return best
}
