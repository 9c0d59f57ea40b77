package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

func TestPackageVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":                       "1.2.3",
		"1.2.3":                        "1.2.3",
		"v1.2":                         "1.2",
		"v1.2.3-rc.1":                  "1.2.3~rc.1",
		"v1.2.3-rc-1":                  "1.2.3~rc.1",
		"v1.2.3-dirty":                 "1.2.3+dirty",
		"v1.2.3-4-gabc1234":            "1.2.3+git4.abc1234",
		"v1.2.3-4-gabc1234-dirty":      "1.2.3+git4.abc1234.dirty",
		"v1.2.3-rc.1-12-g0123456789ab": "1.2.3~rc.1+git12.0123456789ab",
		"abc1234":                      "0.0.0~gitabc1234",
		"abc1234-dirty":                "0.0.0~gitabc1234.dirty",
		"1234567":                      "0.0.0~git1234567",
		"dev":                          "0.0.0~dev",
	} {
		got, err := packageVersion(in)
		if err != nil || got != want {
			t.Errorf("packageVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-dirty", "release one", "v1.2.3_4", "master", "v1..2", "v1.2.3-", "ABC1234"} {
		if got, err := packageVersion(in); err == nil {
			t.Errorf("packageVersion(%q) = %q, want an error", in, got)
		}
	}
}

// The rules must give versions that sort as the releases do, for dpkg and
// for rpm.
func TestPackageVersionOrder(t *testing.T) {
	need(t, "dpkg")
	need(t, "rpm")
	ordered := []string{"abc1234", "abc1234-dirty", "v0.1.0", "v1.2.3-rc.1", "v1.2.3-rc.1-2-gabc1234", "v1.2.3", "v1.2.3-4-gabc1234", "v1.2.3-4-gabc1234-dirty", "v1.2.4"}
	for i := 1; i < len(ordered); i++ {
		a, err := packageVersion(ordered[i-1])
		if err != nil {
			t.Fatal(err)
		}
		b, err := packageVersion(ordered[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := exec.Command("dpkg", "--compare-versions", a, "lt", b).Run(); err != nil {
			t.Errorf("dpkg: %s (%s) does not sort before %s (%s): %v", a, ordered[i-1], b, ordered[i], err)
		}
		// rpm.vercmp answers -1, 0 or 1.
		out, err := exec.Command("rpm", "--eval", fmt.Sprintf(`%%{lua: print(rpm.vercmp(%q, %q))}`, a, b)).Output()
		if err != nil {
			t.Fatalf("rpm.vercmp: %v", err)
		}
		if got := strings.TrimSpace(string(out)); got != "-1" {
			t.Errorf("rpm: vercmp(%s, %s) = %s, want -1", a, b, got)
		}
	}
}
