"""What the host console and `tunnel attach` share: typed commands, rendering, stdin lines."""
