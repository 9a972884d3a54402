"""ferrymq's client SDK: it speaks the node's gRPC protocol (apache.rocketmq.v2 plus
ferrymq's Admin and Data services) and adds batch send and offset-based pull with group
rebalancing."""

from ferrymq.client.admin import Admin
from ferrymq.client.errors import FerryError
from ferrymq.client.lite_consumer import LiteConsumer
from ferrymq.client.messages import Message, ReceivedMessage, SendReceipt
from ferrymq.client.producer import Producer
from ferrymq.client.pull_consumer import PullConsumer
from ferrymq.client.security import ClientSecurity
from ferrymq.client.simple_consumer import SimpleConsumer

__all__ = [
    "Admin",
    "ClientSecurity",
    "FerryError",
    "LiteConsumer",
    "Message",
    "Producer",
    "PullConsumer",
    "ReceivedMessage",
    "SendReceipt",
    "SimpleConsumer",
]
