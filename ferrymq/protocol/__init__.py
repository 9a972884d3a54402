"""Generated protocol modules (do not edit: ``python proto/generate.py`` writes them).

``ferrymq.protocol.apache.rocketmq.v2`` holds the RocketMQ 5 messages and the
MessagingService stubs; ``ferrymq.protocol.ferrymq`` holds ferrymq's Admin service.
"""
