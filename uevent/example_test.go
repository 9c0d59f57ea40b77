package uevent_test

import (
	"errors"
	"fmt"
	"log"
	"net"

	"github.com/node-resized/node-resized/uevent"
)

// Listen for CPU and memory hotplug and react to every event. A lost event
// means "rescan": the events only say that something changed, and the
// truth is always read again from sysfs.
func ExampleListen() {
	l, err := uevent.Listen(uevent.Options{
		Subsystems: []string{"cpu", "memory"},
		OnDrop: func(reason uevent.DropReason, n int) {
			// Count drops, e.g. in a metric labelled by reason.
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Another goroutine stops the loop with l.Close(), e.g. when its
	// context is done.
	defer l.Close()

	for {
		ev, err := l.Receive()
		switch {
		case errors.Is(err, uevent.ErrLost):
			fmt.Println("events lost, rescanning:", err)
			continue
		case errors.Is(err, net.ErrClosed):
			return
		case err != nil:
			log.Printf("receive uevent: %v", err)
			continue
		}
		fmt.Printf("%s %s (%s) SEQNUM=%d\n", ev.Action, ev.DevPath, ev.Subsystem, ev.Seqnum)
	}
}

func ExampleParse() {
	msg := []byte("offline@/devices/system/cpu/cpu1\x00" +
		"ACTION=offline\x00DEVPATH=/devices/system/cpu/cpu1\x00SUBSYSTEM=cpu\x00SEQNUM=823\x00")
	ev, err := uevent.Parse(msg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ev.Action, ev.DevPath, ev.Subsystem, ev.Seqnum)
	fmt.Println(ev.Action == uevent.ActionOffline)
	// Output:
	// offline /devices/system/cpu/cpu1 cpu 823
	// true
}
