package main

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// The manual pages are made from the programs' own --help, run on the
// binaries being packaged, so that a flag added to the code is in the page
// of the package that ships it. The help texts are plain text in a few
// shapes, which is all this reads:
//
//   - paragraphs: lines at the left margin, up to a blank line;
//   - blocks: a line at the left margin ending in ':' ("Usage:",
//     "Examples:"), then indented lines; or indented lines right after a
//     paragraph that ends in ':';
//   - flag lists: the output of Go's flag.PrintDefaults ("  -name type",
//     then its usage on lines indented by four spaces and a tab).

// manPage describes one page.
type manPage struct {
	name    string // the program, e.g. node-resized
	section string // 8 or 1
	title   string // .TH's centre footer: "System Administration"
	summary string // the NAME line after the dash
	// help runs the program with arguments and returns what it printed.
	help func(args ...string) (string, error)
	// commands lists the subcommands with their one-line summary; global is
	// the command whose --help lists only the global flags ("" when the
	// program's own --help prints its flags).
	commands func(usage []block) ([]command, error)
	global   string
	seeAlso  []string
}

type command struct{ name, summary string }

// block is a paragraph (title and pre empty), a titled block, or indented
// lines (pre).
type block struct {
	title string   // "Usage", without the colon
	text  []string // a paragraph's lines
	pre   []string // the indented lines, the common indentation removed
	flags []flagDoc
}

type flagDoc struct {
	names []string // without dashes; aliases that share a usage
	arg   string   // "string", "duration", ... or ""
	usage string
}

// helpRunner runs bin with a fixed environment: no NODE_NAME,
// NODE_RESIZED_SOCKET or locale of the machine that builds the package
// changes a default shown.
func helpRunner(bin string) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		cmd := exec.Command(bin, append(args, "--help")...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=/nonexistent"}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("%s %s --help: %w: %s", bin, strings.Join(args, " "), err, stderr.Bytes())
		}
		if len(out) == 0 {
			return "", fmt.Errorf("%s %s --help printed nothing", bin, strings.Join(args, " "))
		}
		return string(out), nil
	}
}

