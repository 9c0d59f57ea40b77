package vm

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// fakeAgent answers like the guest agent, running nothing: the command
// text is echoed back, exit code 7 for "fail".
func fakeAgent(t *testing.T, conn net.Conn) {
	t.Helper()
	go func() {
		br := bufio.NewReader(conn)
		fmt.Fprintf(conn, "@@READY\n")
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			tok, b64, _ := strings.Cut(strings.TrimSpace(line), " ")
			cmd, _ := base64.StdEncoding.DecodeString(b64)
			if string(cmd) == "hang" {
				continue
			}
			code := 0
			if string(cmd) == "fail" {
				code = 7
			}
			// A stale result nobody waits for comes first.
			fmt.Fprintf(conn, "%s\n@@END deadbeef 0\n", base64.StdEncoding.EncodeToString([]byte("stale")))
			enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(cmd), 30)))
			for len(enc) > 76 {
				fmt.Fprintf(conn, "%s\n", enc[:76])
				enc = enc[76:]
			}
			fmt.Fprintf(conn, "%s\n@@END %s %d\n", enc, tok, code)
		}
	}()
}

func TestAgentClient(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	fakeAgent(t, server)
	a := newAgentClient(client)
	defer a.close()

	out, code, err := a.exec(testCtx(t), "echo hi\n")
	if err != nil || code != 0 || out != strings.Repeat("echo hi\n", 30) {
		t.Errorf("exec = %q, %d, %v", out, code, err)
	}
	if _, code, err = a.exec(testCtx(t), "fail"); err != nil || code != 7 {
		t.Errorf("exec(fail) = %d, %v; want 7, nil", code, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err = a.exec(ctx, "hang"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("exec(hang): err = %v", err)
	}
	server.Close()
	<-a.done
	if _, _, err = a.exec(testCtx(t), "x"); !errors.Is(err, errAgentClosed) {
		t.Errorf("exec after close: err = %v, want errAgentClosed", err)
	}
}

// TestAgentScriptSyntax checks the guest's shell scripts with busybox
// sh -n, when busybox is installed.
func TestAgentScriptSyntax(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox")
	}
	for name, script := range map[string]string{"init": initScript, "uevent-hook": ueventHook} {
		cmd := exec.Command(bb, "sh", "-n")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: sh -n: %v\n%s", name, err, out)
		}
	}
}
