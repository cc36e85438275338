"""The cluster supervisor: start, stop, kill, pause and scale the processes of a cluster
on this machine (``minikafka cluster ...``).

``supervisor`` (``Cluster``: processes, pid and log files, cluster.json, readiness,
membership), ``scale`` (add-broker and remove-broker with their data movement) and
``cli`` (the command line).
"""
from node.cluster.supervisor import (BROKERS_MAX, CLUSTER_FILE, HOST, READY_TIMEOUT_S,
                                     STOP_GRACE_S, Cluster, ClusterError, Process,
                                     ProcessStatus, new_cluster_id, parse_config_pairs)

__all__ = ["Cluster", "ClusterError", "Process", "ProcessStatus", "new_cluster_id",
           "parse_config_pairs", "BROKERS_MAX", "CLUSTER_FILE", "HOST", "READY_TIMEOUT_S",
           "STOP_GRACE_S"]
