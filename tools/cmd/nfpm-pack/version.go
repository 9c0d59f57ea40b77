package main

import (
	"fmt"
	"regexp"
	"strings"
)

var (
	// describeRE is what git describe adds after a tag: commits since the
	// tag and the abbreviated commit.
	describeRE = regexp.MustCompile(`^(.+)-([0-9]+)-g([0-9a-f]{4,40})$`)
	// shaRE is git describe --always on a history without tags.
	shaRE = regexp.MustCompile(`^[0-9a-f]{4,40}$`)
	// tagRE is a release tag: v1.2.3, or v1.2.3-rc.1 for a pre-release.
	tagRE = regexp.MustCompile(`^v?([0-9]+(?:\.[0-9]+)*)(?:-([0-9A-Za-z][0-9A-Za-z.-]*))?$`)
	// tagLikeRE tells a tag from a commit that happens to be all digits.
	tagLikeRE = regexp.MustCompile(`^(v[0-9]|[0-9]+\.)`)
)

// packageVersion turns the version the Makefile stamps into the binaries
// (git describe --tags --always --dirty, or "dev" without git) into one that
// both dpkg and rpm accept (no "-", which both reserve for the release) and
// order as releases are ordered:
//
//	v1.2.3                    1.2.3
//	v1.2.3-rc.1               1.2.3~rc.1               ("~" sorts before 1.2.3)
//	v1.2.3-4-gabc1234         1.2.3+git4.abc1234       (after 1.2.3)
//	v1.2.3-4-gabc1234-dirty   1.2.3+git4.abc1234.dirty
//	v1.2.3-dirty              1.2.3+dirty
//	abc1234 (no tag yet)      0.0.0~gitabc1234         (before any release)
//	abc1234-dirty             0.0.0~gitabc1234.dirty
//	dev                       0.0.0~dev
//
// Anything else is an error rather than a package with a surprising version.
func packageVersion(v string) (string, error) {
	if v == "dev" {
		return "0.0.0~dev", nil
	}
	rest, dirty := strings.CutSuffix(v, "-dirty")
	if shaRE.MatchString(rest) && !tagLikeRE.MatchString(rest) {
		// No tag yet: before any release.
		out := "0.0.0~git" + rest
		if dirty {
			out += ".dirty"
		}
		return out, nil
	}
	tag, commits, commit := rest, "", ""
	if m := describeRE.FindStringSubmatch(rest); m != nil {
		tag, commits, commit = m[1], m[2], m[3]
	}
	m := tagRE.FindStringSubmatch(tag)
	if m == nil {
		return "", fmt.Errorf("version %q: %q is neither a release tag like v1.2.3 or v1.2.3-rc.1 nor a commit", v, tag)
	}
	out := m[1]
	if pre := m[2]; pre != "" {
		out += "~" + strings.ReplaceAll(pre, "-", ".")
	}
	var local []string
	if commit != "" {
		local = append(local, "git"+commits, commit)
	}
	if dirty {
		local = append(local, "dirty")
	}
	if len(local) > 0 {
		out += "+" + strings.Join(local, ".")
	}
	return out, nil
}
