"""Data providers (data.json) and credentials (credential.json)."""
