"""What the host console and `tunnel attach` share: typed commands and their completion, the
conversation as a terminal shows it, the screens (a prompt line, or plain lines), raw mode."""
