"""Keys, signing and signature checks (OpenSSF model signing)."""
