"""Helpers every layer shares, written once: file hashing and atomic writes (`files`), library
versions and timestamps (`versions`), versioned manifests (`manifests`), the user cache (`cache`)."""