var (
	flagLine = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9-]*)(?: (\S+))?$`)
	// A boolean flag of one letter has its usage on its line.
	shortFlagLine = regexp.MustCompile(`^  -([A-Za-z0-9])\t(.+)$`)
	shortFor      = regexp.MustCompile(`^short for --?([A-Za-z0-9-]+)$`)
	titleLine     = regexp.MustCompile(`^([A-Z][^:]*):$`)
)

// parseHelp splits a help text into blocks.
func parseHelp(text string) []block {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	var blocks []block
	indented := func(l string) bool { return strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") }
	for i := 0; i < len(lines); {
		l := lines[i]
		switch {
		case strings.TrimSpace(l) == "":
			i++
		case !indented(l):
			var b block
			if m := titleLine.FindStringSubmatch(l); m != nil && i+1 < len(lines) && indented(lines[i+1]) {
				b.title = m[1]
				i++
			} else {
				for i < len(lines) && strings.TrimSpace(lines[i]) != "" && !indented(lines[i]) {
					b.text = append(b.text, lines[i])
					i++
				}
				blocks = append(blocks, b)
				b = block{}
				if i >= len(lines) || !indented(lines[i]) {
					continue
				}
			}
			var body []string
			for i < len(lines) && indented(lines[i]) {
				body = append(body, lines[i])
				i++
			}
			if flags, ok := parseFlagList(body); ok {
				b.flags = flags
			} else {
				b.pre = dedent(body)
			}
			blocks = append(blocks, b)
		default: // indented text after a blank line: part of no title
			var body []string
			for i < len(lines) && indented(lines[i]) {
				body = append(body, lines[i])
				i++
			}
			blocks = append(blocks, block{pre: dedent(body)})
		}
	}
	return blocks
}

// parseFlagList reads flag.PrintDefaults output; ok is false for anything
// else. Flags that share their usage and argument (-o and -output) are one.
func parseFlagList(lines []string) (flags []flagDoc, ok bool) {
	for _, l := range lines {
		if m := shortFlagLine.FindStringSubmatch(l); m != nil {
			flags = append(flags, flagDoc{names: []string{m[1]}, usage: strings.TrimSpace(m[2])})
			continue
		}
		if m := flagLine.FindStringSubmatch(l); m != nil {
			flags = append(flags, flagDoc{names: []string{m[1]}, arg: m[2]})
			continue
		}
		u, found := strings.CutPrefix(l, "    \t")
		if !found || len(flags) == 0 {
			return nil, false
		}
		f := &flags[len(flags)-1]
		if f.usage != "" {
			f.usage += " "
		}
		f.usage += strings.TrimSpace(u)
	}
	// "-f: short for --follow" is an alias of --follow.
	for i := 0; i < len(flags); i++ {
		m := shortFor.FindStringSubmatch(flags[i].usage)
		if m == nil {
			continue
		}
		for j := range flags {
			if j != i && flags[j].names[0] == m[1] && flags[j].arg == flags[i].arg {
				flags[j].names = append([]string{flags[i].names[0]}, flags[j].names...)
				flags = append(flags[:i], flags[i+1:]...)
				i--
				break
			}
		}
	}
	var merged []flagDoc
	for _, f := range flags {
		if f.usage == "" {
			return nil, false
		}
		joined := false
		for i := range merged {
			if merged[i].usage == f.usage && merged[i].arg == f.arg {
				merged[i].names = append(merged[i].names, f.names...)
				joined = true
				break
			}
		}
		if !joined {
			merged = append(merged, f)
		}
	}
	return merged, len(merged) > 0
}

func dedent(lines []string) []string {
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) >= indent {
			out[i] = l[indent:]
		}
	}
	return out
}

// roffText escapes text for roff: backslashes, and a line that would start
// with a control character.
func roffText(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffDashes is roffText with every '-' a minus sign: for flags and
// commands that are typed, which must stay ASCII when copied.
func roffDashes(s string) string {
	return strings.ReplaceAll(roffText(s), "-", `\-`)
}

func flagName(n string) string {
	if len(n) == 1 {
		return "-" + n
	}
	return "--" + n
}

// roffFlags writes a flag list as tagged paragraphs. A flag named in
// skip (the global flags, on a command's list) is left out.
func roffFlags(w *strings.Builder, flags []flagDoc, skip map[string]bool) {
	for _, f := range flags {
		if skip[f.names[0]] {
			continue
		}
		w.WriteString(".TP\n")
		var tags []string
		for _, n := range f.names {
			tags = append(tags, `\fB`+roffDashes(flagName(n))+`\fR`)
		}
		tag := strings.Join(tags, ", ")
		if f.arg != "" {
			tag += ` \fI` + roffText(f.arg) + `\fR`
		}
		w.WriteString(tag + "\n" + roffText(f.usage) + "\n")
	}
}

func roffPre(w *strings.Builder, lines []string) {
	w.WriteString(".PP\n.RS 4\n.nf\n")
	for _, l := range lines {
		w.WriteString(roffDashes(l) + "\n")
	}
	w.WriteString(".fi\n.RE\n")
}

// roffPara writes a paragraph, filled; but lines that are not prose
// wrapped at the margin (one shorter than 60 characters before the last)
// are statements of their own and keep their breaks.
func roffPara(w *strings.Builder, lines []string) {
	w.WriteString(".PP\n")
	broken := false
	for _, l := range lines[:len(lines)-1] {
		broken = broken || len(l) < 60
	}
	for i, l := range lines {
		if broken && i > 0 {
			w.WriteString(".br\n")
		}
		w.WriteString(roffText(strings.TrimSpace(l)) + "\n")
	}
}

// roffBlocks writes blocks inside a section; a titled block gets a bold
// run-in heading.
func roffBlocks(w *strings.Builder, blocks []block, skip map[string]bool) {
	for _, b := range blocks {
		if b.title != "" {
			w.WriteString(".PP\n\\fB" + roffText(b.title) + ":\\fR\n")
		}
		switch {
		case b.flags != nil:
			roffFlags(w, b.flags, skip)
		case b.pre != nil:
			roffPre(w, b.pre)
		default:
			roffPara(w, b.text)
		}
	}
}

// sectionOf maps a help text's block title to a manual section.
func sectionOf(title string) string {
	switch t := strings.ToLower(title); {
	case t == "usage":
		return "SYNOPSIS"
	case t == "flags" || strings.HasPrefix(t, "flags "):
		return "OPTIONS"
	case t == "commands":
		return "COMMANDS"
	default:
		return strings.ToUpper(title)
	}
}

// render makes the page's roff source.
func (p manPage) render(version string, date time.Time) (string, error) {
	top, err := p.help()
	if err != nil {
		return "", err
	}
	blocks := parseHelp(top)
	if len(blocks) == 0 || blocks[0].text == nil {
		return "", fmt.Errorf("%s --help does not start with a paragraph", p.name)
	}

	// Sections in the order of the help text, paragraphs going with the
	// section before them; the leading paragraphs are the DESCRIPTION.
	type section struct {
		name   string
		blocks []block
	}
	sections := []*section{{name: "DESCRIPTION"}}
	byName := map[string]*section{"DESCRIPTION": sections[0]}
	cur := sections[0]
	var options []flagDoc
	for _, b := range blocks {
		if b.title != "" {
			name := sectionOf(b.title)
			if name == "OPTIONS" {
				// From the flag set itself, below; a hand-written list
				// in the usage is replaced by it.
				if b.flags != nil {
					options = b.flags
				}
				cur = nil
				continue
			}
			if strings.HasSuffix(strings.ToLower(b.title), " flags") {
				cur = nil // a command's flags: under COMMANDS, from its own --help
				continue
			}
			s := byName[name]
			if s == nil {
				s = &section{name: name}
				sections = append(sections, s)
				byName[name] = s
			}
			cur = s
			b.title = ""
		}
		if cur == nil {
			continue
		}
		cur.blocks = append(cur.blocks, b)
	}
	if byName["SYNOPSIS"] == nil {
		return "", fmt.Errorf("%s --help has no Usage", p.name)
	}
	if p.global != "" {
		g, err := p.help(p.global)
		if err != nil {
			return "", err
		}
		options = nil
		for _, b := range parseHelp(g) {
			if b.flags != nil {
				options = b.flags
			}
		}
	}
	if len(options) == 0 {
		return "", fmt.Errorf("%s: no flags found in its --help", p.name)
	}
	global := map[string]bool{}
	for _, f := range options {
		for _, n := range f.names {
			global[n] = true
		}
	}

	var w strings.Builder
	fmt.Fprintf(&w, ".\\\" Made by tools/cmd/nfpm-pack from %s --help: do not edit.\n", p.name)
	fmt.Fprintf(&w, ".TH %s %s %s \"%s %s\" \"%s\"\n", strings.ToUpper(p.name), p.section, date.UTC().Format("2006-01-02"), p.name, roffText(version), p.title)
	// Typed names must not be hyphenated, and filled text reads better ragged.
	w.WriteString(".nh\n.ad l\n")
	fmt.Fprintf(&w, ".SH NAME\n%s \\- %s\n", roffDashes(p.name), roffText(p.summary))
	write := func(name string) {
		s := byName[name]
		if s == nil {
			return
		}
		w.WriteString(".SH " + name + "\n")
		if name == "SYNOPSIS" {
			// Lines, not filled text.
			for _, b := range s.blocks {
				if b.pre != nil {
					roffPre(&w, b.pre)
				} else {
					roffBlocks(&w, []block{b}, nil)
				}
			}
			return
		}
		if name == "COMMANDS" {
			return // below, with each command's own help
		}
		roffBlocks(&w, s.blocks, nil)
	}
	write("SYNOPSIS")
	write("DESCRIPTION")
	w.WriteString(".SH OPTIONS\n")
	roffFlags(&w, options, nil)

	cmds, err := p.commands(blocks)
	if err != nil {
		return "", err
	}
	if len(cmds) > 0 {
		w.WriteString(".SH COMMANDS\n")
		for _, c := range cmds {
			help, err := p.help(c.name)
			if err != nil {
				return "", err
			}
			w.WriteString(".SS " + roffDashes(c.name) + "\n")
			if c.summary != "" {
				roffPara(&w, []string{c.summary})
			}
			cb := parseHelp(help)
			// "Usage: prog [global flags] cmd [flags]" alone is no
			// description; the global flags are under OPTIONS.
			if len(cb) > 0 && len(cb[0].text) == 1 && strings.HasPrefix(cb[0].text[0], "Usage: ") {
				cb = cb[1:]
			}
			if len(cb) == 1 && cb[0].title == "Flags" && ownFlags(cb[0].flags, global) == 0 {
				continue
			}
			roffBlocks(&w, cb, global)
		}
	}
	for _, s := range sections {
		switch s.name {
		case "DESCRIPTION", "SYNOPSIS", "COMMANDS":
		default:
			write(s.name)
		}
	}
	if len(p.seeAlso) > 0 {
		w.WriteString(".SH SEE ALSO\n")
		var refs []string
		for _, r := range p.seeAlso {
			name, sec, _ := strings.Cut(r, "(")
			refs = append(refs, `\fB`+roffDashes(name)+`\fR(`+sec)
		}
		w.WriteString(strings.Join(refs, ",\n") + "\n")
	}
	return w.String(), nil
}

func ownFlags(flags []flagDoc, global map[string]bool) int {
	n := 0
	for _, f := range flags {
		if !global[f.names[0]] {
			n++
		}
	}
	return n
}

// usageCommands reads the subcommands from the Usage block: lines
// "prog WORD ..." whose WORD is not a flag, with the rest of the line after
// the run of spaces as the summary.
func usageCommands(prog string) func([]block) ([]command, error) {
	return func(blocks []block) ([]command, error) {
		var cmds []command
		for _, b := range blocks {
			if b.title != "Usage" {
				continue
			}
			for _, l := range b.pre {
				f := strings.Fields(l)
				if len(f) >= 2 && f[0] == prog && !strings.HasPrefix(f[1], "-") && !strings.HasPrefix(f[1], "[") {
					cmds = append(cmds, command{name: f[1]})
				}
			}
		}
		return cmds, nil
	}
}

// listedCommands reads the subcommands from the Commands block: a name,
// and after two or more spaces its summary.
func listedCommands(blocks []block) ([]command, error) {
	var cmds []command
	for _, b := range blocks {
		if b.title != "Commands" {
			continue
		}
		for _, l := range b.pre {
			if strings.TrimSpace(l) == "" {
				continue
			}
			head, summary, _ := strings.Cut(l, "  ")
			name := strings.Fields(head)[0]
			cmds = append(cmds, command{name: name, summary: strings.TrimSpace(summary)})
		}
	}
	if len(cmds) == 0 {
		return nil, errors.New("the --help lists no Commands")
	}
	return cmds, nil
}

// manPages are the two pages the packages ship, for the binaries in bin.
func manPages(bin string) []manPage {
	return []manPage{
		{
			name:     "node-resized",
			section:  "8",
			title:    "System Administration",
			summary:  "follow CPU and memory hotplug and keep a Kubernetes node's capacity exact",
			help:     helpRunner(bin + "/node-resized"),
			commands: usageCommands("node-resized"),
			seeAlso:  []string{"node-resizectl(1)", "systemctl(1)", "journalctl(1)", "kubelet(8)"},
		},
		{
			name:     "node-resizectl",
			section:  "1",
			title:    "User Commands",
			summary:  "ask the node-resized daemon about this machine and set the Node's configured capacity",
			help:     helpRunner(bin + "/node-resizectl"),
			commands: listedCommands,
			global:   "version",
			seeAlso:  []string{"node-resized(8)", "curl(1)"},
		},
	}
}
