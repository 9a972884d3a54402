"""Kubernetes manifests for a 3-node and a 6-node cluster, and the same topology for
``podman kube play`` and compose on one host (``manifests.py`` writes them all)."""
