package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/chglog"
)

// The changelog is packaging/changelog.yml, in nfpm's (chglog's) format,
// newest entry first. A build of a version it has no entry for (a snapshot
// between releases) gets one more entry at the top, so that both packages'
// latest entry is the version they are: the deb's
// /usr/share/doc/node-resized/changelog.gz (a native package's name: the
// deb has no Debian revision) and the rpm's %changelog.

// buildDate is the packages' date: SOURCE_DATE_EPOCH when set (the Makefile
// sets the last commit's), so that a rebuild of one commit is the same.
func buildDate() (time.Time, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Now().UTC().Truncate(time.Second), nil
}

// changelog reads the changelog and puts an entry for version on top when
// the newest is another version.
func changelog(path, version, packager string, date time.Time) (chglog.ChangeLogEntries, error) {
	entries, err := chglog.Parse(path)
	if err != nil {
		return nil, err
	}
	for i, e := range entries {
		if e.Semver == "" || e.Packager == "" || e.Date.IsZero() || len(e.Changes) == 0 {
			return nil, fmt.Errorf("%s: entry %d needs semver, date, packager and changes", path, i+1)
		}
	}
	if len(entries) > 0 && entries[0].Semver == version {
		return entries, nil
	}
	if !strings.ContainsAny(version, "~+") {
		// A release: its changes are what the changelog is for.
		return nil, fmt.Errorf("%s has no entry for the release %s: add one", path, version)
	}
	note := "Snapshot of the source tree, before the first release."
	if len(entries) > 0 {
		note = "Snapshot of the source tree after " + entries[0].Semver + "."
	}
	note += " Its changes are in the repository's history."
	snapshot := &chglog.ChangeLog{
		ChangeLogOverridables: chglog.ChangeLogOverridables{Deb: &chglog.ChangelogDeb{Urgency: "medium", Distributions: []string{"unstable"}}},
		Semver:                version,
		Date:                  date,
		Packager:              packager,
		Changes: chglog.ChangeLogChanges{{
			Note: note,
		}},
	}
	return append(chglog.ChangeLogEntries{snapshot}, entries...), nil
}

// debChangelog formats the entries as debian/changelog (Debian Policy
// 4.4), compressed as lintian wants it: gzip -9, with no name or time.
func debChangelog(name string, entries chglog.ChangeLogEntries) ([]byte, error) {
	var text strings.Builder
	for i, e := range entries {
		if i > 0 {
			text.WriteString("\n")
		}
		dist, urgency := "unstable", "medium"
		if e.Deb != nil {
			if len(e.Deb.Distributions) > 0 {
				dist = strings.Join(e.Deb.Distributions, " ")
			}
			if e.Deb.Urgency != "" {
				urgency = e.Deb.Urgency
			}
		}
		fmt.Fprintf(&text, "%s (%s) %s; urgency=%s\n\n", name, e.Semver, dist, urgency)
		for _, c := range e.Changes {
			for j, line := range wrap(strings.Join(strings.Fields(c.Note), " "), 76) {
				if j == 0 {
					text.WriteString("  * " + line + "\n")
				} else {
					text.WriteString("    " + line + "\n")
				}
			}
		}
		fmt.Fprintf(&text, "\n -- %s  %s\n", e.Packager, e.Date.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	}
	return gzipBest([]byte(text.String()))
}

// wrap breaks s into lines of at most width characters at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// rpmChangelog writes the entries for nfpm's rpm packager, each version
// with the package release, as rpmlint wants the newest to be.
func rpmChangelog(path string, entries chglog.ChangeLogEntries, release string) error {
	out := make(chglog.ChangeLogEntries, len(entries))
	for i, e := range entries {
		c := *e
		c.Semver = e.Semver + "-" + release
		out[i] = &c
	}
	if err := out.Save(path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// gzipBest compresses as gzip -9n does.
func gzipBest(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	z, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := z.Write(b); err != nil {
		return nil, err
	}
	if err := z.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
