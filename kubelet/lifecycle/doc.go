// Package lifecycle is what node-resized does to the kubelet: it stops
// and starts it, and makes its CPU and memory manager checkpoints safe for
// the machine before each start. Reading the kubelet is package kubelet;
// the checkpoints' formats and planner are package kubelet/checkpoint.
//
//   - Restarter restarts the kubelet's unit into a changed machine through
//     systemd: in one restart job when the unit has the pre-start drop-in,
//     otherwise stop, rewrite, start, with a stop record written first.
//     When to restart is not decided here.
//   - Recover and Run start a kubelet that the stop record says
//     node-resized stopped and did not start again.
//   - After a restart that rewrote a checkpoint, the Restarter watches the
//     kubelet's unit and journal and rolls back the file the kubelet
//     refused, starting it again.
//   - Prestart is `node-resized kubelet-prestart`, the ExecStartPre of the
//     kubelet's unit: every start, whoever asks for it, first makes the
//     checkpoints fit the machine.
//
// Its side effects are systemd jobs on the kubelet's unit, checkpoint
// writes (with their backups), and the stop record and the pre-start hold
// in node-resized's state directory. A stopped kubelet is always started
// again: every path that stops it ends in a start.
package lifecycle
