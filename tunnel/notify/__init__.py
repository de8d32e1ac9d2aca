"""Approval notifications: Web Push to teammates' browsers, webhooks and local commands, fed by
the conversation log (docs/notifications.md)."""
