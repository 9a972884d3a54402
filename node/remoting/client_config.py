"""CHECK_CLIENT_CONFIG: the Java 4.x push consumer asks each broker, as it starts, whether
a subscription that is not TAG can be served, and fails its start when not.

The expression is compiled as a pull would compile it (the read service's
``check_filter``: SUBSCRIBE on the group, then ``node/filter_expression.py``, the gRPC
doors' rules): SQL92 that does not parse is
answered SUBSCRIPTION_PARSE_FAILED with what is wrong and where, as RocketMQ answers it
(with its parser's message), so the consumer's ``start()`` reports the mistake instead of
pulling nothing.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import json

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.remoting.authentication import DoorHandler
from node.remoting.broker_pull import filter_expression
from node.rpc_status import AccessDenied, InvalidRequest
from node.services.caller import Caller
from node.services.registry import Services


class ClientConfigHandlers:
    def __init__(self, services: Services) -> None:
        self.reads = services.reads

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config)]

    async def check_client_config(self, request: RemotingCommand, connection, caller: Caller):
        try:
            body = json.loads(request.body)
            group = body.get("group")
            subscription = body["subscriptionData"]
            expression = subscription.get("subString") or ""
            expression_type = subscription.get("expressionType") or "TAG"
            if type(expression) is not str or type(expression_type) is not str:
                raise TypeError("subString and expressionType are strings")
            if type(group) is not str:
                raise TypeError("group is a string")
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            return request.reply(
                ResponseCode.SYSTEM_ERROR, f"body is not a CheckClientRequestBody: {error}"
            )
        try:
            self.reads.check_filter(caller, group, filter_expression(expression, expression_type))
        except AccessDenied:
            raise
        except InvalidRequest as error:
            return request.reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(error))
        return request.reply(ResponseCode.SUCCESS)
