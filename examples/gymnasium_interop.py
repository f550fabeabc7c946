"""Use an agentgym env through the plain Gymnasium API."""

import gymnasium

env = gymnasium.make("agentgym:agentgym/Arithmetic-v0")
obs, info = env.reset(seed=0)
print(obs)
obs, reward, terminated, truncated, info = env.step(
    '<tool_call>{"name": "calculator", "arguments": {"expression": "123 * 45"}}</tool_call>')
print("calculator says", obs)
assert obs == "5535"
env.close()
