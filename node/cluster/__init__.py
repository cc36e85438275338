"""The cluster supervisor: start, stop, kill, pause and scale the processes of a cluster
on this machine (``minikafka cluster ...``).

    supervisor   Cluster: up, open, readiness, stop, start, down, add and forget a broker
    layout       the directory: cluster.json, server.properties, command lines (a mixin)
    namespaces   the --netns glue: a namespace per process, meshed (a mixin)
    faults       kill, pause, power cut, move the controller, cut and heal (a mixin)
    inspection   status and the coordinator's view (a mixin)
    process      one supervised process (pid file, log, signals) and ClusterError
    netns        the namespaces and veth mesh themselves (root only)
    scale        add-broker and remove-broker with their data movement
    view         one consistent picture of a running cluster, and what changed
    cli          the command line
"""
from node.cluster.supervisor import (BROKERS_MAX, CLUSTER_FILE, HOST, READY_TIMEOUT_S,
                                     STOP_GRACE_S, Cluster, ClusterError, Process,
                                     ProcessStatus, new_cluster_id, parse_config_pairs)

__all__ = ["Cluster", "ClusterError", "Process", "ProcessStatus", "new_cluster_id",
           "parse_config_pairs", "BROKERS_MAX", "CLUSTER_FILE", "HOST", "READY_TIMEOUT_S",
           "STOP_GRACE_S"]
