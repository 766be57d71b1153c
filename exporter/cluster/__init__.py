"""The collector: Kueue objects and PodGroups parsed into records, joined, rendered as metrics.

Modules: ``workloads``, ``localqueues``, ``topologies``, ``nodes``, ``podgroups`` (one per
object kind: parser and metric families), ``store`` (state and indexes), ``gangs`` (the
Workload-PodGroup join), ``collector`` (assembly), ``main`` (the ``gangscope collector`` command).
The package itself imports nothing, so the node agent can reuse ``topologies`` cheaply.
"""
