"""The teammate's end: attach to a shared host through the relay, from Python or a terminal."""
