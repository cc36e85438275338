"""Consumer groups through the brokers' group coordinator, measured and exercised with
real Kafka clients (issue 26).

    member   one group member as a process (confluent-kafka classic or KIP-848,
             kafka-python, aiokafka), telling what happens as JSON lines
    group    the parent's side: start members (also ``kcat -G``), follow them, signal
             them, wait until a set of members owns a topic
"""
