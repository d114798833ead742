package eviction

// item is one tracked bucket. Items are linked into exactly one queue; the
// links are intrusive so that moving an item between queues (lru2) costs no
// allocation.
type item struct {
	id   uint64
	size int64
	// hits counts reads while in probation (lru2 only).
	hits int
	// protected says which segment holds the item (lru2 only).
	protected bool

	prev, next *item // towards the front (newer), towards the back (older)
}

// queue is a doubly linked list of items, most recently used (or newest) at
// the front, with a running count and size.
type queue struct {
	front, back *item
	n           int
	size        int64
}

func (q *queue) pushFront(it *item) {
	it.prev, it.next = nil, q.front
	if q.front != nil {
		q.front.prev = it
	} else {
		q.back = it
	}
	q.front = it
	q.n++
	q.size += it.size
}

func (q *queue) remove(it *item) {
	if it.prev != nil {
		it.prev.next = it.next
	} else {
		q.front = it.next
	}
	if it.next != nil {
		it.next.prev = it.prev
	} else {
		q.back = it.prev
	}
	it.prev, it.next = nil, nil
	q.n--
	q.size -= it.size
}

func (q *queue) moveToFront(it *item) {
	if q.front == it {
		return
	}
	q.remove(it)
	q.pushFront(it)
}

// resize changes the size of it, which q holds.
func (q *queue) resize(it *item, size int64) {
	q.size += size - it.size
	it.size = size
}

// collect appends to out, from the back of q, the ids not skipped, adding
// their sizes to *sum, until *sum >= need. It reports whether need was met.
func (q *queue) collect(out []uint64, sum *int64, need int64, skip func(uint64) bool) ([]uint64, bool) {
	for it := q.back; it != nil && *sum < need; it = it.prev {
		if skip != nil && skip(it.id) {
			continue
		}
		out = append(out, it.id)
		*sum += it.size
	}
	return out, *sum >= need
}
