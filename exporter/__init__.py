"""gangscope: per-job, per-topology-domain observability for Kubernetes GPU training clusters."""

__version__ = "0.1.0"
