package api_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/node-resized/node-resized/api"
)

// Change ids count from 1 in each epoch of the daemon; a client that
// resumes across a restart, or past what the history keeps, is told what
// it missed instead of given nothing.

func TestEventsCarryTheEpoch(t *testing.T) {
	e := startAPI(t)
	ctx := context.Background()
	st, err := e.client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Epoch == "" || st.Epoch != e.server.Epoch() {
		t.Fatalf("status epoch %q, server's %q", st.Epoch, e.server.Epoch())
	}
	evs, err := e.client.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Epoch != st.Epoch {
			t.Errorf("event #%d of epoch %q, want %q", ev.ID, ev.Epoch, st.Epoch)
		}
	}
	code, _, _ := e.raw(http.MethodGet, "/v1/events")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/events: %d", code)
	}
	// Resuming within the epoch is as before.
	e.cpuOffline(6)
	e.next()
	evs, err = e.client.EventsSince(ctx, api.Cursor{Epoch: st.Epoch, ID: 1})
	if err != nil || !slices.Equal(ids(evs), []uint64{2}) {
		t.Fatalf("EventsSince #1 of this epoch = %v, %v; want [2]", ids(evs), err)
	}
	evs, err = e.client.EventsSince(ctx, api.Cursor{ID: 2}) // no epoch: an old client
	if err != nil || len(evs) != 0 {
		t.Fatalf("EventsSince #2 = %v, %v; want none", ids(evs), err)
	}
	// An id this epoch has not reached, with its epoch, is a bad request.
	if code, _, body := e.raw(http.MethodGet, "/v1/events?epoch="+st.Epoch+"&since=9"); code != http.StatusBadRequest {
		t.Errorf("since #9 of this epoch: %d %s, want 400", code, body)
	}
}

// A daemon restart is a new monitor and server: the ids start at 1 again.
func TestResumeAcrossRestartIsMissed(t *testing.T) {
	before := startAPI(t)
	ctx := context.Background()
	for _, cpu := range []int{6, 5, 4} {
		before.cpuOffline(cpu)
		before.next()
	}
	evs, err := before.client.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1].Cursor() // #4 of the first epoch

	after := startAPI(t) // the restarted daemon: the startup model #1
	after.cpuOffline(6)
	after.next() // #2, which the client has not seen
	newEpoch := after.server.Epoch()
	if newEpoch == last.Epoch {
		t.Fatalf("the restarted server kept the epoch %q", newEpoch)
	}

	for name, cur := range map[string]api.Cursor{
		"with the old epoch":    last,
		"without epoch, id #4":  {ID: last.ID}, // past the newest id, #2, of the new epoch
		"old epoch, id below 2": {Epoch: last.Epoch, ID: 1},
	} {
		t.Run(name, func(t *testing.T) {
			evs, err := after.client.EventsSince(ctx, cur)
			var me *api.MissedError
			if !errors.As(err, &me) {
				t.Fatalf("EventsSince(%+v) = %v, %v; want a MissedError", cur, ids(evs), err)
			}
			if me.Missed.Reason != api.MissedRestarted || me.Missed.Epoch != newEpoch || me.Missed.Oldest != 1 || me.Missed.Newest != 2 {
				t.Errorf("missed %+v, want restarted, epoch %s, #1 to #2", me.Missed, newEpoch)
			}
			// A follower is told the same, before any change.
			got, done := after.follow(ctx, cur)
			if err := within(t, done, "Follow"); !errors.As(err, &me) {
				t.Errorf("Follow(%+v) = %v, want a MissedError", cur, err)
			}
			for ev := range drain(got) {
				t.Errorf("Follow(%+v) delivered #%d of a restarted daemon as if nothing was missed", cur, ev.ID)
			}
		})
	}
	if code, _, body := after.raw(http.MethodGet, "/v1/events?since="+strconv.FormatUint(last.ID, 10)); code != http.StatusGone {
		t.Errorf("GET /v1/events?since=%d after the restart: %d %s, want 410", last.ID, code, body)
	}
	// Its own epoch resumes.
	if evs, err := after.client.EventsSince(ctx, api.Cursor{Epoch: newEpoch, ID: 1}); err != nil || !slices.Equal(ids(evs), []uint64{2}) {
		t.Errorf("EventsSince #1 of the new epoch = %v, %v; want [2]", ids(evs), err)
	}
}

// Changes the history no longer keeps are missed, not skipped.
func TestResumePastTheHistoryIsMissed(t *testing.T) {
	e := startAPIWith(t, apiOptions{history: 2})
	ctx := context.Background()
	for _, cpu := range []int{6, 5, 4} {
		e.cpuOffline(cpu)
		e.next()
	}
	// Kept: #3 and #4; #2 is gone.
	epoch := e.server.Epoch()
	_, err := e.client.EventsSince(ctx, api.Cursor{Epoch: epoch, ID: 1})
	var me *api.MissedError
	if !errors.As(err, &me) || me.Missed.Reason != api.MissedExpired || me.Missed.Oldest != 3 {
		t.Fatalf("EventsSince #1 with #2 dropped = %v, want a MissedError expired, oldest #3", err)
	}
	got, done := e.follow(ctx, api.Cursor{Epoch: epoch, ID: 1})
	if err := within(t, done, "Follow"); !errors.As(err, &me) {
		t.Errorf("Follow since #1 = %v, want a MissedError", err)
	}
	for ev := range drain(got) {
		t.Errorf("Follow since #1 delivered #%d with #2 missing", ev.ID)
	}
	// From #2, or from the start, nothing is missing.
	if evs, err := e.client.EventsSince(ctx, api.Cursor{Epoch: epoch, ID: 2}); err != nil || !slices.Equal(ids(evs), []uint64{3, 4}) {
		t.Errorf("EventsSince #2 = %v, %v; want [3 4]", ids(evs), err)
	}
	if evs, err := e.client.Events(ctx); err != nil || !slices.Equal(ids(evs), []uint64{3, 4}) {
		t.Errorf("Events = %v, %v; want [3 4]", ids(evs), err)
	}
}
