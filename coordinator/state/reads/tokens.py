"""Reads of enrollment and operator tokens: pages of them oldest first, and whether an
enrollment token could enroll a host now. Nothing here changes state (``store.py`` does)."""

from __future__ import annotations

from coordinator.state.reads.common import Reader
from coordinator.state.records import EnrollmentToken, OperatorToken


class TokenReads(Reader):
    """The token reads of `Queries`."""

    async def enrollment_tokens(self, limit: int, offset: int) -> tuple[list[EnrollmentToken], int, bool]:
        """Tokens oldest first from ``offset``, the Redis clock, and whether more follow."""
        k = self.keys
        raw, now_ms, more = await self._tokens_by_age(k.enrollment_tokens_by_age, k.enrollment_tokens, limit, offset)
        return [EnrollmentToken.from_json(v) for v in raw], now_ms, more

    async def operator_tokens(self, limit: int, offset: int) -> tuple[list[OperatorToken], int, bool]:
        """Operator tokens oldest first from ``offset``, the Redis clock, and whether more follow."""
        k = self.keys
        raw, now_ms, more = await self._tokens_by_age(k.operator_tokens_by_age, k.operator_tokens, limit, offset)
        return [OperatorToken.from_json(v) for v in raw], now_ms, more

    async def _tokens_by_age(self, by_age: str, records: str, limit: int,
                             offset: int) -> tuple[list[bytes], int, bool]:
        """A page of token records from ``offset`` of their age index (tokens are never deleted, so
        offsets are stable), the Redis clock (ms, as the scripts read it), and whether more follow."""
        ids = await self.redis.zrange(by_age, offset, offset + limit)
        more = len(ids) > limit
        ids = ids[:limit]
        async with self._pipeline() as pipe:
            if ids:
                pipe.hmget(records, ids)
            replies, now = await self._with_clock(pipe)
        raw = [v for v in replies[0] if v is not None] if ids else []
        return raw, now, more

    async def enrollment_token_known(self, digest: str) -> bool:
        """Whether an enrollment token of this digest was ever minted (and not yet purged): the
        one refusal an enrollment can have before its body, since the identical retry of a
        completed enrollment is answered even after its token was used up, expired or revoked."""
        return bool(await self.redis.hexists(self.keys.enrollment_token_hashes, digest))

    async def enrollment_token_usable(self, digest: str) -> bool:
        """Whether an enrollment token could enroll a new host now (a read, for ordering errors)."""
        k = self.keys
        async with self._pipeline() as pipe:
            pipe.hget(k.enrollment_token_hashes, digest)
            (token_id,), now = await self._with_clock(pipe)
        if token_id is None:
            return False
        raw = await self.redis.hget(k.enrollment_tokens, token_id)
        if raw is None:
            return False
        token = EnrollmentToken.from_json(raw)
        return not token.revoked and token.uses < token.max_uses and now < token.expires_at
