"""Shared foundations: typed errors, exit statuses, secret redaction."""
