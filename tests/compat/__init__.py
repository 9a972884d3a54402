"""The official RocketMQ client (rocketmq-python-client), unchanged, against ferrymq."""
