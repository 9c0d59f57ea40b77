//go:build !linux

package hotplug

import (
	"context"
	"errors"
	"time"
)

func openSysfs(string) (int, error) { return -1, errors.ErrUnsupported }

// write is not implemented off Linux: there are no hotplug files.
func (w *Writer) write(_ context.Context, _ time.Duration, path, value string) error {
	return &WriteError{Path: path, Value: value, Err: errors.ErrUnsupported}
}
