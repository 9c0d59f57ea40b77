package systemd

import "context"

// Reload makes systemd reload every unit file and drop-in (the manager's
// Reload, what systemctl daemon-reload does) and returns once it has.
func (c *Client) Reload(ctx context.Context) error {
	conn, err := c.connect()
	if err != nil {
		return err
	}
	if err := conn.ReloadContext(ctx); err != nil {
		return c.callError(conn, "reload systemd's units", err)
	}
	return nil
}
