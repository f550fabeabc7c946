"""Register a new environment in a few lines, then check it and play it with a script."""

import asyncio

import agentgym
from agentgym import BaseEnv, Message, StepResult


class GuessEnv(BaseEnv):
    """Guess a secret number from 1 to 10; the env says higher or lower."""

    async def _reset(self, seed, options):
        self.secret = int(self.np_random.integers(1, 11))
        return [Message("user", "Guess my number (1-10).")], {"task_id": f"guess-{seed}"}

    async def _step(self, action):
        guess = action.content.strip()
        if not guess.isdigit():
            return StepResult((Message("user", "Reply with a number."),), 0.0,
                              info={"valid": False})
        hint = "correct!" if int(guess) == self.secret else (
            "higher" if int(guess) < self.secret else "lower")
        return StepResult((Message("user", hint),), float(hint == "correct!"),
                          terminated=hint == "correct!")


agentgym.register("demo/Guess-v0", GuessEnv, description="Guess a number", max_turns=10)


async def main() -> None:
    await agentgym.check_env(agentgym.make("demo/Guess-v0"))
    async with agentgym.make("demo/Guess-v0") as env:
        await env.reset(seed=0)
        low, high = 1, 10
        while True:
            guess = (low + high) // 2
            result = await env.step(Message("assistant", str(guess)))
            text = result.observation[0].content
            print(f"guess {guess}: {text}")
            if result.done:
                break
            low, high = (guess + 1, high) if text == "higher" else (low, guess - 1)
        assert result.reward == 1.0


if __name__ == "__main__":
    asyncio.run(main())
