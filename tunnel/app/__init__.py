"""The application messages inside a `session` channel: teammate requests and host messages."""
