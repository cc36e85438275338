"""Which ``__consumer_offsets`` partition holds a group: Kafka's rule, so that a dump of
the topic places every group where Kafka would.

Kafka (GroupCoordinatorService.partitionFor): ``Utils.abs(groupId.hashCode()) % partitions``,
where ``hashCode`` is Java's String.hashCode (over UTF-16 code units, 32-bit wrapping) and
``Utils.abs`` maps Integer.MIN_VALUE to 0. (Not ``hash & 0x7fffffff``: that is the
producer's partitioner; for a negative hash the two differ.)
"""

_INT_MIN = -(1 << 31)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1], as a signed 32-bit int."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's Utils.abs: Math.abs except that Integer.MIN_VALUE gives 0."""
    assert _INT_MIN <= n < (1 << 31)
    return 0 if n == _INT_MIN else abs(n)


def partition_for(group_id: str, partitions: int) -> int:
    if partitions <= 0:
        raise ValueError(f"__consumer_offsets has {partitions} partitions")
    return java_abs(java_string_hash(group_id)) % partitions
