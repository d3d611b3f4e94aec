"""Consumer groups: Kafka's classic group protocol and KIP-848's consumer protocol, with the
broker as the group coordinator.

DDIA ch. 11: a log-based broker shares a stream among consumers in two ways. Load
balancing: the members of one group split the partitions between them. Fan-out: every
group reads every message, each at its own committed offsets.

- ``group.py``        a group and its members, and the state diagram every change of state is checked against;
- ``coordinator.py``  the state machine: joins, generations, rebalances, session expiry (given its store and clock);
- ``store.py``        committed offsets and group metadata in the compacted ``__consumer_offsets``
                      topic, replayed when the broker starts;
- ``assignment.py``   the consumer protocol's assignment layout, to refuse malformed ones;
- ``membership.py``, ``commits.py``, ``admin.py``  the group API handlers (listed in ``broker/apis``);
- ``consumer_group.py``  KIP-848's consumer protocol (``group.protocol=consumer``): the broker assigns with
                      ``assignors.py`` (uniform, range) and members reconcile towards it; handlers in
                      ``consumer_group_apis.py``; its groups and members kept in ``__consumer_offsets``
                      by ``consumer_group_store.py``.

In the classic protocol partition assignment itself is done by the clients (range, roundrobin, cooperative-sticky):
the coordinator picks a protocol every member supports, hands the leader everyone's
subscription and passes the leader's assignment on, opaque.
"""
