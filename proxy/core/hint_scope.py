"""Whose is what a hint names (issue 22): sessions and agent names, per tenant and principal.

A hint acts only inside its caller's scope: the tenant (``cache_salt``, as the request path keys
sessions and agents) and the principal (a hash of the caller's credential, computed at the edge).
``owners`` remembers which principal last sent a session's requests (the live edge records it for
every accepted request); ``names`` binds a runtime agent name to the fingerprinted agent, per
(tenant, principal, name), so tenant B saying ``coder`` never reaches tenant A's ``coder``. Both
tables are byte-bounded (``HintConfig.state_max_bytes`` each, least recently used first). In
``strict`` mode (the live proxy) a session whose owner is not known is nobody's; otherwise (the
core tests and the replay, one principal ``""``) an unknown owner is the default principal. Pure.
"""

from __future__ import annotations

from .hint_tables import ByteLRU, key_bytes, str_bytes

SessionKey = tuple[str, str]  # (tenant, session id): the core's session key


class HintScope:
    def __init__(self, budget: int, strict: bool = False) -> None:
        self.owners: ByteLRU[SessionKey, str] = ByteLRU(budget)
        self.names: ByteLRU[tuple[str, str, str], str] = ByteLRU(budget)
        self.strict = strict

    def own(self, tenant: str, session_id: str, principal: str) -> None:
        """A request of ``session_id`` from ``principal`` was accepted by the engine."""
        key = (tenant, session_id)
        if self.owners.get(key) == principal:
            self.owners.touch(key)
        else:
            self.owners.put(key, principal, key_bytes(key) + str_bytes(principal))

    def owns(self, tenant: str, session_id: str, principal: str) -> bool:
        owner = self.owners.get((tenant, session_id))
        if owner is None:
            return not self.strict and principal == ""
        return owner == principal

    def bind(self, tenant: str, principal: str, name: str, agent_id: str) -> None:
        key = (tenant, principal, name)
        if self.names.get(key) == agent_id:
            self.names.touch(key)
        else:
            self.names.put(key, agent_id, key_bytes(key) + str_bytes(agent_id))

    def agent(self, tenant: str, principal: str, name: str | None) -> str | None:
        return self.names.get((tenant, principal, name)) if name else None

    def named(self, tenant: str = "", principal: str = "") -> dict[str, str]:
        """The names bound in one scope (introspection, tests)."""
        return {k[2]: v for k, v in self.names.items() if k[0] == tenant and k[1] == principal}
