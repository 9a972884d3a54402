"""The Admin RPCs for users and ACL entries: requests become routing commands.

A secret key is sealed here, on the node that takes the request (``node.secret_box``), so
only the sealed form enters the Raft log; responses never carry a secret.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.secret_box import SecretBox
from routing.acl import AclEntry, Action, Effect, ResourceKind, User
from routing.commands import (
    CommandResult,
    CreateUser,
    DeleteUser,
    GrantAcl,
    RevokeAcl,
    UpdateUser,
)
from routing.replica import RoutingReplica

SECRET_MIN_LENGTH = 8
EFFECTS = {api.ACL_ALLOW: Effect.ALLOW, api.ACL_DENY: Effect.DENY}
ACTIONS = {api.ACL_PUBLISH: Action.PUBLISH, api.ACL_SUBSCRIBE: Action.SUBSCRIBE}
KINDS = {api.ACL_TOPIC: ResourceKind.TOPIC, api.ACL_GROUP: ResourceKind.GROUP}
INVALID_ARGUMENT, FAILED_PRECONDITION = 3, 9

Change = Callable[[object], Awaitable[tuple[api.Status, CommandResult | None]]]


def entry_of(message: api.AclEntry) -> AclEntry:
    """``ValueError`` when a field is unspecified."""
    try:
        return AclEntry(
            EFFECTS[message.effect], ACTIONS[message.action], KINDS[message.kind], message.pattern
        )
    except KeyError:
        raise ValueError("an ACL entry needs an effect, an action and a resource kind") from None


def entry_message(entry: AclEntry) -> api.AclEntry:
    return api.AclEntry(
        effect=api.AclEffect.Value(f"ACL_{entry.effect.value}"),
        action=api.AclAction.Value(f"ACL_{entry.action.value}"),
        kind=api.AclResourceKind.Value(f"ACL_{entry.kind.value}"),
        pattern=entry.pattern,
    )


def user_message(user: User) -> api.User:
    return api.User(
        access_key=user.access_key,
        admin=user.admin,
        acl=[entry_message(entry) for entry in user.acl],
    )


class UserAdmin:
    def __init__(self, routing: RoutingReplica, box: SecretBox | None, change: Change) -> None:
        self.routing = routing
        self.box = box
        self.change = change

    def _sealed(self, access_key: str, secret_key: str) -> bytes | api.Status:
        if self.box is None:
            return api.Status(
                code=FAILED_PRECONDITION,
                message="users need a cluster secret (cluster.secret) to encrypt their keys",
            )
        if len(secret_key) < SECRET_MIN_LENGTH:
            return api.Status(
                code=INVALID_ARGUMENT,
                message=f"ILLEGAL_USER: a secret key has {SECRET_MIN_LENGTH} characters or more",
            )
        return self.box.seal(access_key, secret_key)

    async def create(self, request: api.CreateUserRequest) -> api.CreateUserResponse:
        sealed = self._sealed(request.access_key, request.secret_key)
        if isinstance(sealed, api.Status):
            return api.CreateUserResponse(status=sealed)
        status, result = await self.change(CreateUser(request.access_key, sealed, request.admin))
        if result is None:
            return api.CreateUserResponse(status=status)
        return api.CreateUserResponse(status=status, user=user_message(result.value))

    async def update(self, request: api.UpdateUserRequest) -> api.UpdateUserResponse:
        sealed = b""
        if request.secret_key:
            sealed = self._sealed(request.access_key, request.secret_key)
            if isinstance(sealed, api.Status):
                return api.UpdateUserResponse(status=sealed)
        admin = request.admin if request.HasField("admin") else None  # unset: keep it
        status, result = await self.change(UpdateUser(request.access_key, sealed, admin))
        if result is None:
            return api.UpdateUserResponse(status=status)
        return api.UpdateUserResponse(status=status, user=user_message(result.value))

    async def delete(self, request: api.DeleteUserRequest) -> api.DeleteUserResponse:
        status, _ = await self.change(DeleteUser(request.access_key))
        return api.DeleteUserResponse(status=status)

    def list(self) -> api.ListUsersResponse:
        users = self.routing.read(lambda state: sorted(state.users.values(), key=_by_key))
        return api.ListUsersResponse(
            status=api.Status(code=0, message="OK"), users=[user_message(u) for u in users]
        )

    async def grant(self, request: api.GrantAclRequest) -> api.GrantAclResponse:
        return await self._acl(GrantAcl, request, api.GrantAclResponse)

    async def revoke(self, request: api.RevokeAclRequest) -> api.RevokeAclResponse:
        return await self._acl(RevokeAcl, request, api.RevokeAclResponse)

    async def _acl(self, command_class, request, response_class):
        try:
            entry = entry_of(request.entry)
        except ValueError as error:
            return response_class(
                status=api.Status(code=INVALID_ARGUMENT, message=f"ILLEGAL_ACL: {error}")
            )
        status, result = await self.change(command_class(request.access_key, entry))
        if result is None:
            return response_class(status=status)
        return response_class(status=status, user=user_message(result.value))


def _by_key(user: User) -> str:
    return user.access_key
