"""Side-by-side benchmark of ferrymq against NATS JetStream, Redis Streams, RabbitMQ
quorum queues, Apache Kafka and Apache RocketMQ: ``python -m bench.peers --json [--quick]``
(see ``__main__``).

This package's ``__init__`` and ``bootstrap`` use the standard library only, so that the
command can start from a system Python and set up its own environment first.
"""
