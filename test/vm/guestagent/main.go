// Command guestagent is test/vm's command agent, run inside every guest:
// it serves the host on the virtio-serial port named vm.AgentPortName.
//
// Protocol, one request per line from the host: "TOKEN BASE64(COMMAND)".
// The agent runs the command with sh -c (stdin /dev/null, stdout and
// stderr together in a file under /run/agent, so that a process the
// command leaves running never holds the reply back), then writes the
// output base64-encoded, 76 characters a line, and "@@END TOKEN EXITCODE",
// as one write. Requests run concurrently: a reply carries its token, and
// a command that blocks (a wait in the guest) does not hold up the others.
// "@@READY" is written once the port is open.
//
// A command that is only "cat" and plain file names (no shell syntax) is
// read by the agent itself, as cat would: under TCG every process the
// guest starts costs tens of milliseconds of host CPU, and the tests poll
// files (cgroup limits, /proc/meminfo, sysfs) many times a second.
//
// So is "curl -sf --unix-socket SOCKET http://localhost/PATH", a GET over
// a unix socket (the daemon's API and metrics), which the tests poll too:
// a curl costs the guest about a second of emulated CPU. The agent answers
// as curl -sf would: the body and 0 for a 2xx, nothing and 22 for an
// error status, nothing and 7 when nothing listens.
//
// It replaces a POSIX sh script that started five processes per request
// (base64 twice, a subshell, sh, rm), about half a second of host CPU each
// under TCG: a guest that the host polled every 250 ms was kept at a whole
// core by the polling alone.
package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// portName is vm.AgentPortName (this command cannot import the vm package,
// which would then be in its own initramfs's build).
const portName = "node-resized.agent"

// outDir holds each running command's output file.
var outDir = "/run/agent"

func main() {
	port := findPort()
	os.MkdirAll("/dev/virtio-ports", 0o755)
	os.Symlink(port, "/dev/virtio-ports/"+portName) // the harness's other scripts look there
	os.MkdirAll(outDir, 0o755)
	f, err := os.OpenFile(port, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vm-agent: open %s: %v\n", port, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "vm-agent: serving on %s\n", port)
	serve(f, f, runShell)
}

// findPort waits for the virtio-serial port named portName.
func findPort() string {
	for {
		ds, _ := filepath.Glob("/sys/class/virtio-ports/*")
		for _, d := range ds {
			if b, err := os.ReadFile(filepath.Join(d, "name")); err == nil && strings.TrimSpace(string(b)) == portName {
				return "/dev/" + filepath.Base(d)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// serve answers the requests read from r on w until r fails for good. A
// virtio port reads EOF while the host side is not connected: it is read
// again after a pause.
func serve(r io.Reader, w io.Writer, run func(tok, cmd string) ([]byte, int)) {
	var wmu sync.Mutex
	reply := func(b []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		w.Write(b)
	}
	reply([]byte("@@READY\n"))
	br := bufio.NewReader(r)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if line == "" {
				if err != io.EOF {
					return
				}
				time.Sleep(200 * time.Millisecond)
				continue
			}
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			continue
		}
		tok, b64, _ := strings.Cut(line, " ")
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out []byte
			var rc int
			if cmd, err := base64.StdEncoding.DecodeString(b64); err != nil {
				out, rc = []byte("vm-agent: bad request\n"), 255
			} else {
				out, rc = run(tok, string(cmd))
			}
			reply(encodeReply(tok, out, rc))
		}()
	}
}

// encodeReply renders one reply: the output in base64, 76 characters a
// line (as base64(1) writes it), then the end line.
func encodeReply(tok string, out []byte, rc int) []byte {
	var b bytes.Buffer
	enc := base64.StdEncoding.EncodeToString(out)
	for len(enc) > 76 {
		b.WriteString(enc[:76])
		b.WriteByte('\n')
		enc = enc[76:]
	}
	if enc != "" {
		b.WriteString(enc)
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "@@END %s %d\n", tok, rc)
	return b.Bytes()
}

// plainCat matches "cat" followed by file names without shell syntax
// (and no option).
var plainCat = regexp.MustCompile(`^cat( +[A-Za-z0-9_./:@%+,=][A-Za-z0-9_./:@%+,=-]*)+ *$`)

// unixGet matches a plain GET over a unix socket, curl -sf's way.
var unixGet = regexp.MustCompile(`^curl -sf --unix-socket (/[A-Za-z0-9_./-]+) http://localhost(/[A-Za-z0-9_./?=&%-]*)$`)

// runShell runs one command, or reads the files of a plain cat, or makes
// a plain unix-socket GET, itself.
func runShell(tok, cmd string) ([]byte, int) {
	if plainCat.MatchString(cmd) {
		return catFiles(strings.Fields(cmd)[1:])
	}
	if m := unixGet.FindStringSubmatch(cmd); m != nil {
		return getUnix(m[1], m[2])
	}
	path := filepath.Join(outDir, tok)
	f, err := os.Create(path)
	if err != nil {
		return []byte(fmt.Sprintf("vm-agent: %v\n", err)), 255
	}
	defer os.Remove(path)
	defer f.Close()
	c := exec.Command("/bin/sh", "-c", cmd)
	c.Stdout, c.Stderr = f, f // a file, not a pipe: see the package comment
	err = c.Run()
	rc := 0
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			rc = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				rc = 128 + int(ws.Signal()) // as sh reports a killed command
			}
		} else {
			fmt.Fprintf(f, "vm-agent: %v\n", err)
			rc = 127
		}
	}
	out, err := os.ReadFile(path)
	if err != nil {
		return []byte(fmt.Sprintf("vm-agent: %v\n", err)), 255
	}
	return out, rc
}

// catFiles is cat's behaviour for plain files: their contents in order,
// an error line for each that cannot be read, exit code 1 if any.
func catFiles(names []string) ([]byte, int) {
	var out bytes.Buffer
	rc := 0
	for _, n := range names {
		b, err := os.ReadFile(n)
		out.Write(b)
		if err != nil {
			msg := err.Error()
			if pe, ok := err.(*os.PathError); ok {
				msg = pe.Err.Error()
				if len(msg) > 0 {
					msg = strings.ToUpper(msg[:1]) + msg[1:]
				}
			}
			fmt.Fprintf(&out, "cat: %s: %s\n", n, msg)
			rc = 1
		}
	}
	return out.Bytes(), rc
}

// getUnix is curl -sf --unix-socket sock http://localhost+path: the body
// and 0 for a 2xx status, nothing and 22 for another, nothing and 7 when
// the socket does not answer (curl's exit codes for those). It speaks
// HTTP/1.0, so that the server ends the body by closing (no chunks to
// decode) and the agent needs no HTTP client.
func getUnix(sock, path string) ([]byte, int) {
	conn, err := net.DialTimeout("unix", sock, 10*time.Second)
	if err != nil {
		return nil, 7
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path); err != nil {
		return nil, 56 // failure receiving network data
	}
	resp, err := io.ReadAll(conn)
	if err != nil {
		return nil, 56
	}
	head, body, ok := bytes.Cut(resp, []byte("\r\n\r\n"))
	status := strings.Fields(string(head))
	if !ok || len(status) < 2 || !strings.HasPrefix(status[0], "HTTP/") {
		return nil, 8 // weird server reply
	}
	if code, err := strconv.Atoi(status[1]); err != nil || code >= 400 {
		return nil, 22
	}
	return body, 0
}
