"""The pure protocol cores: ``replication`` (one partition replica's state machine),
``controller`` (elections, ISR, reassignment, controlled shutdown) and ``placement``
(replica assignment). They take events and return effects as data; no sockets, files,
clocks or unseeded randomness. They import only ``node.wire``.
"""
