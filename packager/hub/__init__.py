"""Publishing to the Hugging Face Hub, and a local Hub-compatible server."""
