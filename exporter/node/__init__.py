"""The node agent: NVML, kubelet pod-resources, pods, the Node, fabric counters, served as metrics."""
