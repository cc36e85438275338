"""The broker process: a thin shell around the pure cores.

``server`` (the process: listener, request dispatch, start-up and shutdown), ``loop``
(the one zmq.Poller event loop; timers and coordinator callbacks as events),
``replica_manager`` (partition replicas and their logs), ``fetcher`` (follower fetch
sessions), ``purgatory`` (parked produce and fetch requests), ``limits``,
``metadata_cache``, ``controller_runner`` (the controller core, run while this broker
holds /controller) and ``admin_manager`` (admin requests written to the coordinator).

    python -m node.broker --config server.properties
"""
