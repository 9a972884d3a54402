"""CHECK_CLIENT_CONFIG: the Java 4.x push consumer asks each broker, as it starts, whether
a subscription that is not TAG can be served, and fails its start when not.

The expression is compiled as a pull would compile it (``broker_pull.filter_expression``
and ``node/filter_expression.py``, the gRPC doors' rules): SQL92 that does not parse is
answered SUBSCRIPTION_PARSE_FAILED with what is wrong and where, as RocketMQ answers it
(with its parser's message), so the consumer's ``start()`` reports the mistake instead of
pulling nothing.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import json

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.filter_expression import selection
from node.remoting.broker_pull import filter_expression
from node.remoting.dispatch import Handler
from node.rpc_status import InvalidRequest

MAX_EXPRESSION_CHARS = 4096


class ClientConfigHandlers:
    def handlers(self) -> list[tuple[int, Handler]]:
        return [(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config)]

    async def check_client_config(self, request: RemotingCommand, connection) -> RemotingCommand:
        try:
            body = json.loads(request.body)
            subscription = body["subscriptionData"]
            expression = subscription.get("subString") or ""
            expression_type = subscription.get("expressionType") or "TAG"
            if type(expression) is not str or type(expression_type) is not str:
                raise TypeError("subString and expressionType are strings")
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            return request.reply(
                ResponseCode.SYSTEM_ERROR, f"body is not a CheckClientRequestBody: {error}"
            )
        if len(expression) > MAX_EXPRESSION_CHARS:
            return request.reply(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"expression is {len(expression)} characters, the limit is {MAX_EXPRESSION_CHARS}",
            )
        try:
            selection(filter_expression(expression, expression_type))
        except InvalidRequest as error:
            return request.reply(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(error))
        return request.reply(ResponseCode.SUCCESS)
