"""scripts.multi_turn_chat on a tiny Llama on the CPU, timed by a clock of engine steps (so every
arrival is deterministic): users' turns arrive staggered, each a think time after that user's
previous reply ended, and their prompts grow with the conversation."""

import pytest

from pipeline.engine import LLMEngine
from scripts.multi_turn_chat import ChatPlan, active_users, chat, draws, ttft_summary
from tests.integration.test_engine_parallel import tiny  # noqa: F401

PLAN = ChatPlan(
    num_users=4, num_turns=3, message_len=6, reply_len=3, think_s=4.0, start_window_s=12.0
)


class StepClock:
    """Time in engine steps."""

    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def stepped(self) -> None:
        self.t += 1.0


@pytest.mark.slow
def test_each_users_next_turn_arrives_its_think_time_after_its_previous_reply(tiny):  # noqa: F811
    root, _ = tiny
    engine = LLMEngine.from_engine_dir(root / "engine-tp1-pp1", device="cpu", num_kv_blocks=16)
    try:
        turns = chat(engine, PLAN, 100, StepClock())
        stats = engine.stats()
    finally:
        engine.close()
    _, think, offsets = draws(PLAN, 100)
    assert len(turns) == PLAN.num_users * PLAN.num_turns
    for user in range(PLAN.num_users):
        own = [t for t in turns if t.user == user]
        assert [t.index for t in own] == list(range(PLAN.num_turns))
        assert own[0].arrival_s == offsets[user]
        for before, after in zip(own, own[1:], strict=False):
            assert after.arrival_s == before.finish_s + think[user, before.index]
        assert all(t.arrival_s < t.first_token_s <= t.finish_s for t in own)
    # the later turns start with the conversation so far: the prefix cache holds some of it
    assert stats["num_prefix_hit_tokens"] > 0
    assert ttft_summary(turns)["num_turns"] == len(turns)
    assert active_users(turns)["active_users_mean"] < PLAN.num_users
