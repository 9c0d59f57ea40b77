package topology

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// parallelism says when a rebuild reads in parallel, and on how many
// goroutines; tests lower the thresholds to read small trees in parallel.
var parallelism = struct {
	// workers bounds the goroutines that read one rebuild's objects (and
	// GOMAXPROCS does). Each read is one syscall that the kernel serves
	// from memory, so the reads scale with the CPUs, but a rebuild should
	// not take a large machine's every CPU away from its workloads.
	workers int
	// The memory blocks are read in parallel from minBlocks on, in chunks
	// of blockChunk, and the node directories (one a chunk) from minCPUs
	// online CPUs on: below that, starting goroutines costs more than it
	// saves.
	minBlocks, blockChunk, minCPUs int
}{workers: 8, minBlocks: 128, blockChunk: 128, minCPUs: 128}

// errRedo is what a worker of a parallel rebuild returns for an object it
// could not read from files already open: the owner reads it again.
var errRedo = errors.New("topology: read again by the owner")

// parallel calls fn for the chunks [lo, hi) of [0, n), chunk items each
// (fewer when that would leave a goroutine without one), on up to
// min(GOMAXPROCS, parallelism.workers) goroutines, r's own among them, and
// returns when every chunk is done; with one chunk or one CPU it just
// calls fn(r, 0, n). The other goroutines get readers of their own that
// share r's open files read-only (reader.shared): fn must store what it
// reads by index, and leave what one of them could not read (errRedo,
// or any other error) for r to read again afterwards, in order, so that
// the result and the first error are the sequential ones.
func (r *reader) parallel(n, chunk int, fn func(w *reader, lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), parallelism.workers, n)
	if chunk*workers > n {
		chunk = (n + workers - 1) / workers // an equal share each
	}
	chunks := (n + chunk - 1) / chunk
	workers = min(workers, chunks)
	if workers <= 1 {
		fn(r, 0, n)
		return
	}
	var next atomic.Int64
	work := func(w *reader) {
		for {
			c := int(next.Add(1)) - 1
			if c >= chunks {
				return
			}
			fn(w, c*chunk, min((c+1)*chunk, n))
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		w := getReader()
		w.files, w.shared = r.files, true
		wg.Go(func() {
			defer putReader(w)
			work(w)
		})
	}
	// The owner works too, as a worker: it must not open files or change
	// the cache while the others read it.
	shared := r.shared
	r.shared = true
	work(r)
	r.shared = shared
	wg.Wait()
}

// idScan lists the numbered entries (prefix+N) of a directory on a
// goroutine of its own, so that a large directory (a large machine's
// memory/ and cpu/) is read while the rebuild reads other files.
type idScan struct {
	done chan struct{}
	ids  []int // sorted
	err  error
}

// startScan starts listing the entries prefix+N, N ≤ maxID, of the
// directory at path. The caller must wait for the result.
func startScan(path, prefix string, maxID int) *idScan {
	s := &idScan{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		r := getReader()
		defer putReader(r)
		s.err = r.scan(r.at(path, -1, ""), func(name []byte) {
			if id, ok := numberedName(name, prefix); ok && id <= maxID {
				s.ids = append(s.ids, id)
			}
		})
		slices.Sort(s.ids)
	}()
	return s
}

// wait returns the ids found, sorted.
func (s *idScan) wait() ([]int, error) {
	<-s.done
	return s.ids, s.err
}
