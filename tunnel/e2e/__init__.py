"""End-to-end security: host identity, share links and secrets, channel keys, the sealed channel."""
