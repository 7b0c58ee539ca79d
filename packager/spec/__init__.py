"""The release spec (release.toml): its model, rules and check."""
