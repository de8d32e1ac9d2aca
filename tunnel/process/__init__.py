"""What every command's process shares: logging, signals, task-group errors, reconnect backoff."""
