"""Share groups (KIP-932): queues on the log, DDIA ch. 11's JMS/AMQP style over Kafka's logs.

Each record goes to one of many consumers, which acknowledges it after processing; a record
whose consumer dies unacknowledged is redelivered to another after its acquisition lock
expires; a record that keeps failing is archived and dead-lettered.

- ``partition.py``     the share-partition state machine (available, acquired, acknowledged, archived)
- ``coordinator.py``   members, epochs, assignment, expiry, share sessions (given its clock and store)
- ``assignor.py``      which partitions each member fetches from (Kafka's ``simple`` rule), a pure function
- ``configs.py``       the group configs, Kafka's names and defaults
- ``store.py``         durable state in the compacted ``__share_group_state`` topic
- ``state_records.py`` that topic's name and the records a persisted state lists, for its readers
- ``dead_letters.py``  KIP-1191 dead letters, and their writer (through the broker's Appender)
- ``apis.py``          the ShareGroupHeartbeat / ShareGroupDescribe / ShareFetch / ShareAcknowledge handlers
"""
