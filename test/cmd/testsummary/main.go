// Command testsummary prints a `go test -json` stream as `go test -v`
// would, then, after the last line, what each failed test said last: the
// test bed's long suites interleave many parallel guests' logs, and a
// failure's own lines can be thousands of lines above the end of the run,
// where a reader of a kept log tail never sees them. It exits with status
// 1 when a test or a package failed, or when the stream held no result at
// all (a build that never ran), so that a make recipe can pipe into it. It
// is a test tool, not part of the product.
//
//	go test -json -count=1 ./node/ 2>&1 | testsummary
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// event is the part of test2json's record this reads.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// located is a line a test printed with t.Log, t.Error or t.Fatal: the
// file and line it came from, then the message.
var located = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

type test struct {
	lines  []string // the last lines with a location, oldest first
	failed bool
}

func main() {
	keep := flag.Int("lines", 8, "lines to print per failed test")
	width := flag.Int("width", 400, "bytes to keep of each printed line")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, *keep, *width))
}

// run copies r's output to w, then the summary; it returns the exit status.
func run(r io.Reader, w io.Writer, keep, width int) int {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	tests := map[string]*test{}
	var order []string
	get := func(pkg, name string) *test {
		k := pkg + " " + name
		if tests[k] == nil {
			tests[k] = &test{}
			order = append(order, k)
		}
		return tests[k]
	}
	results, pkgFailed := 0, false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not test2json's: go vet's or the build's words, as they came.
			bw.Write(line)
			bw.WriteByte('\n')
			continue
		}
		switch e.Action {
		case "output", "build-output":
			bw.WriteString(e.Output)
			if e.Test != "" && located.MatchString(e.Output) {
				t := get(e.Package, e.Test)
				t.lines = append(t.lines, strings.TrimRight(e.Output, "\n"))
				if len(t.lines) > keep {
					t.lines = t.lines[len(t.lines)-keep:]
				}
			}
		case "pass", "skip":
			if e.Test == "" {
				results++
			}
		case "fail", "build-fail":
			if e.Test == "" {
				results++
				pkgFailed = true
			} else {
				get(e.Package, e.Test).failed = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(bw, "testsummary: read the test stream: %v\n", err)
		return 1
	}
	// A failed test whose subtests failed too is summed up by them.
	var leaves []string
	for _, k := range order {
		if !tests[k].failed {
			continue
		}
		leaf := true
		for _, o := range order {
			if tests[o].failed && strings.HasPrefix(o, k+"/") {
				leaf = false
				break
			}
		}
		if leaf {
			leaves = append(leaves, k)
		}
	}
	sort.Strings(leaves)
	if len(leaves) > 0 {
		fmt.Fprintf(bw, "\n=== what each failed test said last (%d failed; at most %d lines each, the whole log is above)\n", len(leaves), keep)
		for _, k := range leaves {
			_, name, _ := strings.Cut(k, " ")
			fmt.Fprintf(bw, "--- FAIL: %s\n", name)
			for _, l := range tests[k].lines {
				if len(l) > width {
					l = l[:width] + " …"
				}
				fmt.Fprintln(bw, l)
			}
		}
	}
	switch {
	case results == 0:
		fmt.Fprintln(bw, "testsummary: the stream held no package result: the tests did not run")
		return 1
	case pkgFailed || len(leaves) > 0:
		return 1
	}
	return 0
}
