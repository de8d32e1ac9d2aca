# What a drive link could make an agent try on the host (tests/host/test_sandbox_share.py).
# Usage: bash probe.sh HOST_KEY SHARE_SECRETS LOG_DB READ_ONLY_DIR OUTSIDE_DIR PORT
# Prints "RESULT <attempt> yes|no" per attempt (yes: it worked), then "RESULT done yes".
key=$1 secrets=$2 logdb=$3 shared=$4 outside=$5 port=$6

check() {
    if (eval "$2") >/dev/null 2>&1; then echo "RESULT $1 yes"; else echo "RESULT $1 no"; fi
}

check ssh_key 'grep -q "PRIVATE KEY" "$HOME/.ssh/id_ed25519"'
check host_key 'grep -q "PRIVATE KEY" "$key"'
check push_key 'grep -q "PRIVATE KEY" "$key.vapid"'
check share_secrets 'grep -q drive "$secrets"'
check log_db 'grep -q "SQLite format" "$logdb"'
check shadow 'grep -q "^root:" /etc/shadow'
check caps '! grep -Eq "^CapEff:[[:space:]]*0+$" /proc/self/status'
check userns 'unshare -r true'
check setuid '[ -u ./suid-id ] && [ "$(./suid-id -u)" != "$(id -u)" ]'
check connect 'exec 3<>"/dev/tcp/127.0.0.1/$port"'
check allowed_config 'grep -q allowed "$HOME/.config/tool/settings"'
check workspace_read 'grep -q milk notes.txt'
check workspace_write 'echo made > made-inside.txt'
# Writes whose effect the test looks for on the host.
echo pwned >> "$HOME/.bashrc" 2>/dev/null
echo pwned > "$shared/pwned" 2>/dev/null
echo pwned > "$outside/pwned" 2>/dev/null
echo "RESULT done yes"
# A shell tool that reads the command's terminal may stop reading when the command exits: Gemini
# CLI's, on a loaded machine, once handed back the output cut after the attempt before `setuid`,
# with the checks after it and this line missing. A moment before exiting lets it read all.
sleep 0.5
