"""The one exception type of the SDK: a status code the node (or the transport) answered."""

from __future__ import annotations

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb

# Outcomes after which sending again may succeed. A retried send whose first attempt was in
# fact stored is a duplicate with the same message id, which consumers can recognise.
RETRIABLE_CODES = frozenset(
    {
        pb.TOO_MANY_REQUESTS,
        pb.INTERNAL_SERVER_ERROR,
        pb.MASTER_PERSISTENCE_TIMEOUT,
        pb.SLAVE_PERSISTENCE_TIMEOUT,
        pb.HA_NOT_AVAILABLE,
        pb.PROXY_TIMEOUT,
        pb.REQUEST_TIMEOUT,
    }
)
TRANSPORT = -1  # the RPC itself failed (node down, deadline): ``code_name`` says how
# The node's answer did not decode (code_name MALFORMED_ANSWER): a node's bug, reported
# rather than handed on as messages.
MALFORMED_ANSWER = -2
# Transport failures that trying again cannot fix: the node refused the credentials.
REFUSED_CODE_NAMES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})


class FerryError(Exception):
    """A request failed. ``code`` is an ``apache.rocketmq.v2.Code`` value (or a google.rpc
    code for Admin calls, or ``TRANSPORT``); ``code_name`` its name."""

    def __init__(self, code: int, code_name: str, message: str, *, unsent: bool = False) -> None:
        """``unsent``: the request never left this client (its connection could not be
        opened), so the node cannot have acted on it: a send failed, it did not end with
        an unknown outcome."""
        super().__init__(f"{code_name}: {message}")
        self.code = code
        self.code_name = code_name
        self.detail = message
        self.unsent = unsent

    @property
    def retriable(self) -> bool:
        if self.code == TRANSPORT:
            return self.code_name not in REFUSED_CODE_NAMES
        return self.code in RETRIABLE_CODES


def check(status: pb.Status, *also_ok: int) -> None:
    """Raise ``FerryError`` unless the status is OK (or one of ``also_ok``)."""
    if status.code in (pb.OK, *also_ok):
        return
    try:
        name = pb.Code.Name(status.code)
    except ValueError:
        name = str(status.code)
    raise FerryError(status.code, name, status.message)


ADMIN_CODE_NAMES = {
    3: "INVALID_ARGUMENT",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    9: "FAILED_PRECONDITION",
    13: "INTERNAL",
    14: "UNAVAILABLE",
}


def check_admin(status) -> None:
    if status.code != 0:
        name = ADMIN_CODE_NAMES.get(status.code, str(status.code))
        raise FerryError(status.code, name, status.message)
