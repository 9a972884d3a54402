"""The generated gRPC and protobuf modules (``ferrymq.protocol``, from ``proto/``):
current, and the official RocketMQ 5 wire format."""
