"""Artifacts' bytes: the service's uploads, retention deletes and orphan sweep, over a local
folder or an S3 bucket."""
