"""Kubernetes access: credentials, discovery of served API versions, list/watch informers."""
