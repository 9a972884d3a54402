"""Consumer-ids notices on a clock of the test's: a member that stops heartbeating is
noticed gone at the next heartbeat after the expiry check interval, and the members left
are told; closed connections and former members are told nothing."""

from __future__ import annotations

import asyncio

from ferrymq.codec.remoting_codes import RequestCode
from node.group_members import GroupMembers
from node.remoting.consumer_notices import EXPIRY_CHECK_MS, ConsumerNotices

LIFETIME_MS = 120_000


class Connection:
    def __init__(self) -> None:
        self.closed = False
        self.notices: list[str] = []

    def send_oneway(self, command) -> bool:
        assert command.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
        self.notices.append(command.ext_fields["consumerGroup"])
        return True


def test_an_expired_member_is_noticed_and_the_others_told():
    async def scenario() -> None:
        now = [1_000_000]
        members = GroupMembers(lambda: now[0])
        notices = ConsumerNotices(members, lambda: now[0])
        first, second = Connection(), Connection()

        async def heartbeat(client_id: str, connection: Connection) -> None:
            members.heartbeat("g", client_id, "address 127.0.0.1", LIFETIME_MS)
            notices.heard("g", client_id, connection)
            await asyncio.sleep(0)  # notices go out on the loop's next turn

        await heartbeat("a", first)
        await heartbeat("b", second)
        assert first.notices == ["g", "g"] and second.notices == ["g"]
        now[0] += LIFETIME_MS // 2
        await heartbeat("a", first)  # a known member: no change
        assert first.notices == ["g", "g"]
        now[0] += LIFETIME_MS // 2 + EXPIRY_CHECK_MS  # b's last heartbeat is too old now
        await heartbeat("a", first)
        assert first.notices == ["g", "g", "g"] and second.notices == ["g"]
        second.closed = True
        await heartbeat("b", second)  # b back, over a connection that has closed since
        assert first.notices == ["g"] * 4 and second.notices == ["g"]

    asyncio.run(scenario())
