import asyncio
import json

import pytest

import agentgym
from agentgym import BaseEnv, Message, StepResult
from agentgym.errors import ConfigError
from agentgym.evaluation import EvalConfig, evaluate, run_suite, suites
from agentgym.evaluation.metrics import episode_key
from agentgym.evaluation.passk import mean_pass_at_k
from agentgym.evaluation.results import load_results
from agentgym.evaluation.suites import Suite, SuiteEntry, register_suite
from agentgym.policies.openai import BackendUnavailableError


class CoinEnv(BaseEnv):
    """Guess the coin: the answer is the seed's parity; some seeds fail like broken infra."""

    attempts: dict[int, int] = {}

    def __init__(self, broken: tuple[int, ...] = (), flaky: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.broken, self.flaky, self.seed = broken, flaky, 0

    async def _reset(self, seed, options):
        self.seed = seed
        return [Message("user", "heads or tails?")], {"task_id": f"coin-{seed}"}

    async def _step(self, action):
        n = CoinEnv.attempts[self.seed] = CoinEnv.attempts.get(self.seed, 0) + 1
        if self.seed in self.broken or (self.seed in self.flaky and n == 1):
            raise ConnectionError("the coin server went away")
        ok = action.content == ("heads" if self.seed % 2 else "tails")
        return StepResult((Message("user", "right" if ok else "wrong"),), reward=float(ok),
                          terminated=True, info={"success": ok})


agentgym.register("evaltest/Coin-v0", CoinEnv)


class Guesser:
    """Says heads on every other episode it starts: rollouts of one seed differ."""

    def __init__(self):
        self.started = 0

    def start(self, prompt, env):
        self.started += 1
        text = "heads" if self.started % 2 else "tails"

        class Episode:
            async def act(self):
                return Message("assistant", text), None

            def observe(self, observation):
                pass

        return Episode()


@pytest.fixture
def clean_registry():
    before = dict(suites._REGISTERED)
    yield
    suites._REGISTERED.clear()
    suites._REGISTERED.update(before)


def coin_suite(**kwargs):
    return Suite("coins", 1, (SuiteEntry("evaltest/Coin-v0", "coin", tuple(range(6)), 4,
                                         kwargs=kwargs),)).resolve()


def test_errors_are_retried_then_counted_never_scored(tmp_path):
    CoinEnv.attempts.clear()
    suite = coin_suite(broken=(0,), flaky=(1,))
    trajs = asyncio.run(run_suite(suite, Guesser(), tmp_path, concurrency=3, retries=1))
    assert len(trajs) == 24
    assert len({episode_key(t) for t in trajs}) == 24
    errors = [t for t in trajs if not t.scorable]
    assert {t.seed for t in errors} == {0} and len(errors) == 4  # seed 1 recovered on retry
    assert CoinEnv.attempts[0] == 8  # 4 rollouts, each tried twice
    from agentgym.evaluation.metrics import summarize

    m = summarize(trajs, k=2)
    assert m["errors"] == 4 and m["error_rate"] == pytest.approx(4 / 24)
    assert m["tasks"] == 6 and m["pass@2_tasks"] == 5  # seed 0 has no scorable rollout
    ok = [t for t in trajs if t.scorable]
    counts = {}
    for t in ok:
        n, c = counts.get(t.seed, (0, 0))
        counts[t.seed] = (n + 1, c + int(t.outcome_reward == 1.0))
    assert m["pass@2"] == pytest.approx(mean_pass_at_k(counts.values(), 2)[0])
    assert m["success_rate"] == pytest.approx(sum(c for _, c in counts.values()) / len(ok))


def test_resume_after_truncation_keeps_the_valid_part(tmp_path, clean_registry):
    register_suite({"name": "mini", "entries": [
        {"env": "agentgym/Sokoban-v0", "tasks": 3, "seed": 100, "rollouts": 2},
        {"env": "agentgym/MentalMath-v0", "tasks": 2, "split": "test", "name": "mm"}]})
    config = EvalConfig(suite="mini", policy="scripted", concurrency=2)
    first = evaluate(config, tmp_path, log=lambda m: None)
    assert first["metrics"]["overall"]["episodes"] == 8
    path = tmp_path / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    kept = [json.loads(x)["id"] for x in lines[:5]]
    path.write_text("".join(lines[:5]) + lines[5][: len(lines[5]) // 2])  # killed mid-write
    messages = []
    second = evaluate(config, tmp_path, log=messages.append)
    assert any("line 6: truncated" in m for m in messages), messages
    assert any("resuming: 5 episodes" in m for m in messages), messages
    assert not any("run again" in m for m in messages)
    final = load_results(path)
    assert final.problems == () and len(final.trajectories) == 8
    ids = [t.id for t in final.trajectories]
    assert ids[:5] == kept and len(set(ids) - set(kept)) == 3  # only the missing ones re-ran
    assert (tmp_path / "results.jsonl.bad").exists()
    assert second["metrics"]["overall"]["success_rate"] == 1.0
    # A corrupt line in the middle is reported as corrupt and dropped, the rest kept.
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = "{not json\n"
    path.write_text("".join(lines))
    messages.clear()
    evaluate(config, tmp_path, log=messages.append)
    assert any("line 3: corrupt" in m for m in messages)
    assert len(load_results(path).trajectories) == 8
    # Other settings in the same folder: a clear error, not a silent mix.
    with pytest.raises(ConfigError, match="different settings .*k"):
        evaluate(EvalConfig(suite="mini", policy="scripted", k=2), tmp_path)


def test_deterministic_under_a_seed_for_greedy_decoding(tmp_path, tiny_model_dir, clean_registry):
    register_suite({"name": "mm2", "entries": [
        {"env": "agentgym/MentalMath-v0", "tasks": 3, "split": "test", "name": "mm"}]})
    runs = []
    for folder in ("a", "b"):
        config = EvalConfig(suite="mm2", policy=f"hf:{tiny_model_dir}", max_tokens=8, seed=3)
        results = evaluate(config, tmp_path / folder, log=lambda m: None)
        trajs = load_results(tmp_path / folder / "results.jsonl").trajectories
        runs.append(([s.action.content for t in trajs for s in t.steps],
                     results["metrics"]["overall"]))
    assert results["temperature"] == 0.0
    assert runs[0][0] == runs[1][0]
    assert runs[0][1]["completion_tokens_per_episode"] > 0
    assert {k: v for k, v in runs[0][1].items() if "wall" not in k} == {
        k: v for k, v in runs[1][1].items() if "wall" not in k}


def test_endpoint_down_fails_before_any_episode(tmp_path, clean_registry):
    register_suite({"name": "mm1", "entries": [
        {"env": "agentgym/MentalMath-v0", "tasks": 1, "name": "mm"}]})
    config = EvalConfig(suite="mm1", policy="openai:http://127.0.0.1:9/v1", model="m")
    with pytest.raises(BackendUnavailableError, match="no OpenAI-compatible server answers"):
        evaluate(config, tmp_path, log=lambda m: None)
    assert not (tmp_path / "results.jsonl").exists() or not (
        tmp_path / "results.jsonl").read_text().strip()


def test_unknown_suite_and_bad_k():
    with pytest.raises(ConfigError, match="did you mean 'sokoban'"):
        evaluate(EvalConfig(suite="sokobann", policy="random"), "unused")
    with pytest.raises(ConfigError, match="k must be >= 1"):
        EvalConfig(suite="sokoban", policy="random", k=0)
